"""Reading images: `inspect`, `preprocess`, `deidentify`."""

from __future__ import annotations

import argparse
import errno
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
    from ..processing.readers.nifti import NIFTI_SUFFIXES, nifti_volume_count

    path = Path(args.path)
    report: dict = {"path": str(path)}
    if path.is_dir():
        report["series"] = list_dicom_series(path)
        if len(report["series"]) > 1 and args.series is None:
            report["note"] = "several series: pass --series SELECTOR (listed in brackets) to inspect one"
            return _print_report(report, args.json)
    volume_index = args.volume_index
    if volume_index is None and path.is_file() and path.name.lower().endswith(NIFTI_SUFFIXES):
        volumes = nifti_volume_count(path)
        if volumes > 1:  # described, not refused: the first volume stands for the others
            volume_index = 0
            report["volumes"] = volumes
            report["note"] = f"a 4D image of {volumes} volumes: the first is described; --volume-index N picks one"
    image = load_image(path, ReaderOptions(series=args.series, volume_index=volume_index))
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
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--model", help="match this saved model's input (its processor, or the one its config implies)")
    sizes.add_argument("--preset", help="match a preset's vision encoder (tiny, paper or a preset .json file)")
    parser.add_argument("--window", type=window, help="CT only: the HU window LOW,HIGH mapped to [0, 1]")
    parser.add_argument(
        "--dtype", choices=["float32", "float16", "bfloat16"], default="float32", help="precision of the saved tensor"
    )


def window(text: str) -> tuple[float, float]:
    """An argparse type: LOW,HIGH with LOW < HIGH."""
    try:
        low, high = (float(value) for value in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not LOW,HIGH (e.g. -160,240)") from None
    if not low < high:
        raise argparse.ArgumentTypeError(f"{text!r}: LOW must be below HIGH")
    return low, high


def _preprocess_processor(args: argparse.Namespace):
    """The image processor of --model or --preset (the paper's recipes by default), --window applied."""
    from ..processing import MedReCoImageProcessor

    if args.model:
        from ..hub.download import model_folder

        processor = MedReCoImageProcessor.from_pretrained(model_folder(args.model))
    elif args.preset:
        from ..presets import preset_fields
        from ..processing.from_config import image_processor_for

        processor = image_processor_for(preset_fields(args.preset, "vision"))
    else:
        processor = MedReCoImageProcessor()
    processor.recipe(args.modality)  # a modality the model does not read: refused here, named
    if args.window is None:
        return processor
    if processor.recipe(args.modality).kind != "ct":
        raise ValueError(f"--window is a CT window; {args.modality} is scaled by percentiles or its display window")
    recipes = {**processor.recipes, args.modality: {**processor.recipes[args.modality], "window": list(args.window)}}
    return MedReCoImageProcessor(modalities=processor.modalities, recipes=recipes)


def _preprocess(args: argparse.Namespace) -> int:
    """The model-ready tensor of one input, as safetensors with key `pixel_values`."""
    import torch

    from ..processing import ReaderOptions, load_image, write_model_input

    if Path(args.out).is_dir():  # before any work, not after it
        raise IsADirectoryError(errno.EISDIR, "a folder; --out names the .safetensors file to write", args.out)
    processor = _preprocess_processor(args)
    options = ReaderOptions(series=args.series, volume_index=args.volume_index, nan_policy=args.nan_policy)
    image = load_image(args.path, options)
    tensor = write_model_input(image, args.modality, args.out, processor=processor, dtype=getattr(torch, args.dtype))
    for warning in image.warnings:  # assumed spacing, replaced NaNs...: the user decides if it matters
        print(f"medreco preprocess: warning: {warning}", file=sys.stderr)
    size = tensor.numel() * tensor.element_size() / 1e6
    print(f"{args.out}: pixel_values {tuple(tensor.shape)} {args.dtype} ({size:.1f} MB)")
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
