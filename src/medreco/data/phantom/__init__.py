"""The synthetic cohort: thoraxes with co-occurring, evolving findings, imaged as real DICOM,
NIfTI and PNG files, with free-text reports and ground truth for evaluation."""

from .cohort import PhantomConfig, StudyRecord, generate_cohort, read_ground_truth, read_manifest
from .findings import CHANGE_LABELS, FINDING_TYPES, INVERSE_CHANGE, Finding, finding_types_for

__all__ = [
    "CHANGE_LABELS",
    "FINDING_TYPES",
    "INVERSE_CHANGE",
    "Finding",
    "PhantomConfig",
    "StudyRecord",
    "finding_types_for",
    "generate_cohort",
    "read_ground_truth",
    "read_manifest",
]
