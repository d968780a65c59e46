"""Deprecated path (kept for one release): see `medreco.data.reports.ontology`."""

from medreco.deprecation import moved_to

moved_to(__name__, "medreco.data.reports.ontology")
