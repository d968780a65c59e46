"""`medreco info`: the size presets (their files) and the models' parameter counts at each."""

from __future__ import annotations

import argparse
import json

from .command import Command


def _info_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--preset", help="only this size: a packaged preset's name or a preset .json file (default: all)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _info(args: argparse.Namespace) -> int:
    """Parameter counts of every model family at each preset size."""
    from ..presets import FAMILIES, PRESET_FILES, PRESETS, cached_parameter_counts, preset_fields

    presets = [args.preset] if args.preset else sorted(PRESETS)
    for preset in presets:
        preset_fields(preset, "vision")  # an unknown name or a bad file fails here, in one line
    summary = {preset: cached_parameter_counts(preset) or _count(preset, FAMILIES) for preset in presets}
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    for preset, families in summary.items():
        known = PRESET_FILES.get(preset)
        print(f"preset {preset!r} ({known['file'] if known else preset})")
        if known and known["description"]:
            print(f"  {known['description']}")
        for family, counts in families.items():
            active = {name: n for name, n in counts.items() if name != "total"}
            print(f"  {family:<10} total {_human(counts['total']):>8}")
            for modality, n in active.items():
                print(f"  {'':<10}   active for {modality:<13} {_human(n):>8}")
    return 0


def _count(preset: str, families: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """Counted by building each model on the meta device (a preset file of one's own, or a changed one)."""
    from ..factory import parameter_summary

    return {family: parameter_summary(family, preset) for family in families}


def _human(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return str(n)


COMMANDS = (Command("info", "parameter counts of each model (total and active per modality)", _info_arguments, _info),)
