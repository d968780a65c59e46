"""The `medreco` command line. Each sub-command is one small function over the Python API."""

from __future__ import annotations

import argparse
import json
import logging
import sys


def _info(args: argparse.Namespace) -> int:
    """Parameter counts of every model family at each preset size."""
    from .factory import FAMILIES, PRESETS, parameter_summary

    presets = [args.preset] if args.preset else sorted(PRESETS)
    summary = {preset: {family: parameter_summary(family, preset) for family in FAMILIES} for preset in presets}
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    for preset, families in summary.items():
        print(f"preset {preset!r}")
        for family, counts in families.items():
            active = {name: n for name, n in counts.items() if name != "total"}
            print(f"  {family:<10} total {_human(counts['total']):>8}")
            for modality, n in active.items():
                print(f"  {'':<10}   active for {modality:<13} {_human(n):>8}")
    return 0


def _export(args: argparse.Namespace) -> int:
    """Re-save a checkpoint with its code for `trust_remote_code=True` loading."""
    from transformers import AutoConfig, AutoModel, AutoModelForImageTextToText

    from .hub import export_for_remote_code

    config = AutoConfig.from_pretrained(args.checkpoint)
    auto = AutoModelForImageTextToText if config.model_type == "medreco_vlm" else AutoModel
    model = auto.from_pretrained(args.checkpoint)
    print(export_for_remote_code(model, args.out))
    return 0


def _human(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return str(n)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="medreco", description="Comparative reasoning in radiology.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress at INFO level")
    commands = parser.add_subparsers(dest="command", required=True)

    info = commands.add_parser("info", help="parameter counts of each model (total and active per modality)")
    info.add_argument("--preset", choices=["paper", "tiny"], help="only this size (default: all)")
    info.add_argument("--json", action="store_true", help="machine-readable output")
    info.set_defaults(handler=_info)

    export = commands.add_parser("export", help="save a checkpoint with its code for trust_remote_code loading")
    export.add_argument("checkpoint", help="folder written by save_pretrained")
    export.add_argument("--out", required=True, help="destination folder")
    export.set_defaults(handler=_export)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
