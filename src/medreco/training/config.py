"""Typed training recipes, read from YAML.

A recipe file holds one section per stage (`stage1`, `reranker`, `stage2`); each section becomes
the dataclass of that stage, every hyper-parameter named with the paper's value as its default.
Unknown keys and values of the wrong type are refused with the key's dotted path, so a typo in a
recipe fails before any training starts. Recipes shipped with the package (`tiny`, `paper`) are
found by name: `medreco train stage1 --config tiny`."""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml

from ..errors import MedReCoError, read_text_file


class RecipeError(MedReCoError, ValueError):
    """A recipe file or value that cannot be used; names the file or key."""


@dataclass
class OptimizationConfig:
    """One optimisation phase: AdamW, linear warm-up then cosine decay, gradient clipping."""

    learning_rate: float = 1e-4
    weight_decay: float = 0.05
    epochs: float = 10.0
    max_steps: int | None = None  # overrides epochs when set
    warmup_ratio: float = 0.05
    max_grad_norm: float = 1.0
    batch_size_2d: int = 64  # per process; 2D radiographs and ultrasound
    batch_size_3d: int = 8  # per process; CT and MRI volumes
    gradient_accumulation_steps: int = 1
    mixed_precision: Literal["auto", "bf16", "fp16", "no"] = "auto"  # auto: bf16 where the hardware has it
    gradient_checkpointing: bool = False


@dataclass
class TransformSpec:
    """One MONAI dictionary transform of `DataConfig.train_transforms`: its class name in
    `monai.transforms` (e.g. `RandAffined`), its arguments (`keys` is filled in) and, when set, the
    modalities it applies to (else every one)."""

    name: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    modalities: list[str] | None = None


@dataclass
class DataConfig:
    """Where the mined supervision lives (`medreco mine --out`) and how images become tensors."""

    mined_dir: str = ""
    recipes: dict[str, dict] = field(default_factory=dict)  # per-modality ModalityRecipe overrides
    tensor_cache_dir: str | None = None
    modalities: list[str] | None = None  # restrict training to these modalities
    max_train_samples: int | None = None
    preload_images: bool = True  # keep preprocessed tensors in memory (small archives)
    # Random MONAI dictionary transforms on stage 1's training images, after the processor and its
    # tensor cache (medreco.training.augmentation); needs `pip install "medreco[monai]"`
    train_transforms: list[TransformSpec] = field(default_factory=list)


@dataclass
class RunConfig:
    """Output, logging, checkpoints and distribution settings of a run."""

    output_dir: str = "runs/medreco"
    seed: int = 0
    log_every: int = 10
    save_every: int = 500  # steps between resumable checkpoints (0: only at the end)
    keep_checkpoints: int = 2
    report_to: list[str] = field(default_factory=lambda: ["tensorboard", "wandb"])  # wandb only if installed
    progress: bool = True
    resume: bool = True
    deepspeed_config: str | None = None  # a DeepSpeed JSON file, or a packaged one: zero2, zero3, zero3_offload
    # Processes that collate batches beside training (torch DataLoader workers; 0: in the training process).
    # The batches are the sampler's, the same with any count; pinned memory when training on a GPU.
    loader_workers: int = 0


@dataclass
class ModelSource:
    """Which model to start from: a factory preset with overrides, or a saved checkpoint."""

    preset: str = "paper"
    overrides: dict[str, Any] = field(default_factory=dict)
    init_from: str | None = None  # a save_pretrained folder; preset/overrides are then ignored


