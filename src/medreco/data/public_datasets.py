"""Readers for public datasets and public evaluation sets, in their published layouts (see the docs of each).

Dataset readers yield manifest rows (`image`, `report`, `patient_id`, `modality`, `study_id`,
`study_date`, and `split`: the dataset's official split in medreco's names) that `medreco mine`
consumes; evaluation-set readers yield evaluation items. CT-RATE rows also carry the voxel size and
rescale from its metadata CSV, which `write_manifest` turns into `.volume.json` files that every
image reader applies. The data themselves need credentialed access and are not shipped."""

from __future__ import annotations

import csv
import gzip
import json
import logging
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..atomic import atomic_path
from ..errors import read_text_file
from ..processing.readers import VOLUME_FILE_SUFFIX, VolumeHeader, write_volume_file
from .mining.pipeline import ManifestError

logger = logging.getLogger(__name__)

# The official splits in medreco's names: MIMIC-CXR's split CSV, CT-RATE's folders (its paper and
# MedReCo test on CT-RATE's validation set, so `valid` maps to test by default).
MIMIC_SPLITS = {"train": "train", "validate": "validation", "test": "test"}
CT_RATE_SPLITS = {"train": "train", "valid": "test"}
HEADER_COLUMNS = ("spacing", "rescale_slope", "rescale_intercept", "orientation", "origin")


def _read_csv(path: Path, columns: tuple[str, ...] = (), what: str = "CSV file") -> list[dict]:
    """Rows of a CSV (or .csv.gz) file that has `columns` (typed errors naming the file)."""
    if not path.is_file():
        raise ManifestError(f"{path}: no such {what}")
    try:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            rows = list(reader)
            header = reader.fieldnames or []
    except (OSError, EOFError, UnicodeDecodeError, csv.Error) as error:
        raise ManifestError(f"{path}: not a readable {what} ({error.__class__.__name__})") from None
    _require(header, columns, path)
    return rows


def _require(header: Sequence[str], columns: tuple[str, ...], path: Path) -> None:
    if missing := [c for c in columns if c not in header]:
        raise ManifestError(f"{path}: missing column(s) {', '.join(missing)}")


def _iso(date: str) -> str:
    return f"{date[:4]}-{date[4:6]}-{date[6:8]}" if len(date) == 8 and date.isdigit() else date


def _published(root: Path, names: Sequence[str]) -> list[Path]:
    """The files of a dataset's published layout that exist under `root`."""
    return [root / name for name in names if (root / name).is_file()]


# ------------------------------------------------------------------------------------- datasets

MIMIC_SPLIT_CSV = ("mimic-cxr-2.0.0-split.csv.gz", "mimic-cxr-2.0.0-split.csv")
MIMIC_METADATA_CSV = ("mimic-cxr-2.0.0-metadata.csv.gz", "mimic-cxr-2.0.0-metadata.csv")


def mimic_split_table(path: str | Path) -> tuple[dict[str, str], dict[str, str]]:
    """`mimic-cxr-2.0.0-split.csv(.gz)`: (dicom_id -> split, study_id -> split), in medreco's names."""
    path = Path(path)
    rows = _read_csv(path, ("dicom_id", "study_id", "split"), "MIMIC-CXR split CSV")
    by_image, by_study = {}, {}
    for number, row in enumerate(rows, 2):
        split = MIMIC_SPLITS.get(row["split"].strip())
        if split is None:
            raise ManifestError(
                f"{path}: line {number}: split {row['split']!r} unknown (expected {', '.join(MIMIC_SPLITS)})"
            )
        by_image[row["dicom_id"].strip()] = split
        by_study[row["study_id"].strip()] = split
    return by_image, by_study


