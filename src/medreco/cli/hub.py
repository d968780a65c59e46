"""Sharing models and data on the Hugging Face Hub: `export`, `push`."""

from __future__ import annotations

import argparse
from pathlib import Path

from .command import Command


def _export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="folder written by save_pretrained")
    parser.add_argument("--out", required=True, help="destination folder")


def _export(args: argparse.Namespace) -> int:
    """Re-save a model folder Hub-ready: model, processor, their code and the model card."""
    from ..hub import export_folder

    print(export_folder(args.checkpoint, args.out))
    return 0


def _push_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "folder",
        help="a saved model or LoRA adapter folder (save_pretrained, medreco train, medreco export), "
        "or a mined folder (medreco mine), pushed as a dataset",
    )
    parser.add_argument("--repo-id", required=True, help="the Hub repository, ORG/NAME (created when missing)")
    parser.add_argument("--private", action="store_true", help="create the repository private")
    parser.add_argument("--revision", help="branch to push to (created when missing; default main)")
    parser.add_argument("--message", help="commit message")
    parser.add_argument(
        "--base-model", help="for a LoRA adapter: the Hub id of the model it applies to (local paths never go up)"
    )
    mined = parser.add_argument_group("mined folders (pushed as a dataset, pseudonymised)")
    mined.add_argument("--include-reports", action="store_true", help="also push the report text (off by default)")
    mined.add_argument(
        "--pseudonyms", help="where to keep the pseudonym table, which stays local (default: FOLDER.pseudonyms.json)"
    )


def _push(args: argparse.Namespace) -> int:
    """Upload a saved model, adapter or mined folder to the Hugging Face Hub."""
    folder = Path(args.folder)
    if (folder / "studies").is_dir():
        from ..data.mining import push_mined_dataset

        pseudonyms = Path(args.pseudonyms or f"{folder.resolve()}.pseudonyms.json")
        result = push_mined_dataset(
            folder, args.repo_id, pseudonyms, args.private, args.revision, args.include_reports, args.message
        )
        print(f"pseudonym table (keep it local): {pseudonyms}")
    else:
        if args.include_reports or args.pseudonyms:
            raise ValueError(f"{folder}: --include-reports and --pseudonyms are for mined folders (medreco mine)")
        from ..hub import push_to_hub

        result = push_to_hub(
            folder, args.repo_id, args.private, args.revision, args.message, base_model=args.base_model
        )
    print(f"{folder} -> {result.repo_id}@{result.revision} (commit {result.commit[:12]}): {result.url}")
    return 0


COMMANDS = (
    Command(
        "export", "re-save a model folder Hub-ready: model, processor, code, model card", _export_arguments, _export
    ),
    Command("push", "upload a model, LoRA adapter or mined dataset to the Hugging Face Hub", _push_arguments, _push),
)
