"""Deprecated path (kept for one release): see `medreco.inference.search`."""

from medreco.deprecation import moved_to

moved_to(__name__, "medreco.inference.search")
