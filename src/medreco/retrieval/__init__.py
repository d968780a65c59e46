"""Deprecated path (kept for one release): see `medreco.inference`. A package of its own (not an
alias) so that the old submodule paths (`medreco.retrieval.index`, ...) resolve to their aliases."""

from medreco.deprecation import warn_moved
from medreco.inference import *  # noqa: F403
from medreco.inference import __all__ as __all__

warn_moved(__name__, "medreco.inference")
