"""Deprecated path (kept for one release): see `medreco.inference.comparison`."""

from medreco.deprecation import moved_to

moved_to(__name__, "medreco.inference.comparison")
