"""Supervision mined from routine reports: report similarity, ranking triplets, longitudinal labels,
comparative questions and patient-level splits (`pipeline.mine` writes the tables, `mined.MinedData`
reads them back)."""

from .mined import MINED_TABLES, MinedData, Study
from .pipeline import (
    ManifestError,
    MiningConfig,
    MiningWorkerError,
    comparative_vqa,
    decompose_all,
    longitudinal_labels,
    mine,
    read_study_manifest,
    split_studies,
)

__all__ = [
    "MINED_TABLES",
    "ManifestError",
    "MinedData",
    "MiningConfig",
    "MiningWorkerError",
    "Study",
    "comparative_vqa",
    "decompose_all",
    "longitudinal_labels",
    "mine",
    "read_study_manifest",
    "split_studies",
]
