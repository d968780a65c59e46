"""Deprecated path (kept for one release): see `medreco.data.reports.llm`; the LLM-written questions
(`llm_vqa`, `needs_two_images`) are in `medreco.data.mining.vqa`."""

from medreco.data.reports.llm import *  # noqa: F403
from medreco.data.reports.llm import __all__ as __all__
from medreco.deprecation import moved_names, warn_moved

warn_moved(__name__, "medreco.data.reports.llm")
__getattr__ = moved_names(__name__, dict.fromkeys(("llm_vqa", "needs_two_images"), "medreco.data.mining.vqa"))
