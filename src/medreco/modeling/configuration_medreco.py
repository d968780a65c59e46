"""Deprecated path (kept for one release): the retrieval model's configuration is in
`configuration_retrieval`, the reranker's in `configuration_reranker`."""

import warnings

from .configuration_reranker import MedReCoRerankerConfig
from .configuration_retrieval import BIOLORD_2023, MedReCoConditionerConfig, MedReCoConfig

warnings.warn(
    "medreco.modeling.configuration_medreco is deprecated and goes in the next release: import from "
    "medreco.modeling.configuration_retrieval or medreco.modeling.configuration_reranker",
    FutureWarning,
    stacklevel=2,
)

__all__ = ["BIOLORD_2023", "MedReCoConditionerConfig", "MedReCoConfig", "MedReCoRerankerConfig"]