@dataclass
class Stage1Config:
    """Stage 1: image-report alignment (symmetric InfoNCE), then entity-conditioned ranking."""

    model: ModelSource = field(default_factory=ModelSource)
    text_encoder: str = "FremyCompany/BioLORD-2023"
    text_encoder_learning_rate: float | None = None  # the pretrained text backbone's rate (None: the phase's)
    # Keep the pretrained text backbone fixed (its projection still trains). The paper fine-tunes it;
    # frozen, each report is encoded once, which makes alignment steps cost the vision encoder only.
    freeze_text_encoder: bool = False
    # Weight of entity-statement alignment in the warm-up (0: reports only, as in the paper): each
    # image's entity-conditioned feature is aligned with its report's sentence on that entity.
    statement_alignment_weight: float = 0.0
    # Temporal pretraining (BioViL-T, TILA; 0: off, the paper's stage 1): prior-image fusion blocks
    # (0: none, or those of the model started from), the weight of the image-report (and statement)
    # alignment on the prior-fused tokens of studies with a prior, and TILA's change-aware sigmoid
    # loss on the pair read backwards. Priors and change labels come from the mined longitudinal table.
    num_temporal_layers: int = 0
    temporal_alignment_weight: float = 0.0
    change_aware_weight: float = 0.0
    # CLIP-clinic (off by default, the paper's stage 1): negation hard negatives (each study's report
    # with one positive finding denied, or for a normal study a training report asserting one finding;
    # each statement with its finding's presence reversed), extra texts in the alignment softmaxes;
    # dynamic soft labels from text-embedding and clinical-label (mined status) similarity, each on
    # when its threshold is set (the paper's tau_t 0.9, tau_c 0.8).
    # TAMM (off by default): the trend classifier's loss on the whole-image and report embedding
    # differences of adjacent studies, and the rationale-conditioned prediction of each study's tokens
    # from the other's (lambda_cons); trends and rationales from the mined longitudinal table.
    trend_weight: float = 0.0
    rationale_weight: float = 0.0
    negation_hard_negatives: bool = False
    text_soft_label_threshold: float | None = None
    clinical_soft_label_threshold: float | None = None
    data: DataConfig = field(default_factory=DataConfig)
    alignment: OptimizationConfig = field(default_factory=lambda: OptimizationConfig(epochs=1.0))
    ranking: OptimizationConfig = field(default_factory=OptimizationConfig)
    ranking_loss: Literal["triplet", "smooth_ap", "contrastive"] = "triplet"
    # What the ranking phase ranks: `entity` (the method: each triplet's entity conditions anchor and
    # candidates), or `study`, the trained holistic baseline: the same triplets' images ranked by their
    # whole-image features, relevance from whole-report agreement (`report_agreement`)
    ranking_target: Literal["entity", "study"] = "entity"
    triplet_margin: float = 0.2
    entity_batches: bool = False  # ranking batches of one entity (and modality) rather than mixed entities
    max_report_tokens: int = 256
    run: RunConfig = field(default_factory=lambda: RunConfig(output_dir="runs/stage1"))

    def __post_init__(self):
        for name in (
            "num_temporal_layers",
            "temporal_alignment_weight",
            "change_aware_weight",
            "trend_weight",
            "rationale_weight",
        ):
            if getattr(self, name) < 0:
                raise RecipeError(f"stage1.{name}: 0 or more, not {getattr(self, name)}")
        for name in ("text_soft_label_threshold", "clinical_soft_label_threshold"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < 1:
                raise RecipeError(f"stage1.{name}: in [0, 1) or null, not {value}")


@dataclass
class RerankerTrainingConfig:
    """The reranker: BCE over the coarse model's own top candidates, labelled by report relevance."""

    retrieval_model: str = "runs/stage1/final"
    model: ModelSource = field(default_factory=ModelSource)
    candidates_per_query: int = 16
    data: DataConfig = field(default_factory=DataConfig)
    optimization: OptimizationConfig = field(default_factory=lambda: OptimizationConfig(epochs=5.0))
    run: RunConfig = field(default_factory=lambda: RunConfig(output_dir="runs/reranker"))


@dataclass
class ProgressionTrainingConfig:
    """Per-finding interval change (improving / stable / worsening) on the mined longitudinal pairs:
    BioViL-T's prior-image fusion and progression head over a frozen stage-1 encoder's tokens, with
    TILA's inversion-aware fine-tuning (BiCE, then BiCE plus the temporal consistency loss) as options.

    `use_prior: false` puts the missing-prior token in every prior's place: the same model and
    budget without the prior (the static baseline). `loss: bidirectional` is TILA's BiCE;
    `temporal_consistency_weight` > 0 (TILA: 50) adds a second phase, `consistency`, whose
    loss is BiCE plus that weight times TCL (TILA starts it after 20 of 50 epochs: collapsing to
    "stable", trivially consistent, is what the warm-up avoids)."""

    retrieval_model: str = "runs/stage1/final"
    # fusion blocks; a stage-1 model pretrained with fusion keeps its own (None: those, else 3)
    num_temporal_layers: int | None = None
    use_prior: bool = True
    loss: Literal["cross_entropy", "bidirectional"] = "cross_entropy"
    temporal_consistency_weight: float = 0.0
    class_weighted: bool = True  # weighted cross-entropy (BioViL-T), for the macro-accuracy it is judged by
    entity_levels: list[str] = field(default_factory=lambda: ["abnormal", "disease"])  # findings, not anatomy
    data: DataConfig = field(default_factory=DataConfig)
    optimization: OptimizationConfig = field(default_factory=lambda: OptimizationConfig(epochs=20.0))
    consistency: OptimizationConfig = field(default_factory=lambda: OptimizationConfig(epochs=30.0))
    run: RunConfig = field(default_factory=lambda: RunConfig(output_dir="runs/progression"))

    def __post_init__(self):
        if self.num_temporal_layers is not None and self.num_temporal_layers < 1:
            raise RecipeError(f"progression.num_temporal_layers: at least 1, not {self.num_temporal_layers}")
        if self.temporal_consistency_weight < 0:
            raise RecipeError(
                f"progression.temporal_consistency_weight: 0 or more, not {self.temporal_consistency_weight}"
            )


@dataclass
class LoraSettings:
    enabled: bool = False
    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    quantization: Literal["none", "4bit"] = "none"  # 4bit = QLoRA, needs CUDA and bitsandbytes
    # besides the merged final/: adapter/ (the adapters and projector alone, PEFT format) and base/
    # (the VLM they apply to, written once), to share adapters without a full copy each run
    keep_adapter: bool = False


@dataclass
class Stage2Config:
    """Stage 2: comparative instruction tuning of the VLM with TRL's SFTTrainer."""

    model: ModelSource = field(default_factory=ModelSource)
    vision_model: str | None = "runs/stage1/final"  # stage-1 retrieval model whose vision encoder is reused
    language_model: str | None = "Qwen/Qwen2.5-7B-Instruct"  # pretrained LM (and tokenizer); None: from preset
    # defaults to language_model; "mined": a word-piece vocabulary learned from the training
    # conversations (language models built from a preset only), at most `tokenizer_vocab_size` tokens
    tokenizer: str | None = None
    tokenizer_vocab_size: int = 2000
    data: DataConfig = field(default_factory=DataConfig)
    optimization: OptimizationConfig = field(
        default_factory=lambda: OptimizationConfig(learning_rate=2e-5, epochs=3.0, batch_size_2d=8, batch_size_3d=2)
    )
    projector_learning_rate: float = 1e-4
    freeze_vision_tower: bool = True
    # each image also gets the stage-1 conditioner's feature for the question's entity (needs
    # vision_model; see MedReCoVLMConfig.entity_tokens). Off in the paper.
    entity_tokens: bool = False
    # the blind baseline: every image replaced by a blank, in training and in every later use of the
    # model (MedReCoVLMConfig.blind_images)
    blind_images: bool = False
    include_open_ended: bool = True
    # the share of closed questions whose open-ended twin is trained on too (1: every one, which doubles
    # the conversations; a twin repeats in words what its closed answer says)
    open_ended_share: float = 1.0
    # the share of closed questions also trained with their two images in the other order and the
    # inverse answer ("Case A only" <-> "Case B only", increased <-> decreased; data.mining.swap), so
    # that the text alone never tells the answer; questions whose answer has no inverse have no twin
    swapped_twin_share: float = 0.0
    # each training image's frozen vision-tower tokens and conditioner feature computed once and
    # remembered in memory (MedReCoVLMModel.remember_frozen_features), so a step runs the projectors
    # and the language model only: for archives whose features fit in memory
    remember_image_features: bool = False
    # optimiser steps of single-image presence questions ("Does this image show X?", from each training
    # study's report statements) before the comparative mix: the language model first learns to read
    # one image's tokens for a finding, then to compare two. Counted in optimization.max_steps.
    curriculum_steps: int = 0
    # what the curriculum asks: "single_image" ("Does this image show X?" about one study) or
    # "each_case" ("Does Case B show X?" about one of a pair's two images)
    curriculum_questions: Literal["single_image", "each_case"] = "single_image"
    include_longitudinal: bool = True  # the follow-up questions of the mined longitudinal table
    # how many times each follow-up question appears in training: the follow-up table is a few per
    # cent of the questions, and the interval-change label a skill of its own
    longitudinal_repeats: int = 1
    lora: LoraSettings = field(default_factory=LoraSettings)
    run: RunConfig = field(default_factory=lambda: RunConfig(output_dir="runs/stage2"))

    def __post_init__(self):
        if self.longitudinal_repeats < 1:
            raise RecipeError(f"stage2.longitudinal_repeats: at least 1, not {self.longitudinal_repeats}")
        if not 0.0 <= self.open_ended_share <= 1.0:
            raise RecipeError(f"stage2.open_ended_share: a share between 0 and 1, not {self.open_ended_share}")
        if not 0.0 <= self.swapped_twin_share <= 1.0:
            raise RecipeError(f"stage2.swapped_twin_share: a share between 0 and 1, not {self.swapped_twin_share}")
        if self.remember_image_features and not self.freeze_vision_tower:
            raise RecipeError("stage2.remember_image_features needs a frozen vision tower (freeze_vision_tower=true)")
        if self.curriculum_steps < 0:
            raise RecipeError(f"stage2.curriculum_steps: 0 or more, not {self.curriculum_steps}")


STAGES: dict[str, type] = {
    "stage1": Stage1Config,
    "reranker": RerankerTrainingConfig,
    "stage2": Stage2Config,
    "progression": ProgressionTrainingConfig,
}
BUILTIN_RECIPES = ("tiny", "demo", "paper")
# Top-level keys of a recipe besides the stage sections: `extends` names a recipe whose sections this
# one changes; other sections hold settings of whatever runs the recipe (the demo's own `demo:`).
EXTENDS = "extends"


def recipe_path(name_or_path: str | Path, relative_to: Path | None = None) -> Path:
    """A recipe file: a path (relative to `relative_to` when given), or the name of a built-in recipe."""
    if str(name_or_path) in BUILTIN_RECIPES:
        return Path(str(resources.files("medreco.training") / "recipes" / f"{name_or_path}.yaml"))
    path = Path(name_or_path)
    if relative_to is not None and not path.is_absolute():
        path = relative_to / path
    if not path.is_file():
        raise RecipeError(f"{path}: recipe file not found (built-in recipes: {', '.join(BUILTIN_RECIPES)})")
    return path


def read_recipe(name_or_path: str | Path, relative_to: Path | None = None, _chain: tuple[Path, ...] = ()) -> dict:
    """A recipe file as a mapping, with the recipe it `extends` merged underneath (mappings merge key by
    key; any other value in the extending recipe replaces the base's)."""
    path = recipe_path(name_or_path, relative_to)
    if path.resolve() in _chain:
        raise RecipeError(f"{path}: recipes extend each other in a circle")
    try:
        document = yaml.safe_load(read_text_file(path, "recipe (YAML)")) or {}
    except yaml.YAMLError as error:
        raise RecipeError(f"{path}: not valid YAML ({error})") from error
    if not isinstance(document, dict):
        raise RecipeError(f"{path}: a recipe is a mapping with sections {sorted(STAGES)}")
    base = document.pop(EXTENDS, None)
    if base is None:
        return document
    return _merged(read_recipe(base, path.parent, (*_chain, path.resolve())), document)


def _merged(base: dict, changes: dict) -> dict:
    merged = dict(base)
    for key, value in changes.items():
        both_mappings = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = _merged(merged[key], value) if both_mappings else value
    return merged


def load_recipe(name_or_path: str | Path, stage: str, overrides: list[str] | None = None):
    """The typed config of `stage` from a recipe file, with `key.sub=value` overrides applied."""
    if stage not in STAGES:
        raise RecipeError(f"unknown stage {stage!r}; choose from {sorted(STAGES)}")
    path = recipe_path(name_or_path)
    section = dict(read_recipe(path).get(stage) or {})
    for item in overrides or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise RecipeError(f"override {item!r} is not key=value")
        _set_dotted(section, key.strip(), yaml.safe_load(value))
    try:
        return build_config(STAGES[stage], section, stage)
    except RecipeError as error:
        raise RecipeError(f"{path}: {error}") from None


def _set_dotted(mapping: dict, dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for key in parents:
        mapping = mapping.setdefault(key, {})
    mapping[leaf] = value


def build_config(cls: type, values: dict, where: str = ""):
    """Build dataclass `cls` from a mapping, checking keys and value types recursively."""
    if not isinstance(values, dict):
        raise RecipeError(f"{where}: expected a mapping, got {type(values).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise RecipeError(f"{where}: unknown key(s) {unknown}; known: {sorted(names)}")
    return cls(**{key: _coerce(hints[key], value, f"{where}.{key}") for key, value in values.items()})


def _coerce(hint: Any, value: Any, where: str) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if dataclasses.is_dataclass(hint):
        return build_config(hint, value, where)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for option in (a for a in args if a is not type(None)):
            try:
                return _coerce(option, value, where)
            except RecipeError as error:
                errors.append(str(error))
        raise RecipeError(errors[0] if errors else f"{where}: {value!r} is not allowed")
    if origin is Literal:
        if value is False and "no" in args:  # YAML 1.1 reads a bare `no` as false
            value = "no"
        if value not in args:
            raise RecipeError(f"{where}: {value!r} is not one of {list(args)}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise RecipeError(f"{where}: expected a list, got {value!r}")
        return [_coerce(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)] if args else list(value)
    if origin is dict:
        if not isinstance(value, dict):
            raise RecipeError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    if hint is Any:
        return value
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if hint is float and isinstance(value, str):  # YAML reads 1e-4 (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    if hint in (int, str, bool) and isinstance(value, hint) and not (hint is int and isinstance(value, bool)):
        return value
    raise RecipeError(f"{where}: expected {getattr(hint, '__name__', hint)}, got {value!r}")


def to_dict(config) -> dict:
    """A config as plain data (for logs and `training_config.json`)."""
    return dataclasses.asdict(config)


__all__ = [
    "BUILTIN_RECIPES",
    "STAGES",
    "DataConfig",
    "LoraSettings",
    "ModelSource",
    "OptimizationConfig",
    "RecipeError",
    "RerankerTrainingConfig",
    "RunConfig",
    "Stage1Config",
    "Stage2Config",
    "TransformSpec",
    "build_config",
    "load_recipe",
    "read_recipe",
    "recipe_path",
    "to_dict",
]
