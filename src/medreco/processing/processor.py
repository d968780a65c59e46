"""Deprecated path (kept for one release): see `medreco.processing.processing_medreco`."""

from medreco.deprecation import moved_to

moved_to(__name__, "medreco.processing.processing_medreco")
