"""Hub-ready model folders: everything plain transformers needs, with or without medreco installed.

`save_pretrained` of every medreco model and processor already writes its code and `auto_map`
(see `medreco.modeling.register_auto_classes` and `medreco.processing.remote_code`). An exported
folder holds them together: weights (safetensors), `config.json` with AutoConfig / AutoModel /
AutoModelForImageTextToText in `auto_map`, the generation config, the processor (tokenizer, chat
template, image settings, AutoProcessor / AutoImageProcessor in `processor_config.json`), the
code of both, and a model card."""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import ModelCard
from transformers import AutoConfig, AutoImageProcessor, AutoProcessor, AutoTokenizer, PreTrainedModel
from transformers.image_processing_utils import BaseImageProcessor
from transformers.processing_utils import ProcessorMixin

from ..errors import MedReCoError
from ..factory import family_of, model_class_of
from ..processing import MedReCoImageProcessor, MedReCoRetrievalProcessor
from ..processing.from_config import needs_processor_from_config
from .card import model_card, write_model_card


class ExportError(MedReCoError, ValueError):
    """A folder that is not a saved medreco model."""


def export_for_remote_code(
    model: PreTrainedModel,
    directory: str | Path,
    processor: ProcessorMixin | BaseImageProcessor | None = None,
    card: ModelCard | None = None,
) -> Path:
    """Save `model`, its `processor` (if any) and a model card (`card`, or one for the model's
    family built from the saved folder) into one folder that loads with `trust_remote_code=True` anywhere."""
    directory = Path(directory)
    model.save_pretrained(directory)
    if processor is not None:
        processor.save_pretrained(directory)
    write_model_card(card or model_card(family_of(model.config), folder=directory), directory)
    return directory


def load_processor(folder: str | Path, family: str) -> ProcessorMixin | BaseImageProcessor | None:
    """The processor saved in a model folder: the VLM's or retrieval model's processor, or the image
    processor alone (vision encoder, reranker); for a folder saved without one, the processor its
    config implies (`medreco.processing.from_config`; the reranker needs none). Folders written
    before the retrieval processor existed (tokenizer and image settings side by side) are paired up."""
    folder = Path(folder)
    if needs_processor_from_config(folder):  # saved without one: the processor its config implies
        if family == "reranker":
            return None  # it reads the retrieval model's features, not images
        return (
            MedReCoImageProcessor.from_pretrained(folder)
            if family == "vision"
            else AutoProcessor.from_pretrained(folder)
        )
    if (folder / "processor_config.json").exists():
        return AutoProcessor.from_pretrained(folder)
    if not (folder / "preprocessor_config.json").exists():
        return None
    image_processor = AutoImageProcessor.from_pretrained(folder)
    if family == "retrieval" and (folder / "tokenizer_config.json").exists():
        return MedReCoRetrievalProcessor(image_processor, AutoTokenizer.from_pretrained(folder))
    return image_processor


def export_folder(checkpoint: str | Path, directory: str | Path) -> Path:
    """Re-save a saved model folder (`save_pretrained`, `medreco train`) Hub-ready: the model, the
    processor saved with it, and its model card (without one, a card built from the checkpoint: its
    processor's recipes and the base models its training recipe names)."""
    checkpoint = Path(checkpoint)
    if not (checkpoint / "config.json").is_file():
        raise ExportError(f"{checkpoint}: not a saved model folder (no config.json)")
    if Path(directory).resolve() == checkpoint.resolve():
        raise ExportError(f"{directory}: export into a new folder, not onto the checkpoint itself")
    try:
        family = family_of(AutoConfig.from_pretrained(checkpoint))
    except ValueError as error:
        raise ExportError(f"{checkpoint}: {error}") from None
    try:
        model = model_class_of(family).from_pretrained(checkpoint)
        processor = load_processor(checkpoint, family)
    except OSError as error:  # missing or unreadable weights, tokenizer, processor files
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ExportError(f"{checkpoint}: cannot load the saved model ({reason})") from None
    has_card = (checkpoint / "README.md").is_file()
    card = ModelCard.load(checkpoint / "README.md") if has_card else model_card(family, folder=checkpoint)
    return export_for_remote_code(model, directory, processor, card)


__all__ = ["ExportError", "export_folder", "export_for_remote_code", "load_processor"]
