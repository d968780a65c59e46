"""Deprecated path (kept for one release): see `medreco.data.reports.decomposition`."""

from medreco.deprecation import moved_to

moved_to(__name__, "medreco.data.reports.decomposition")
