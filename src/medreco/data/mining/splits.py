"""Patient-level splits made before any pairing, and the leakage rules of MedReCo Table S2.

Splits are assigned by a salted hash of the patient id, so a patient keeps its split when the
archive grows, and every study of a patient lands in the same split."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence

from ...errors import MedReCoError

DEFAULT_FRACTIONS = {"train": 0.8, "validation": 0.1, "test": 0.1}


class LeakageError(MedReCoError, ValueError):
    """A derived sample mixes splits, or a patient appears in more than one split."""


def assign_splits(
    patient_ids: Iterable[str], fractions: Mapping[str, float] | None = None, salt: str = "medreco"
) -> dict[str, str]:
    """patient id -> split name, by fractions (which must sum to 1)."""
    fractions = dict(fractions or DEFAULT_FRACTIONS)
    if abs(sum(fractions.values()) - 1.0) > 1e-6 or any(f < 0 for f in fractions.values()):
        raise ValueError(f"split fractions must be non-negative and sum to 1, got {fractions}")
    bounds, total = [], 0.0
    for name, fraction in fractions.items():
        total += fraction
        bounds.append((total, name))
    assignment = {}
    for patient in dict.fromkeys(patient_ids):
        digest = hashlib.sha256(f"{salt}:{patient}".encode()).digest()
        position = int.from_bytes(digest[:8], "big") / 2**64
        assignment[patient] = next((name for bound, name in bounds if position < bound), bounds[-1][1])
    return assignment


SPLIT_NAMES = ("train", "validation", "test", "external")


def official_patient_splits(rows: Iterable[Mapping[str, str]]) -> dict[str, str]:
    """patient id -> split from rows carrying a dataset's official `split` (MIMIC-CXR's split CSV,
    CT-RATE's train/valid folders, as the adapters write it). Raises `LeakageError` when a patient's
    studies lie in different splits: pairs of that patient's studies would cross them."""
    assignment: dict[str, str] = {}
    for row in rows:
        patient, split = row["patient_id"], row["split"]
        if assignment.setdefault(patient, split) != split:
            raise LeakageError(
                f"the manifest's official splits put patient {patient} in both {assignment[patient]} and {split}; "
                "fix the manifest's split column (or remove it to split by patient hash)"
            )
    return assignment


def study_splits(study_patients: Mapping[str, str], patient_splits: Mapping[str, str]) -> dict[str, str]:
    """study id -> split, through the study's patient."""
    return {study: patient_splits[patient] for study, patient in study_patients.items()}


def check_sample(studies: Sequence[str], study_split: Mapping[str, str], kind: str = "sample") -> str:
    """The split shared by all studies of a derived sample (pair, triplet, question); raises if they differ."""
    splits = {study_split[s] for s in studies}
    if len(splits) != 1:
        raise LeakageError(f"{kind} {list(studies)} draws on several splits: {sorted(splits)}")
    return splits.pop()


def check_patients(study_patients: Mapping[str, str], study_split: Mapping[str, str]) -> None:
    """No patient in more than one split."""
    seen: dict[str, str] = {}
    for study, patient in study_patients.items():
        split = study_split[study]
        if seen.setdefault(patient, split) != split:
            raise LeakageError(f"patient {patient} appears in splits {seen[patient]} and {split}")


__all__ = [
    "DEFAULT_FRACTIONS",
    "SPLIT_NAMES",
    "LeakageError",
    "assign_splits",
    "check_patients",
    "check_sample",
    "official_patient_splits",
    "study_splits",
]
