"""Supervision mined from routine reports: report similarity, ranking triplets, longitudinal labels,
comparative questions and patient-level splits (`pipeline.mine` writes the tables, `mined.MinedData`
reads them back, `sharing.push_mined_dataset` shares them on the Hub, pseudonymised)."""

from .decomposers import LLMSettings
from .longitudinal import ProgressionPair, progression_pairs
from .mined import MINED_TABLES, ChainedRows, MinedData, MinedRows, Study
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
from .shards import Shard, ShardError, merge_shards, mine_shard
from .sharing import SHARED_COLUMNS, SharedDataset, push_mined_dataset, shareable_tables

__all__ = [
    "ChainedRows",
    "LLMSettings",
    "MINED_TABLES",
    "ManifestError",
    "MinedData",
    "MinedRows",
    "MiningConfig",
    "MiningWorkerError",
    "ProgressionPair",
    "SHARED_COLUMNS",
    "Shard",
    "ShardError",
    "SharedDataset",
    "Study",
    "comparative_vqa",
    "decompose_all",
    "longitudinal_labels",
    "merge_shards",
    "mine",
    "mine_shard",
    "progression_pairs",
    "push_mined_dataset",
    "read_study_manifest",
    "shareable_tables",
    "split_studies",
]