def mimic_cxr(
    root: str | Path,
    metadata_csv: str | Path | None = None,
    prefer_view: str = "PA",
    split_csv: str | Path | None = None,
) -> Iterator[dict]:
    """MIMIC-CXR (DICOM) or MIMIC-CXR-JPG: `files/pXX/pSUBJECT/sSTUDY/<dicom_id>.dcm|.jpg` with the
    report at `files/pXX/pSUBJECT/sSTUDY.txt`. With the metadata CSV, the `prefer_view` image of each
    study is chosen and `StudyDate` is used. With the split CSV, each row's `split` is the official
    one of its image (train, validation for `validate`, test). Both CSVs default to their published
    place beside `files/` (`mimic-cxr-2.0.0-*.csv.gz`) when there."""
    root = Path(root)
    if not (root / "files").is_dir():
        raise ManifestError(f"{root}: not a MIMIC-CXR folder (no files/ folder in it)")
    metadata_csv = metadata_csv or next(iter(_published(root, MIMIC_METADATA_CSV)), None)
    split_csv = split_csv or next(iter(_published(root, MIMIC_SPLIT_CSV)), None)
    metadata = {}
    if metadata_csv is not None:
        rows = _read_csv(Path(metadata_csv), ("dicom_id", "subject_id", "study_id"), "MIMIC-CXR metadata CSV")
        metadata = {r["dicom_id"]: r for r in rows}
    splits = mimic_split_table(split_csv) if split_csv is not None else None
    if splits is None:
        logger.warning("%s: no official split CSV (%s); `medreco mine` will split by patient", root, MIMIC_SPLIT_CSV[0])
    found = False
    for report in sorted((root / "files").glob("p*/p*/s*.txt")):
        study_dir = report.with_suffix("")
        images = sorted(p for p in study_dir.glob("*") if p.suffix.lower() in (".dcm", ".jpg", ".jpeg", ".png"))
        if not images:
            continue
        found = True
        views = [metadata.get(p.stem, {}).get("ViewPosition") for p in images]
        image = next((p for p, v in zip(images, views) if v == prefer_view), images[0])
        info = metadata.get(image.stem, {})
        row = {
            "study_id": study_dir.name,
            "patient_id": report.parent.name,
            "modality": "chest_xray",
            "image": str(image),
            "report": report.read_text(),
            "study_date": _iso(info.get("StudyDate", "")),
        }
        if splits is not None:
            split = splits[0].get(image.stem) or splits[1].get(study_dir.name.removeprefix("s"))
            if split is None:
                raise ManifestError(f"{split_csv}: no split for study {study_dir.name} (image {image.stem})")
            row["split"] = split
        yield row
    if not found:
        raise ManifestError(f"{root}: no study with a report and an image (files/pXX/pSUBJECT/sSTUDY.txt and sSTUDY/)")


CT_RATE_REPORTS = (
    "dataset/radiology_text_reports/train_reports.csv",
    "dataset/radiology_text_reports/validation_reports.csv",
)
CT_RATE_METADATA = ("dataset/metadata/train_metadata.csv", "dataset/metadata/validation_metadata.csv")
CT_RATE_METADATA_COLUMNS = ("VolumeName", "XYSpacing", "ZSpacing", "RescaleSlope", "RescaleIntercept")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _numbers(row: dict, column: str, count: int, path: Path) -> list[float]:
    """`count` finite numbers from a cell like "[0.75, 0.75]" or "1.5" (typed error otherwise)."""
    text = (row.get(column) or "").strip()
    values = [float(v) for v in _NUMBER.findall(text)]
    if len(values) != count or not all(math.isfinite(v) for v in values):
        raise ManifestError(
            f"{path}: {row.get('VolumeName', '?')}: column {column} holds {text!r}, not {count} number(s)"
        )
    return values


def ct_rate_headers(paths: Sequence[str | Path]) -> dict[str, VolumeHeader]:
    """VolumeName -> the voxel size and rescale of CT-RATE's metadata CSVs (`train_metadata.csv`,
    `validation_metadata.csv`); orientation and origin too where the CSV has them. Only these
    geometric values are read: the CSVs' other (DICOM-derived) columns are not copied anywhere."""
    headers = {}
    for path in map(Path, paths):
        rows = _read_csv(path, CT_RATE_METADATA_COLUMNS, "CT-RATE metadata CSV")
        for row in rows:
            x_y = _numbers(row, "XYSpacing", 2, path)
            spacing = (*x_y, *_numbers(row, "ZSpacing", 1, path))
            if not all(0 < v < 1e5 for v in spacing):
                raise ManifestError(f"{path}: {row['VolumeName']}: spacing {spacing} is not positive")
            slope, intercept = (_numbers(row, c, 1, path)[0] for c in ("RescaleSlope", "RescaleIntercept"))
            if slope == 0:
                raise ManifestError(f"{path}: {row['VolumeName']}: column RescaleSlope is 0")
            orientation = origin = None
            if (row.get("ImageOrientationPatient") or "").strip():
                orientation = tuple(_numbers(row, "ImageOrientationPatient", 6, path))
            if (row.get("ImagePositionPatient") or "").strip():
                origin = tuple(_numbers(row, "ImagePositionPatient", 3, path))
            headers[row["VolumeName"].strip()] = VolumeHeader(spacing, slope, intercept, orientation, origin)
    return headers


def _paths(value: str | Path | Sequence[str | Path] | None) -> list[Path]:
    if value is None:
        return []
    return [Path(value)] if isinstance(value, (str, Path)) else [Path(v) for v in value]


