"""Deprecated path (kept for one release): see `medreco.data.mining.splits`."""

from medreco.deprecation import moved_to

moved_to(__name__, "medreco.data.mining.splits")
