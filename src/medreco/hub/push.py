"""Share a saved model folder on the Hugging Face Hub, through `huggingface_hub`.

The folder goes up as it is (weights, config, processor, tokenizer, generation config, model card
and the code `save_pretrained` writes beside them); nothing is read from or added about the images
it was trained on. Loading it back, with or without medreco installed:
`AutoModel.from_pretrained("org/name", revision=..., trust_remote_code=True)`. A LoRA adapter
saved alone (TRL's `--use_peft`) goes up the same way and loads with `PeftModel.from_pretrained`."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..errors import MedReCoError
from .card import FAMILIES

logger = logging.getLogger(__name__)
# Never uploaded: training checkpoints and caches a run folder may hold next to the model, and the
# recipe or arguments as run (`training_config.json`, `training_args.bin`), whose paths name folders of
# the machine that trained it.
IGNORE_PATTERNS = [
    "checkpoint-*",
    "**/checkpoint-*",
    "*.tmp",
    "**/__pycache__/**",
    ".cache/**",
    "training_config.json",
    "training_args.bin",  # TRL / Trainer's arguments: a pickle, with this machine's paths
]
TOP_LEVEL_IGNORED = ("checkpoint-*", "*.tmp", "__pycache__", ".cache", "training_config.json", "training_args.bin")


class HubPushError(MedReCoError, ValueError):
    """A folder that is not a saved model, or a repository name the Hub would refuse."""


@dataclass(frozen=True)
class PushResult:
    repo_id: str
    revision: str
    commit: str  # the commit's id on the Hub
    url: str


def push_to_hub(
    folder: str | Path,
    repo_id: str,
    private: bool = False,
    revision: str | None = None,
    commit_message: str | None = None,
    token: str | None = None,
    base_model: str | None = None,
) -> PushResult:
    """Upload a `save_pretrained` (or `medreco export`) folder, or a LoRA adapter saved on its own
    (PEFT's `adapter_config.json` + `adapter_model.safetensors`), to the model repository `repo_id`
    ("org/name"), creating the repository (and the branch `revision`) when missing.

    What goes up is a staged copy of the folder (hard links: no weights are copied) in which the
    model card's code loads `repo_id`, and an adapter's base model, when it was a local path (PEFT
    records the path it loaded), becomes `base_model` (the base's Hub id) or is left out: no path
    of this machine reaches the Hub."""
    folder = Path(folder)
    if not any((folder / name).is_file() for name in ("config.json", "adapter_config.json")):
        raise HubPushError(
            f"{folder}: not a saved model or adapter (no config.json or adapter_config.json); "
            "push the folder save_pretrained wrote"
        )
    check_repo_id(repo_id)
    _warn_about_mined_vocabulary(folder)
    with _staged(folder) as staging:
        _point_the_card_at(staging, repo_id)
        if (staging / "adapter_config.json").is_file():
            _replace_local_base_model(staging, base_model)
        return upload_folder(
            staging, repo_id, "model", private, revision, commit_message or f"Upload {folder.name} with medreco", token
        )


def check_repo_id(repo_id: str) -> None:
    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise HubPushError(f"{repo_id!r}: a Hub repository is named ORG/NAME")


@contextmanager
def _staged(folder: Path) -> Iterator[Path]:
    """A copy of `folder` beside it, hard-linked where the file system allows, whose small text
    files are rewritten as new files (the originals are never touched); removed afterwards."""
    staging = folder.parent / f".{folder.name}.push"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        shutil.copytree(folder, staging, copy_function=_link_or_copy, ignore=shutil.ignore_patterns(*TOP_LEVEL_IGNORED))
    except OSError as error:
        shutil.rmtree(staging, ignore_errors=True)
        raise HubPushError(f"{folder}: cannot stage the upload beside it ({error.strerror or error})") from None
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _rewrite(path: Path, text: str) -> None:
    path.unlink()  # a hard link: write a new file, never through to the original
    path.write_text(text)


def _point_the_card_at(folder: Path, repo_id: str) -> None:
    """A medreco card's code loads the repository it is read in: its placeholder name
    (`medreco-<family>`) in `from_pretrained(...)` and `pipeline(..., model=...)` becomes `repo_id`;
    any other name is left as written."""
    card = folder / "README.md"
    if card.is_file():
        text = card.read_text()
        placeholder = "|".join(f"medreco-{family}" for family in FAMILIES)
        loader = r'\.from_pretrained\(|\bpipeline\("[\w-]+", model='
        pointed = re.sub(rf'({loader})"(?:{placeholder})"', rf'\1"{repo_id}"', text)
        if pointed != text:
            _rewrite(card, pointed)


def _replace_local_base_model(folder: Path, base_model: str | None) -> None:
    """PEFT writes the base model's path as loaded into `adapter_config.json` and the card's
    `base_model`; a local path becomes `base_model` (a Hub id), or is left out."""
    config_path = folder / "adapter_config.json"
    config = json.loads(config_path.read_text())
    recorded = config.get("base_model_name_or_path")
    if not recorded or not _is_local(recorded):
        return
    if base_model is None:
        logger.warning(
            "the adapter's base model is a local path (%s): left out of the upload; "
            "pass --base-model ORG/NAME to name the base on the Hub",
            recorded,
        )
    config["base_model_name_or_path"] = base_model
    _rewrite(config_path, json.dumps(config, indent=2, sort_keys=True) + "\n")
    card_path = folder / "README.md"
    if card_path.is_file():
        from huggingface_hub import ModelCard

        card = ModelCard.load(card_path)
        card.data.base_model = base_model
        tags = [t for t in card.data.tags or [] if recorded not in t]
        card.data.tags = [*tags, f"base_model:adapter:{base_model}"] if base_model else tags
        _rewrite(card_path, str(card))


def _is_local(name: str) -> bool:
    """A path of this machine rather than a Hub id (`gpt2`, `org/name`)."""
    return Path(name).is_absolute() or name.startswith((".", "~")) or name.count("/") > 1 or Path(name).exists()


def upload_folder(
    folder: Path,
    repo_id: str,
    repo_type: str,
    private: bool = False,
    revision: str | None = None,
    commit_message: str | None = None,
    token: str | None = None,
) -> PushResult:
    """Make the Hub repository `repo_id` (of `repo_type`, "model" or "dataset") hold exactly `folder`
    (less `IGNORE_PATTERNS`) on branch `revision`, creating repository and branch when missing."""
    from huggingface_hub import HfApi

    check_repo_id(repo_id)
    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, private=private, exist_ok=True, repo_type=repo_type)
        if private and not api.repo_info(repo_id, repo_type=repo_type).private:
            raise HubPushError(f"{repo_id}: the repository exists and is public; --private would not make it private")
        if revision is not None and revision != "main":
            api.create_branch(repo_id, branch=revision, exist_ok=True, repo_type=repo_type)
        info = api.upload_folder(
            repo_id=repo_id,
            folder_path=folder,
            revision=revision,
            commit_message=commit_message or f"Upload {folder.name} with medreco",
            ignore_patterns=IGNORE_PATTERNS,
            delete_patterns="*",  # files of an earlier push that this folder no longer has
            repo_type=repo_type,
        )
    except (OSError, *_transport_errors()) as error:  # huggingface_hub's HTTP, connection, offline errors
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise HubPushError(f"{repo_id}: the Hub did not take the upload ({reason})") from error
    logger.info("pushed %s to %s %s (%s)", folder, repo_type, repo_id, info.oid)
    return PushResult(repo_id, revision or "main", info.oid, info.commit_url)


def _warn_about_mined_vocabulary(folder: Path) -> None:
    """A tokenizer learned from the training conversations (`tokenizer: mined`) holds words of the
    reports it was mined from: say so before it leaves the machine."""
    recipe = folder / "training_config.json"
    if recipe.is_file() and json.loads(recipe.read_text()).get("tokenizer") == "mined":
        logger.warning(
            "%s: its vocabulary was learned from the training reports' words (tokenizer: mined); "
            "push it only if those reports may be shared",
            folder,
        )


def _transport_errors() -> tuple[type[Exception], ...]:
    """The HTTP library's own errors (huggingface_hub 2 uses httpx2, whose connection errors are no OSError)."""
    try:
        import httpx2
    except ImportError:
        return ()
    return (httpx2.HTTPError,)


__all__ = ["HubPushError", "IGNORE_PATTERNS", "PushResult", "check_repo_id", "push_to_hub", "upload_folder"]
