"""Readers for public datasets and benchmarks, in their published layouts (see the docs of each).

Dataset adapters yield manifest rows (`image`, `report`, `patient_id`, `modality`, `study_id`,
`study_date`) that `medreco mine` consumes; benchmark adapters yield evaluation items. The data
themselves need credentialed access and are not shipped."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..atomic import atomic_path
from ..errors import read_text_file
from .mining.pipeline import ManifestError


def _read_csv(path: Path) -> list[dict]:
    if not path.exists():
        raise ManifestError(f"{path}: no such file")
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def _require(rows: list[dict], columns: tuple[str, ...], path: Path) -> None:
    if rows and (missing := [c for c in columns if c not in rows[0]]):
        raise ManifestError(f"{path}: missing column(s) {', '.join(missing)}")


def _iso(date: str) -> str:
    return f"{date[:4]}-{date[4:6]}-{date[6:8]}" if len(date) == 8 and date.isdigit() else date


# ------------------------------------------------------------------------------------- datasets


def mimic_cxr(root: str | Path, metadata_csv: str | Path | None = None, prefer_view: str = "PA") -> Iterator[dict]:
    """MIMIC-CXR (DICOM) or MIMIC-CXR-JPG: `files/pXX/pSUBJECT/sSTUDY/<dicom_id>.dcm|.jpg` with the
    report at `files/pXX/pSUBJECT/sSTUDY.txt`. With the metadata CSV, the `prefer_view` image of each
    study is chosen and `StudyDate` is used."""
    root = Path(root)
    if not (root / "files").is_dir():
        raise ManifestError(f"{root}: not a MIMIC-CXR folder (no files/ folder in it)")
    metadata = {}
    if metadata_csv is not None:
        rows = _read_csv(Path(metadata_csv))
        _require(rows, ("dicom_id", "subject_id", "study_id"), Path(metadata_csv))
        metadata = {r["dicom_id"]: r for r in rows}
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
        yield {
            "study_id": study_dir.name,
            "patient_id": report.parent.name,
            "modality": "chest_xray",
            "image": str(image),
            "report": report.read_text(),
            "study_date": _iso(info.get("StudyDate", "")),
        }
    if not found:
        raise ManifestError(f"{root}: no study with a report and an image (files/pXX/pSUBJECT/sSTUDY.txt and sSTUDY/)")


def ct_rate(root: str | Path, reports_csv: str | Path) -> Iterator[dict]:
    """CT-RATE: volumes `dataset/{train,valid}/train_1/train_1_a/train_1_a_1.nii.gz` (patient / scan /
    reconstruction) and the reports CSV (VolumeName, Findings_EN, Impressions_EN). One
    reconstruction per scan (the first listed) keeps studies independent."""
    root, reports_csv = Path(root), Path(reports_csv)
    if not (root / "dataset").is_dir():
        raise ManifestError(f"{root}: not a CT-RATE folder (no dataset/ folder in it)")
    rows = _read_csv(reports_csv)
    _require(rows, ("VolumeName", "Findings_EN", "Impressions_EN"), reports_csv)
    seen_scans = set()
    for row in rows:
        name = row["VolumeName"]
        parts = name.replace(".nii.gz", "").split("_")
        if len(parts) < 4:
            raise ManifestError(f"{reports_csv}: unexpected VolumeName {name!r}")
        patient, scan = "_".join(parts[:2]), "_".join(parts[:3])
        if scan in seen_scans:
            continue
        seen_scans.add(scan)
        split_dir = "valid" if parts[0] == "valid" else "train"
        yield {
            "study_id": scan,
            "patient_id": patient,
            "modality": "chest_ct",
            "image": str(root / "dataset" / split_dir / patient / scan / name),
            "report": f"Findings: {row['Findings_EN'].strip()}\n\nImpressions: {row['Impressions_EN'].strip()}\n",
        }


def write_manifest(rows: Iterator[dict], path: str | Path) -> int:
    """Write rows as a JSONL manifest (atomically); returns the number written."""
    count = 0
    with atomic_path(path) as temporary, open(temporary, "w") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
            count += 1
    return count


# ----------------------------------------------------------------------------------- benchmarks

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
    rows = _read_csv(path)
    _require(rows, ("subject_id", "study_id", "dicom_id", "previous_study_id", "previous_dicom_id"), path)
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
    rows = _read_csv(path)
    _require(rows, ("study_id", "subject_id", "ref_id", "question_type", "question", "answer", "split"), path)
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
    "cxr_align",
    "medical_diff_vqa",
    "mimic_cxr",
    "mmxu",
    "ms_cxr_t",
    "write_manifest",
]
