"""Deprecated path (kept for one release): see `medreco.inference.encoder`."""

from medreco.deprecation import moved_to

moved_to(__name__, "medreco.inference.encoder")