def ct_rate(
    root: str | Path,
    reports_csv: str | Path | Sequence[str | Path] | None = None,
    metadata_csv: str | Path | Sequence[str | Path] | None = None,
    headers_fixed: bool = False,
    splits: dict[str, str] | None = None,
) -> Iterator[dict]:
    """CT-RATE: volumes `dataset/{train,valid}/train_1/train_1_a/train_1_a_1.nii.gz` (patient / scan /
    reconstruction) and the reports CSVs (VolumeName, Findings_EN, Impressions_EN). One
    reconstruction per scan (the first listed) keeps studies independent. `split` is the official one
    (`splits`: train -> train, valid -> test, the paper's test set).

    CT-RATE's NIfTI headers state neither the voxel size nor the HU rescale reliably, so each row
    carries those of the metadata CSVs (`spacing` along the file's i, j, k axes, `rescale_slope`,
    `rescale_intercept`, and `orientation`/`origin` when the CSV has them), which `write_manifest`
    turns into `.volume.json` files. The reports and metadata CSVs default to their published place
    under `root`; `headers_fixed=True` reads volumes already rewritten by CT-RATE's
    `fix_metadata.py` as they are (no metadata)."""
    root = Path(root)
    if not (root / "dataset").is_dir():
        raise ManifestError(f"{root}: not a CT-RATE folder (no dataset/ folder in it)")
    splits = splits or CT_RATE_SPLITS
    reports = _paths(reports_csv) or _published(root, CT_RATE_REPORTS)
    if not reports:
        raise ManifestError(f"{root}: no reports CSV given, and none at {CT_RATE_REPORTS[0]}")
    headers: dict[str, VolumeHeader] | None = None
    if headers_fixed and metadata_csv:
        raise ManifestError(f"{root}: headers_fixed reads the volumes' own headers; give no metadata CSV with it")
    if not headers_fixed:
        metadata = _paths(metadata_csv) or _published(root, CT_RATE_METADATA)
        if not metadata:
            raise ManifestError(
                f"{root}: CT-RATE volumes need the metadata CSV (their NIfTI headers state neither voxel size nor "
                f"HU rescale reliably): none given and none at {CT_RATE_METADATA[0]}; for volumes already fixed "
                "by CT-RATE's fix_metadata.py, use headers_fixed (--headers-fixed)"
            )
        headers = ct_rate_headers(metadata)
    seen_scans = set()
    for reports_path in reports:
        rows = _read_csv(reports_path, ("VolumeName", "Findings_EN", "Impressions_EN"), "CT-RATE reports CSV")
        for row in rows:
            name = row["VolumeName"].strip()
            parts = name.replace(".nii.gz", "").split("_")
            if len(parts) < 4 or parts[0] not in splits:
                raise ManifestError(f"{reports_path}: unexpected VolumeName {name!r}")
            patient, scan = "_".join(parts[:2]), "_".join(parts[:3])
            if scan in seen_scans:
                continue
            seen_scans.add(scan)
            item = {
                "study_id": scan,
                "patient_id": patient,
                "modality": "chest_ct",
                "image": str(root / "dataset" / parts[0] / patient / scan / name),
                "report": f"Findings: {row['Findings_EN'].strip()}\n\nImpressions: {row['Impressions_EN'].strip()}\n",
                "split": splits[parts[0]],
            }
            if headers is not None:
                if name not in headers:
                    raise ManifestError(f"{', '.join(map(str, metadata))}: no metadata row for {name}")
                item.update(headers[name].to_dict())
            yield item


def write_manifest(rows: Iterable[dict], path: str | Path) -> int:
    """Write rows as a JSONL manifest (atomically); returns the number written. A row carrying a
    header (`spacing`, `rescale_slope`, ...: CT-RATE) gets a `.volume.json` file in `<manifest
    stem>.volumes/` beside the manifest, which becomes its `image` (the NIfTI is kept as `volume`):
    every reader of the image then applies that header (`medreco.processing.read_volume_file`)."""
    path = Path(path)
    volumes = path.parent / f"{path.name.split('.')[0]}.volumes"
    rows = list(rows)  # an adapter's errors (a missing metadata row, a bad split) come before any write
    count = 0
    with atomic_path(path) as temporary, open(temporary, "w") as handle:
        for row in rows:
            if "spacing" in row:
                header = VolumeHeader(
                    tuple(row["spacing"]),
                    row.get("rescale_slope", 1.0),
                    row.get("rescale_intercept", 0.0),
                    tuple(row["orientation"]) if row.get("orientation") else None,
                    tuple(row["origin"]) if row.get("origin") else None,
                )
                nifti = Path(row["image"]).absolute()
                name = nifti.name.removesuffix(".gz").removesuffix(".nii") + VOLUME_FILE_SUFFIX
                target = write_volume_file(
                    volumes / name, nifti, header, "dataset metadata (the NIfTI header's is not used)"
                )
                row = {k: v for k, v in row.items() if k not in HEADER_COLUMNS}
                row.update(image=f"{volumes.name}/{target.name}", volume=str(nifti))
            handle.write(json.dumps(row) + "\n")
            count += 1
    return count


