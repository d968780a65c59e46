"""Sharing MedReCo models: model cards, Hub-ready export (model, processor, their code) for loading
without medreco installed, and pushing a model or adapter folder to the Hugging Face Hub (mined
datasets: `medreco.data.mining.push_mined_dataset`)."""

from .card import Score, model_card, write_model_card
from .export import ExportError, export_folder, export_for_remote_code, load_processor
from .push import HubPushError, PushResult, push_to_hub

__all__ = [
    "ExportError",
    "HubPushError",
    "PushResult",
    "Score",
    "export_folder",
    "export_for_remote_code",
    "load_processor",
    "model_card",
    "push_to_hub",
    "write_model_card",
]
