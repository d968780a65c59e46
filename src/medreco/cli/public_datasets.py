"""Public datasets: a mining `manifest` from MIMIC-CXR's or CT-RATE's own layout."""

from __future__ import annotations

import argparse

from .command import Command


def _manifest_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dataset", choices=["mimic-cxr", "ct-rate"], help="the public dataset in its published layout")
    parser.add_argument("root", help="the dataset's root folder")
    parser.add_argument("--out", required=True, help="manifest .jsonl to write (CT-RATE: also OUT_STEM.volumes/)")
    parser.add_argument(
        "--metadata",
        nargs="+",
        help="MIMIC-CXR: mimic-cxr-2.0.0-metadata.csv(.gz) (view positions, study dates); CT-RATE: "
        "train_metadata.csv and/or validation_metadata.csv (voxel size, HU rescale). Default: the published place",
    )
    parser.add_argument(
        "--split-csv", help="MIMIC-CXR: mimic-cxr-2.0.0-split.csv(.gz), the official split (default: beside files/)"
    )
    parser.add_argument(
        "--reports", nargs="+", help="CT-RATE reports CSV(s) (default: dataset/radiology_text_reports/*_reports.csv)"
    )
    parser.add_argument(
        "--headers-fixed",
        action="store_true",
        help="CT-RATE volumes already rewritten by its fix_metadata.py: read their headers as they are",
    )


def _manifest(args: argparse.Namespace) -> int:
    """A mining manifest from a public dataset's own layout, with its official split."""
    from ..data import public_datasets

    if args.dataset == "mimic-cxr":
        if args.reports or args.headers_fixed:
            raise ValueError("--reports and --headers-fixed are CT-RATE options")
        if args.metadata and len(args.metadata) > 1:
            raise ValueError("mimic-cxr takes one --metadata file (mimic-cxr-2.0.0-metadata.csv)")
        metadata = args.metadata[0] if args.metadata else None
        rows = public_datasets.mimic_cxr(args.root, metadata, split_csv=args.split_csv)
    else:
        if args.split_csv:
            raise ValueError("--split-csv is a MIMIC-CXR option (CT-RATE's split is its train/valid folders)")
        rows = public_datasets.ct_rate(args.root, args.reports, args.metadata, headers_fixed=args.headers_fixed)
    print(f"{public_datasets.write_manifest(rows, args.out)} studies written to {args.out}")
    return 0


COMMANDS = (Command("manifest", "write a mining manifest from MIMIC-CXR or CT-RATE", _manifest_arguments, _manifest),)
