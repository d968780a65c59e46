"""Sharing MedReCo models: model cards, export for `trust_remote_code` loading without medreco installed,
and pushing a model folder to the Hugging Face Hub."""

from .card import Score, model_card, write_model_card
from .export import export_for_remote_code
from .push import HubPushError, PushResult, push_to_hub

__all__ = [
    "HubPushError",
    "PushResult",
    "Score",
    "export_for_remote_code",
    "model_card",
    "push_to_hub",
    "write_model_card",
]
