"""Deprecated path (kept for one release): see `medreco.data.mining.supervision`."""

from medreco.deprecation import moved_to

moved_to(__name__, "medreco.data.mining.supervision")
