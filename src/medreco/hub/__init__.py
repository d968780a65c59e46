"""Sharing MedReCo models: model cards, and export for `trust_remote_code` loading without medreco installed."""

from .card import model_card, write_model_card
from .export import export_for_remote_code

__all__ = ["export_for_remote_code", "model_card", "write_model_card"]
