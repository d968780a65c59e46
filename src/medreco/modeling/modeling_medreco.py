"""Deprecated path (kept for one release): the retrieval model is in `modeling_retrieval`."""

import sys
import warnings

from . import modeling_retrieval

warnings.warn(
    "medreco.modeling.modeling_medreco is deprecated and goes in the next release: import from "
    "medreco.modeling.modeling_retrieval",
    FutureWarning,
    stacklevel=2,
)
sys.modules[__name__] = modeling_retrieval
