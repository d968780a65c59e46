"""The synthetic cohort: thoraxes, brains, abdomens and ultrasound views with co-occurring, evolving
findings, imaged as real DICOM, NIfTI and PNG files, with free-text reports and ground truth for
evaluation."""

from . import abdomen, brain, ultrasound  # noqa: F401  (each registers its family's finding types)
from .cohort import (
    DEFAULT_MODALITIES,
    SUPPORTED_MODALITIES,
    PhantomConfig,
    StudyRecord,
    generate_cohort,
    read_ground_truth,
    read_manifest,
)
from .families import FAMILIES
from .findings import DRAWN_CHANGE_LABELS, FINDING_TYPES, INVERSE_CHANGE, Finding, finding_types_for

__all__ = [
    "DRAWN_CHANGE_LABELS",
    "DEFAULT_MODALITIES",
    "FAMILIES",
    "FINDING_TYPES",
    "INVERSE_CHANGE",
    "Finding",
    "PhantomConfig",
    "SUPPORTED_MODALITIES",
    "StudyRecord",
    "finding_types_for",
    "generate_cohort",
    "read_ground_truth",
    "read_manifest",
]