# ----------------------------------------------------------------------------------- evaluation sets

MS_CXR_T_FINDINGS = ("consolidation", "edema", "pleural_effusion", "pneumonia", "pneumothorax")


@dataclass
class ProgressionItem:
    """MS-CXR-T: a prior/current pair and per-finding progression (improving/stable/worsening)."""

    subject_id: str
    study_id: str
    dicom_id: str
    previous_study_id: str
    previous_dicom_id: str
    labels: dict[str, str]


def ms_cxr_t(csv_path: str | Path) -> list[ProgressionItem]:
    """`MS_CXR_T_temporal_image_classification_v1.0.0.csv`; `dicom_id` may be a path (its file name is used)."""
    path = Path(csv_path)
    rows = _read_csv(path, ("subject_id", "study_id", "dicom_id", "previous_study_id", "previous_dicom_id"))
    items = []
    for row in rows:
        labels = {f: row[f"{f}_progression"] for f in MS_CXR_T_FINDINGS if row.get(f"{f}_progression")}
        items.append(
            ProgressionItem(
                row["subject_id"],
                row["study_id"],
                Path(row["dicom_id"]).stem,
                row["previous_study_id"],
                Path(row["previous_dicom_id"]).stem,
                labels,
            )
        )
    return items


@dataclass
class ChoiceQuestion:
    """A multiple-choice question about a current and a prior image (MMXU)."""

    id: str
    question: str
    options: list[str]
    answer: str
    current_image: str
    prior_image: str
    content_type: str


def mmxu(jsonl_path: str | Path) -> list[ChoiceQuestion]:
    """`MMXU-test.jsonl`: options {"A": ..., "D": ...} and an answer letter."""
    path = Path(jsonl_path)
    if not path.exists():
        raise ManifestError(f"{path}: no such file")
    items = []
    for number, line in enumerate(read_text_file(path, "MMXU JSONL file").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            options = [row["options"][letter] for letter in sorted(row["options"])]
            items.append(
                ChoiceQuestion(
                    str(row["id"]),
                    row["question"],
                    options,
                    row["answer"].strip().upper()[:1],
                    row["cur_image_path"],
                    row["prior_image_path"],
                    row.get("content_type", ""),
                )
            )
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise ManifestError(f"{path}: line {number} is not an MMXU item ({error.__class__.__name__})") from None
    return items


@dataclass
class DifferenceQuestion:
    """Medical-Diff-VQA: a question about a main study against a reference (earlier) study."""

    study_id: str
    subject_id: str
    reference_study_id: str
    question_type: str
    question: str
    answer: str
    split: str


def medical_diff_vqa(
    csv_path: str | Path, question_types: tuple[str, ...] = ("difference",), split: str | None = None
) -> list[DifferenceQuestion]:
    """`mimic_pair_questions.csv` filtered to `question_types` (difference by default) and a split."""
    path = Path(csv_path)
    rows = _read_csv(path, ("study_id", "subject_id", "ref_id", "question_type", "question", "answer", "split"))
    return [
        DifferenceQuestion(
            r["study_id"], r["subject_id"], r["ref_id"], r["question_type"], r["question"], r["answer"], r["split"]
        )
        for r in rows
        if (not question_types or r["question_type"] in question_types) and (split is None or r["split"] == split)
    ]


@dataclass
class NegationCase:
    """CXR-Align: a report and its versions with one entity negated or omitted."""

    case_id: str
    entity: str
    report: str
    negated: str
    omitted: str


def cxr_align(json_path: str | Path, source: str = "mimic") -> list[NegationCase]:
    """`cxr-align.json`: task A prefers `report` over `negated`, task B over `omitted`."""
    path = Path(json_path)
    try:
        data = json.loads(read_text_file(path, "JSON file"))[source]
    except FileNotFoundError:
        raise ManifestError(f"{path}: no such file") from None
    except (json.JSONDecodeError, KeyError) as error:
        raise ManifestError(
            f"{path}: not a CXR-Align file with a {source!r} part ({error.__class__.__name__})"
        ) from None
    return [
        NegationCase(case, item["chosen"], item["report"], item["negation"], item["omitted"])
        for case, item in data.items()
    ]


__all__ = [
    "ChoiceQuestion",
    "DifferenceQuestion",
    "NegationCase",
    "ProgressionItem",
    "ct_rate",
    "ct_rate_headers",
    "cxr_align",
    "medical_diff_vqa",
    "mimic_cxr",
    "mimic_split_table",
    "mmxu",
    "ms_cxr_t",
    "write_manifest",
]
