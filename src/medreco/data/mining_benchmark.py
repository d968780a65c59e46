"""Deprecated path (kept for one release): see `medreco.data.mining.benchmark`."""

from medreco.deprecation import moved_to

moved_to(__name__, "medreco.data.mining.benchmark")
