"""Sharing MedReCo models: export for `trust_remote_code` loading without medreco installed."""

from .export import export_for_remote_code

__all__ = ["export_for_remote_code"]
