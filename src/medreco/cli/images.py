"""Reading images: `inspect`, `preprocess`, `deidentify`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .command import Command, modality

SERIES_HELP = (
    "in a folder with several series: its SeriesNumber, SeriesInstanceUID (or its start), "
    "or the key:... selector `medreco inspect FOLDER` lists"
)


def _inspect_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="a DICOM file or folder, NIfTI, PNG or JPEG")
    parser.add_argument("--series", help=SERIES_HELP)
    parser.add_argument("--volume-index", type=int, help="volume of a 4D NIfTI")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _inspect(args: argparse.Namespace) -> int:
    """What a file or folder holds: modality, shape, spacing, orientation, series, warnings."""
    from ..processing import ReaderOptions, list_dicom_series, load_image

    path = Path(args.path)
    report: dict = {"path": str(path)}
    if path.is_dir():
        report["series"] = list_dicom_series(path)
        if len(report["series"]) > 1 and args.series is None:
            report["note"] = "several series: pass --series SELECTOR (listed in brackets) to inspect one"
            return _print_report(report, args.json)
    image = load_image(path, ReaderOptions(series=args.series, volume_index=args.volume_index))
    report.update(image.describe())
    return _print_report(report, args.json)


def _print_report(report: dict, as_json: bool) -> int:
    if as_json:
        print(json.dumps(report, indent=2))
        return 0
    for key, value in report.items():
        if key == "series":
            print("series:")
            for item in value:
                print(f"  [{item['selector']}] {item['modality']} {item['files']} file(s) {item['description']!r}")
        elif key == "warnings":
            for warning in value:
                print(f"warning: {warning}")
        elif key != "affine":
            print(f"{key}: {value}")
    return 0


def _preprocess_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="a DICOM file or folder, NIfTI, PNG or JPEG")
    parser.add_argument(
        "--modality",
        required=True,
        type=modality,
        help="the image's modality: chest_ct, chest_xray, ... (or cxr, MR, US)",
    )
    parser.add_argument("--out", required=True, help="output .safetensors file")
    parser.add_argument("--series", help=SERIES_HELP)
    parser.add_argument("--volume-index", type=int, help="volume of a 4D NIfTI")
    parser.add_argument(
        "--nan-policy",
        choices=["raise", "zero"],
        default="raise",
        help="NaN voxels: refuse the image, or read them as 0",
    )


def _preprocess(args: argparse.Namespace) -> int:
    """The model-ready tensor of one input, as safetensors with key `pixel_values`."""
    from ..processing import ReaderOptions, load_image, write_model_input

    options = ReaderOptions(series=args.series, volume_index=args.volume_index, nan_policy=args.nan_policy)
    image = load_image(args.path, options)
    tensor = write_model_input(image, args.modality, args.out)
    for warning in image.warnings:  # assumed spacing, replaced NaNs...: the user decides if it matters
        print(f"medreco preprocess: warning: {warning}", file=sys.stderr)
    print(f"{args.out}: pixel_values {tuple(tensor.shape)}")
    return 0


def _deidentify_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", help="a DICOM file or a folder")
    parser.add_argument("destination", help="output file or folder")
    parser.add_argument(
        "--salt",
        help="secret that makes the pseudonymous UIDs unguessable; keep it, and the same across exports "
        "(default: a public one, with a warning)",
    )


SKIPPED_SHOWN = 5  # per reason; the rest are counted


def _deidentify(args: argparse.Namespace) -> int:
    """Copy DICOM files de-identified to the DICOM PS3.15 Basic Profile (UIDs pseudonymised)."""
    from ..processing.privacy import DEFAULT_SALT, deidentify_tree

    report = deidentify_tree(args.source, args.destination, salt=args.salt or DEFAULT_SALT)
    if not args.salt:  # after the work: a failure stays one line
        print(
            f"medreco deidentify: warning: no --salt, so the public default ({DEFAULT_SALT!r}) was used: anyone "
            "can recompute these pseudonymous UIDs from the original ones; pass a secret --salt for a real export",
            file=sys.stderr,
        )
    print(f"{len(report.written)} file(s) written under {args.destination}, {len(report.skipped)} skipped")
    by_reason: dict[str, list[str]] = {}
    for relative, reason in report.skipped:
        by_reason.setdefault(reason, []).append(str(relative))
    for reason, files in by_reason.items():
        more = f" and {len(files) - SKIPPED_SHOWN} more" if len(files) > SKIPPED_SHOWN else ""
        print(f"  skipped ({reason}): {', '.join(files[:SKIPPED_SHOWN])}{more}")
    return 0


COMMANDS = (
    Command("inspect", "describe a DICOM file or folder, NIfTI or PNG/JPEG", _inspect_arguments, _inspect),
    Command("preprocess", "write the model-ready tensor of an image (safetensors)", _preprocess_arguments, _preprocess),
    Command("deidentify", "copy DICOM files without identifying attributes", _deidentify_arguments, _deidentify),
)
