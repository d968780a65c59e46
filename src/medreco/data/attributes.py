"""Deprecated path (kept for one release): see `medreco.data.reports.attributes`."""

from medreco.deprecation import moved_to

moved_to(__name__, "medreco.data.reports.attributes")
