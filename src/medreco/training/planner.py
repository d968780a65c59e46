"""Memory planner (`medreco plan`): per-rank GPU memory of each training stage under each
distributed strategy, from a recipe, before any GPU is rented.

For every stage (`stage1/alignment`, `stage1/ranking`, `reranker`, `stage2`) the model the trainer
would build is built on the meta device (no weights allocated) from the recipe's preset and
overrides, with `requires_grad` set as the trainer sets it (frozen text backbone, frozen vision
tower, LoRA adapters), and its parameters are counted. Bytes per rank then follow the usual
AdamW accounting (Rajbhandari et al., ZeRO, 2020), per trainable parameter:

    mixed precision (bf16/fp16): 2 (16-bit weights) + 2 (16-bit gradients) + 12 (fp32 master, m, v)
    float32:                     4 (weights)        + 4 (gradients)        + 8  (m, v)

and frozen parameters as weights only (2 or 4 bytes; about 0.55 for 4-bit QLoRA weights).
Strategies: `ddp` replicates everything; `zero2` shards gradients and optimiser state over the
ranks; `zero3` and `fsdp2` (full shard) also shard the weights, frozen ones included;
`zero3_offload` keeps the shards of weights, gradients and optimiser state in CPU RAM (reported
apart) and only working buffers on the GPU. Activations come from the model configs and the
recipe's micro batch per rank (see `activation_bytes`, built on `medreco.training.activations`),
with gradient checkpointing when the recipe turns it on. A fixed overhead (CUDA context, NCCL and
cuBLAS workspaces: `CUDA_CONTEXT_BYTES`, plus `FRAGMENTATION` of everything else for the caching
allocator) makes "fits" conservative. The estimate is checked against measured peak memory on a CPU
(tests/training/test_planner.py; docs/training.md#planning-memory)."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from torch import nn

from ..data.reports.ontology import entity_prompts
from ..errors import MedReCoError
from ..factory import create_config, model_class_of, preset_fields, resolve_text_encoder
from ..modeling import MedReCoConfig, MedReCoRerankerConfig, MedReCoVLMConfig
from ..modeling.modeling_utils import block_classes
from ..processing import DEFAULT_RECIPES, ModalityRecipe
from ..processing.processing_vlm import SPECIAL_TOKENS
from .activations import ActivationBudget, ImageCase, Tower, conditioner_bytes, text_tower, vision_towers
from .config import OptimizationConfig, Stage1Config, Stage2Config, load_recipe, read_recipe, recipe_path

logger = logging.getLogger(__name__)

GB, GIB = 10**9, 2**30
STAGES = ("stage1/alignment", "stage1/ranking", "reranker", "stage2")
STRATEGIES = ("ddp", "zero2", "zero3", "zero3_offload", "fsdp2")
PREFERENCE = ("ddp", "zero2", "fsdp2", "zero3", "zero3_offload")  # cheapest in communication first

# The fixed part of every rank's GPU memory: CUDA context, cuBLAS/cuDNN and NCCL workspaces.
CUDA_CONTEXT_BYTES = int(1.5 * GIB)
# The caching allocator's fragmentation and rounding, as a fraction of everything else.
FRAGMENTATION = 0.10
# Assumptions where the recipe says nothing (each is printed with the plan where it applies).
DEFAULT_TEXT_TOKENS = 256  # stage 2: text tokens per sample (system prompt, question, options, answer)
ENTITY_PROMPT_TOKENS = 32  # the longest entity prompts are about 20 words; batches pad to the longest
STATEMENT_TOKENS = 32  # one mined entity statement
STATEMENTS_PER_STUDY = 8  # mined statements per report in statement alignment
ENTITIES_PER_BATCH = 16  # distinct entities in a statement-alignment batch
QLORA_BYTES_PER_PARAMETER = 0.55  # NF4 weights with double-quantised block scales (4.13 bits) and slack
ZERO2_ALLGATHER_BUCKET = 500_000_000  # elements; allgather_bucket_size of medreco's deepspeed_zero2.json


class PlanError(MedReCoError, ValueError):
    """A plan request that cannot be planned: a bad GPU count, stage or strategy."""


class MemorySizeError(PlanError):
    """A memory size that is not a positive number with a unit (80GB, 80GiB, 80G, 81920MB)."""


_UNITS = {"": None, "B": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def parse_memory_size(text: str | int, name: str = "memory size") -> int:
    """Bytes of a memory size: "80GB" and "80G" are 80 * 10^9 bytes, "80GiB" 80 * 2^30, "81920MB"
    81920 * 10^6 (decimal units are powers of 10, binary ones powers of 2); an int is bytes. A
    number without a unit, or anything else, raises `MemorySizeError` naming `name`."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text <= 0:
            raise MemorySizeError(f"{name}: {text} bytes is not a positive size")
        return text
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([kKmMgGtT]?)(i?)([bB]?)\s*", str(text))
    if match is None or (match.group(2) == "" and (match.group(3) or not match.group(4))):
        raise MemorySizeError(
            f"{name}: {text!r} is not a memory size; write a number and a unit, "
            "e.g. 80GB (10^9 bytes) or 80GiB (2^30 bytes)"
        )
    number, prefix, binary, _ = match.groups()
    prefix = prefix.upper()
    scale = 1024 ** ("KMGT".index(prefix) + 1) if binary else _UNITS[prefix]
    size = int(float(number) * scale)
    if size <= 0:
        raise MemorySizeError(f"{name}: {text!r} is not a positive size")
    return size


def stages_named(name: str | None) -> tuple[str, ...]:
    """The planned stages of a `--stage` value: all for None, both phases for `stage1`."""
    if name is None:
        return STAGES
    chosen = tuple(s for s in STAGES if s == name or s.split("/")[0] == name)
    if not chosen:
        raise PlanError(f"unknown stage {name!r}; choose from stage1, {', '.join(STAGES)}")
    return chosen


@dataclass(frozen=True)
class PlanRequest:
    """What to plan: a recipe (built-in name or YAML path), GPUs per node and their memory."""

    recipe: str | Path
    gpus: int  # per node
    gpu_memory_bytes: int
    nodes: int = 1
    stages: tuple[str, ...] = STAGES
    strategies: tuple[str, ...] = STRATEGIES
    text_tokens: int = DEFAULT_TEXT_TOKENS  # stage 2 text tokens per sample, besides the image tokens
    cpu_memory_bytes: int | None = None  # per node; checked for zero3_offload when given

    @property
    def world_size(self) -> int:
        return self.gpus * self.nodes


@dataclass(frozen=True)
class Precision:
    """Bytes per trainable parameter (weights, gradients, optimiser state), per frozen parameter
    and per activation element."""

    name: str
    weight: int
    gradient: int
    optimizer: int
    frozen: int
    activation: int


MIXED = Precision("bf16 mixed precision", 2, 2, 12, 2, 2)
FP32 = Precision("float32", 4, 4, 8, 4, 4)


def precision_of(setting: str) -> Precision:
    """A recipe's `mixed_precision` on the GPUs planned for: "auto" is bf16, "no" float32."""
    if setting == "no":
        return FP32
    return MIXED if setting in ("auto", "bf16") else replace(MIXED, name=f"{setting} mixed precision")


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per rank of one stage under one strategy. `total` is GPU memory with the overhead;
    `cpu` the CPU RAM one rank's offloaded state takes (zero3_offload, else 0)."""

    stage: str
    strategy: str
    world_size: int
    precision: str
    modality: str  # the heaviest batch's modality
    micro_batch: int  # samples per rank per step in that batch
    sequence_length: int  # tokens per image (vision stages) or per sample (stage 2)
    trainable_parameters: int
    frozen_parameters: int
    parameters: int
    gradients: int
    optimizer: int
    activations: int
    buffers: int  # DDP gradient buckets, ZeRO buckets, gathered weights of ZeRO-3/FSDP
    optimizer_step: int  # the optimiser step's temporaries (activations are freed by then)
    overhead: int
    total: int
    cpu: int
    fits: bool
    notes: tuple[str, ...] = ()

    @property
    def training_bytes(self) -> int:
        """Weights, gradients, optimiser state and activations: what a single-process run holds at
        its peak, without the GPU's overhead (the number measured on a CPU)."""
        return self.parameters + self.gradients + self.optimizer + self.activations


# ------------------------------------------------------------------ the stages' models
def _checkpoints(module: nn.Module) -> bool:
    """Whether `activation_checkpointing_enable` reaches this module's layers (transformers
    checkpoints `GradientCheckpointingLayer` subclasses only)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    return any(isinstance(m, GradientCheckpointingLayer) for m in module.modules())


def _pretrained_config(name: str | None):
    """The config of a pretrained model when it is on this machine (bundled, a folder, or the Hub
    cache), never downloaded; None otherwise."""
    if not name:
        return None
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(resolve_text_encoder(name), local_files_only=True)
    except (OSError, ValueError, ImportError):
        return None


def _saved_config(config_class, folder: str | None):
    if folder and (Path(folder) / "config.json").is_file():
        return config_class.from_pretrained(folder)
    return None


@dataclass
class StageSpec:
    """One stage of a recipe as the planner needs it: the section, its optimisation phase, the
    model config the trainer would build, and notes on what was assumed."""

    stage: str
    section: object
    optimization: OptimizationConfig
    config: object
    family: str
    notes: list[str] = field(default_factory=list)


def stage_spec(recipe: str | Path, stage: str) -> StageSpec:
    """The model config a stage's trainer would build from `recipe` (as `build_retrieval_model`,
    `RerankerTrainer` and `build_vlm` do), without loading weights or data."""
    if stage not in STAGES:
        raise PlanError(f"unknown stage {stage!r}; choose from {', '.join(STAGES)}")
    section = load_recipe(recipe, stage.split("/")[0])
    notes: list[str] = []
    if stage.startswith("stage1"):
        config = _saved_config(MedReCoConfig, section.model.init_from)
        if config is None:
            fields = {
                "text_model_name_or_path": section.text_encoder,
                "freeze_text_encoder": section.freeze_text_encoder,
                "triplet_margin": section.triplet_margin,
                "ranking_loss": section.ranking_loss,
                **section.model.overrides,
            }
            config = create_config("retrieval", section.model.preset, **fields)
            text = _pretrained_config(section.text_encoder)
            if text is not None:
                config.text_config = text
            else:
                notes.append(f"text encoder {section.text_encoder}: the preset's architecture (not on this machine)")
        config.freeze_text_encoder = section.freeze_text_encoder or config.freeze_text_encoder
        optimization = section.alignment if stage == "stage1/alignment" else section.ranking
        return StageSpec(stage, section, optimization, config, "retrieval", notes)
    if stage == "reranker":
        config = _saved_config(MedReCoRerankerConfig, section.model.init_from)
        if config is None:
            retrieval = _saved_config(MedReCoConfig, section.retrieval_model) or create_config(
                "retrieval", section.model.preset
            )
            vision = retrieval.vision_config
            fields = {"hidden_size": vision.hidden_size, "modalities": list(vision.modalities)}
            config = create_config("reranker", section.model.preset, **{**fields, **section.model.overrides})
        notes.append("the frozen coarse model stays in CPU RAM (its features are computed before training)")
        return StageSpec(stage, section, section.optimization, config, "reranker", notes)
    return _stage2_spec(section, notes)


def _stage2_spec(section: Stage2Config, notes: list[str]) -> StageSpec:
    config = _saved_config(MedReCoVLMConfig, section.model.init_from)
    if config is not None:
        return StageSpec("stage2", section, section.optimization, config, "vlm", notes)
    preset = section.model.preset
    fields = dict(section.model.overrides)
    stage1 = _saved_config(MedReCoConfig, section.vision_model)
    if stage1 is not None:
        fields["vision_config"] = stage1.vision_config.to_dict()
    if section.blind_images:
        fields["blind_images"] = True
    if section.entity_tokens:
        conditioner = (stage1 or create_config("retrieval", preset)).conditioner_config
        fields.update(entity_tokens=True, entity_vocabulary=sorted(entity_prompts()))
        fields["conditioner_config"] = conditioner.to_dict()
    preset_text = preset_fields(preset, "vlm").get("text_config", {})
    if section.language_model is None:
        vocabulary = section.tokenizer_vocab_size + len(SPECIAL_TOKENS)
        if section.tokenizer not in (None, "mined"):
            vocabulary = getattr(_pretrained_config(section.tokenizer), "vocab_size", None) or vocabulary
        fields["text_config"] = {**preset_text, **fields.get("text_config", {}), "vocab_size": vocabulary}
    else:
        language = _pretrained_config(section.language_model)
        if language is not None:
            fields["text_config"] = language.to_dict()
        else:
            notes.append(f"language model {section.language_model}: the preset's architecture (not on this machine)")
    config = create_config("vlm", preset, image_token_id=0, freeze_vision_tower=section.freeze_vision_tower, **fields)
    return StageSpec("stage2", section, section.optimization, config, "vlm", notes)


def build_stage_model(spec: StageSpec) -> nn.Module:
    """The stage's model on the current default device (the planner uses the meta device), with
    `requires_grad` as its trainer sets it (LoRA aside: see `lora_parameter_counts`)."""
    model = model_class_of(spec.family)(spec.config)
    if spec.family == "retrieval" and spec.config.freeze_text_encoder:
        model.set_text_backbone_trainable(False)
    return model


def lora_parameter_counts(model: nn.Module, lora) -> tuple[int, int, int]:
    """(adapter parameters, trainable projector copy, quantisable LM weights) of stage 2's PEFT
    LoRA (`stage2.lora_config`): r x (in + out) per Linear of the language model matching the
    target modules, the projector as a trainable `modules_to_save` copy, and with 4-bit QLoRA the
    language model's Linear weights."""
    adapters = sum(lora.r * (m.in_features + m.out_features) for m in lora_targets(model, lora))
    language_model = model.model.language_model
    quantisable = sum(m.weight.numel() for m in language_model.modules() if isinstance(m, nn.Linear))
    projector = sum(p.numel() for p in model.model.multi_modal_projector.parameters())
    return adapters, projector, quantisable


def lora_targets(model: nn.Module, lora) -> list[nn.Linear]:
    """The Linear layers PEFT adapts: names matching `stage2.lora_config`'s pattern."""
    pattern = re.compile(rf".*language_model.*\.({'|'.join(lora.target_modules)})")
    return [m for name, m in model.named_modules() if isinstance(m, nn.Linear) and pattern.fullmatch(name)]


def shard_units(model: nn.Module) -> tuple[int, int]:
    """(largest wrapped block, the rest) in parameters: FSDP wraps, and ZeRO-3 gathers, the
    classes the models name in `_no_split_modules` (MedReCoBlock, the LM's decoder layers) one at
    a time; the parameters outside them form the root unit."""
    names = set(block_classes(model))
    units, inside = [], set()
    for module in model.modules():
        if type(module).__name__ in names and not any(id(p) in inside for p in module.parameters()):
            parameters = list(module.parameters())
            inside |= {id(p) for p in parameters}
            units.append(sum(p.numel() for p in parameters))
    total = sum(p.numel() for p in model.parameters())
    return max(units, default=0), total - sum(units)


# ------------------------------------------------------------------ per stage
def image_cases(recipe: str | Path, spec: StageSpec, vision_config) -> list[ImageCase]:
    """One batch shape per modality trained on, preprocessed as the stage-1 run of the recipe
    preprocesses them (its image processor is saved with the stage-1 model and reused by the
    reranker and stage 2). The modalities: `data.modalities` when set, else those the recipe gives
    preprocessing recipes for (the `tiny` recipe's cohort), else every modality of the model."""
    stage1 = load_recipe(recipe, "stage1")
    own = spec.section.data.recipes if spec.family != "retrieval" else {}
    recipes = {name: r.to_dict() for name, r in DEFAULT_RECIPES.items()}
    for source in (stage1.data.recipes, own):
        for name, values in (source or {}).items():
            recipes[name] = {**recipes.get(name, {}), **values}
    named = spec.section.data.modalities or stage1.data.modalities or [*(stage1.data.recipes or {}), *(own or {})]
    modalities = [m for m in vision_config.modalities if m in recipes and (not named or m in named)]
    if not modalities:
        raise PlanError(f"{spec.stage}: no modality of the model has a preprocessing recipe")
    sizes = {m: tuple(ModalityRecipe.from_dict(recipes[m]).size) for m in modalities}
    optimization = spec.optimization
    volumetric = any(size[0] > 1 for size in sizes.values())
    cases = []
    for modality, (depth, height, width) in sizes.items():
        batch = optimization.batch_size_3d if depth > 1 else optimization.batch_size_2d
        if spec.stage == "stage2":  # Stage2Trainer.batch_size: one size for every block
            batch = min(optimization.batch_size_2d, optimization.batch_size_3d) if volumetric else batch
        grid = (height // vision_config.patch_size) * (width // vision_config.patch_size)
        depth_tokens = depth // vision_config.depth_patch_size if depth > 1 else 1
        cases.append(ImageCase(modality, (depth, height, width), batch, grid, max(1, depth_tokens)))
    return cases


def activation_bytes(spec: StageSpec, model: nn.Module, case: ImageCase, precision: Precision, text_tokens: int) -> int:
    """Activation bytes of one step on one modality's batch. Vision stages: the pixels (fp32, plus
    the 16-bit copy the patch convolution keeps under autocast), the ViT towers, the final norm and
    the conditioner (ranking: every candidate under every anchor's entity), the text encoder when it
    trains. Reranker: its encoder over [CLS; query; candidate] top-k tokens. Stage 2: the frozen
    vision tower's working set, the projector, the language model over 2 images + text per sample,
    and the logits' fp32 log-softmax (kept, 4 bytes per logit) with its gradient and the logits'
    (8 bytes per logit, while no layer's working set is live)."""
    budget = ActivationBudget(precision.activation)
    if spec.family == "retrieval":
        _retrieval_activations(budget, spec, model, case)
    elif spec.family == "reranker":
        _reranker_activations(budget, spec, model, case)
    else:
        _vlm_activations(budget, spec, model, case, text_tokens)
    return budget.total()


def _sequence_length(spec: StageSpec, case: ImageCase, text_tokens: int) -> int:
    """Tokens per sequence: per image (vision stages), [CLS; query; candidate] top-k tokens
    (reranker), or two images' tokens and the text per sample (stage 2)."""
    if spec.family == "vlm":
        return 2 * (case.grid_tokens + int(spec.config.entity_tokens)) + text_tokens
    if spec.family == "reranker":
        return 1 + 2 * (min(spec.config.top_k, case.grid_tokens) + 1)
    return case.tokens


def _text_checkpointed(spec: StageSpec, model: nn.Module) -> bool:
    return spec.optimization.gradient_checkpointing and _checkpoints(model.text_encoder)


def _retrieval_activations(budget: ActivationBudget, spec: StageSpec, model: nn.Module, case: ImageCase) -> None:
    """Stage 1's images: the pixels, the ViT towers, the final norm's input and the depth-pooled
    tokens; then the conditioner and text encoder of the phase (`_ranking_heads`, `_alignment_heads`)."""
    config, act = spec.config, budget.activation
    hidden = config.vision_config.hidden_size
    ranking = spec.stage == "stage1/ranking"
    images = 3 * case.micro_batch if ranking else case.micro_batch  # ranking: anchors, positives and negatives
    vision_ckpt = spec.optimization.gradient_checkpointing and _checkpoints(model.vision_model)
    budget.add(*vision_towers(config.vision_config, images, case, True, vision_ckpt))
    budget.extra += images * case.voxels * (4 + (act if act < 4 else 0))  # + autocast's 16-bit copy
    budget.extra += images * case.tokens * hidden * act  # the final norm's input
    pooled = case.grid_tokens if config.conditioner_token_source == "pooled" else case.tokens
    budget.extra += images * pooled * hidden * act  # depth-pooled tokens
    heads = _ranking_heads if ranking else _alignment_heads
    heads(budget, spec, model, case.micro_batch, pooled)


def _ranking_heads(budget: ActivationBudget, spec: StageSpec, model: nn.Module, batch: int, tokens: int) -> None:
    """Ranking: the conditioner over the anchors and over the 2 x batch candidates under every
    anchor's entity (one query each when ranking whole studies), and the entity prompts when the
    text encoder trains."""
    config, act = spec.config, budget.activation
    conditioner, hidden = config.conditioner_config, config.vision_config.hidden_size
    entity = spec.section.ranking_target == "entity"
    budget.extra += conditioner_bytes(conditioner, hidden, 1, batch, tokens, act)
    budget.extra += conditioner_bytes(conditioner, hidden, batch if entity else 1, 2 * batch, tokens, act)
    if entity and not config.freeze_text_encoder:
        text_ckpt = _text_checkpointed(spec, model)
        budget.add(text_tower(config.text_config, "text/entities", batch, ENTITY_PROMPT_TOKENS, text_ckpt))


def _alignment_heads(budget: ActivationBudget, spec: StageSpec, model: nn.Module, batch: int, tokens: int) -> None:
    """Alignment: the conditioner's whole-image query and the reports when the text encoder trains;
    with statement alignment also the conditioner under every batch entity and the statements."""
    config, act = spec.config, budget.activation
    conditioner, hidden = config.conditioner_config, config.vision_config.hidden_size
    section: Stage1Config = spec.section
    text_trains = not config.freeze_text_encoder
    text_ckpt = _text_checkpointed(spec, model)
    budget.extra += conditioner_bytes(conditioner, hidden, 1, batch, tokens, act)
    if text_trains:
        budget.add(text_tower(config.text_config, "text/reports", batch, section.max_report_tokens, text_ckpt))
    if section.statement_alignment_weight:
        budget.extra += conditioner_bytes(conditioner, hidden, ENTITIES_PER_BATCH, batch, tokens, act)
        if text_trains:
            statements = ENTITIES_PER_BATCH + STATEMENTS_PER_STUDY * batch
            budget.add(text_tower(config.text_config, "text/statements", statements, STATEMENT_TOKENS, text_ckpt))


def _reranker_activations(budget: ActivationBudget, spec: StageSpec, model: nn.Module, case: ImageCase) -> None:
    """The reranker's encoder over [CLS; query; candidate] top-k tokens, its fp32 inputs and segment norms."""
    config, batch = spec.config, case.micro_batch
    length = _sequence_length(spec, case, text_tokens=0)
    checkpointed = spec.optimization.gradient_checkpointing and _checkpoints(model)
    budget.add(
        Tower(
            "reranker",
            batch,
            length,
            config.num_layers,
            config.hidden_size,
            config.intermediate_size,
            config.num_attention_heads,
            config.hidden_size,
            eager_attention=config._attn_implementation == "eager",
            checkpointed=checkpointed,
        )
    )
    budget.extra += batch * length * config.hidden_size * (2 * 4 + 4 * budget.activation)


def _vlm_activations(
    budget: ActivationBudget, spec: StageSpec, model: nn.Module, case: ImageCase, text_tokens: int
) -> None:
    """Stage 2: the vision tower (a working set only when frozen), the pixels, the projector, the
    language model, LoRA's kept inputs, and the loss's fp32 log-softmax with the gradients."""
    config, act, batch = spec.config, budget.activation, case.micro_batch
    vision, text = config.vision_config, config.text_config
    checkpointing = spec.optimization.gradient_checkpointing
    images = 2 * batch  # two images per sample (Case A, Case B)
    tower_trains = not config.freeze_vision_tower
    budget.add(*vision_towers(vision, images, case, tower_trains, checkpointing and tower_trains))
    budget.extra += images * case.voxels * (4 + (act if act < 4 and tower_trains else 0))
    budget.extra += images * case.grid_tokens * (vision.hidden_size + 2 * text.hidden_size) * act  # projector
    lm_ckpt = checkpointing and _checkpoints(model.model.language_model)
    length = _sequence_length(spec, case, text_tokens)
    budget.add(text_tower(text, "language model", batch, length, lm_ckpt))
    tokens = batch * length
    budget.extra += 2 * tokens * text.hidden_size * act  # embeddings, final norm
    lora = spec.section.lora
    if lora.enabled:
        budget.extra += tokens * _lora_bytes_per_token(model, lora, act) // (text.num_hidden_layers if lm_ckpt else 1)
    budget.extra += tokens * text.vocab_size * 4  # the loss's fp32 log-softmax
    budget.working = max(budget.working, tokens * text.vocab_size * 8)  # its gradient, the logits' gradient


def _lora_bytes_per_token(model: nn.Module, lora, activation: int) -> int:
    """Each adapted Linear keeps its dropped-out input (and mask) and its rank-r projection."""
    adapted = lora_targets(model, lora)
    width = sum(m.in_features for m in adapted)
    return width * (activation + (1 if lora.dropout else 0)) + len(adapted) * lora.r * activation


@dataclass
class StagePlan:
    """The strategy-independent part of a stage's plan."""

    spec: StageSpec
    precision: Precision
    trainable: int
    frozen: int
    quantised: int  # frozen 4-bit weights (QLoRA)
    largest_unit: int
    root_unit: int
    activations: int
    case: ImageCase
    sequence_length: int


def plan_stage(recipe: str | Path, stage: str, text_tokens: int = DEFAULT_TEXT_TOKENS) -> StagePlan:
    """Count one stage's parameters on the meta device and size its heaviest batch's activations."""
    spec = stage_spec(recipe, stage)
    with torch.device("meta"):
        model = build_stage_model(spec)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    quantised = 0
    if spec.family == "vlm" and spec.section.lora.enabled:
        lora = spec.section.lora
        adapters, projector, quantisable = lora_parameter_counts(model, lora)
        trainable, total = adapters + projector, total + adapters + projector
        quantised = quantisable if lora.quantization == "4bit" else 0
        spec.notes.append(f"LoRA r={lora.r} on {', '.join(lora.target_modules)}: {adapters:,} adapter parameters")
    precision = precision_of(spec.optimization.mixed_precision)
    vision_config = spec.config.vision_config if spec.family != "reranker" else _reranker_vision(recipe, spec)
    cases = image_cases(recipe, spec, vision_config)
    sized = [(activation_bytes(spec, model, case, precision, text_tokens), case) for case in cases]
    activations, case = max(sized, key=lambda item: item[0])
    if spec.family == "vlm":
        spec.notes.append(f"{text_tokens} text tokens per sample besides the image tokens (--text-tokens)")
    length = _sequence_length(spec, case, text_tokens)
    if spec.stage == "stage1/ranking" and not spec.config.freeze_text_encoder:
        spec.notes.append(f"entity prompts of {ENTITY_PROMPT_TOKENS} tokens, one per anchor")
    text_trains = spec.family == "retrieval" and not spec.config.freeze_text_encoder
    if text_trains and spec.optimization.gradient_checkpointing and not _checkpoints(model.text_encoder):
        name = type(model.text_encoder.backbone).__name__
        spec.notes.append(f"{name}'s layers are not checkpointed (transformers cannot checkpoint them)")
    if spec.stage == "stage1/alignment" and getattr(spec.section, "statement_alignment_weight", 0):
        spec.notes.append(
            f"statement alignment: {ENTITIES_PER_BATCH} entities and {STATEMENTS_PER_STUDY} statements per study"
        )
    largest, root = shard_units(model)
    return StagePlan(spec, precision, trainable, total - trainable, quantised, largest, root, activations, case, length)


def _reranker_vision(recipe, spec: StageSpec):
    retrieval = _saved_config(MedReCoConfig, spec.section.retrieval_model)
    return (retrieval or stage_spec(recipe, "stage1/ranking").config).vision_config


def estimate(stage: StagePlan, strategy: str, request: PlanRequest) -> MemoryEstimate:
    """Bytes per rank of a stage under a strategy (see the module docstring for the accounting)."""
    if strategy not in STRATEGIES:
        raise PlanError(f"unknown strategy {strategy!r}; choose from {', '.join(STRATEGIES)}")
    n, p = request.world_size, stage.precision
    frozen_bytes = (stage.frozen - stage.quantised) * p.frozen + int(stage.quantised * QLORA_BYTES_PER_PARAMETER)
    weights = stage.trainable * p.weight + frozen_bytes
    gradients = stage.trainable * p.gradient
    optimizer = stage.trainable * p.optimizer
    gathered = (stage.root_unit + 2 * stage.largest_unit) * p.weight  # current + prefetched block, root unit
    step = stage.trainable * 4  # torch AdamW (foreach) or DeepSpeed: one fp32 temporary per (local) parameter
    cpu = 0
    if strategy == "ddp":
        buffers = gradients if n > 1 else 0  # DDP's gradient buckets (gradient_as_bucket_view off)
    elif strategy == "zero2":
        gradients, optimizer, step = gradients // n, optimizer // n, step // n
        buffers = min(ZERO2_ALLGATHER_BUCKET, stage.trainable) * p.weight if n > 1 else 0
    elif strategy in ("zero3", "fsdp2"):
        weights, gradients, optimizer, step = weights // n, gradients // n, optimizer // n, step // n
        buffers = gathered if n > 1 else 0
    else:  # zero3_offload: the shards live in CPU RAM, the GPU holds gathered blocks and buckets
        cpu = (weights + gradients + optimizer) // n
        weights = gradients = optimizer = step = 0
        buffers = gathered
    core = weights + gradients + optimizer + buffers + max(stage.activations, step)
    overhead = CUDA_CONTEXT_BYTES + int(FRAGMENTATION * core)
    total = core + overhead
    fits = total <= request.gpu_memory_bytes
    if cpu and request.cpu_memory_bytes is not None:
        fits = fits and cpu * request.gpus <= request.cpu_memory_bytes
    return MemoryEstimate(
        stage=stage.spec.stage,
        strategy=strategy,
        world_size=n,
        precision=p.name,
        modality=stage.case.modality,
        micro_batch=stage.case.micro_batch,
        sequence_length=stage.sequence_length,
        trainable_parameters=stage.trainable,
        frozen_parameters=stage.frozen,
        parameters=weights,
        gradients=gradients,
        optimizer=optimizer,
        activations=stage.activations,
        buffers=buffers,
        optimizer_step=step,
        overhead=overhead,
        total=total,
        cpu=cpu,
        fits=fits,
        notes=tuple(stage.spec.notes),
    )


def check_request(request: PlanRequest) -> None:
    for name in ("gpus", "nodes", "text_tokens"):
        value = getattr(request, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise PlanError(f"{name} must be a positive whole number, got {value!r}")
    if request.gpu_memory_bytes <= 0:
        raise MemorySizeError(f"GPU memory must be positive, got {request.gpu_memory_bytes}")
    unknown = [s for s in request.stages if s not in STAGES] + [s for s in request.strategies if s not in STRATEGIES]
    if unknown:
        raise PlanError(f"unknown stage or strategy {unknown}; stages: {', '.join(STAGES)}; strategies: {STRATEGIES}")
    recipe_path(request.recipe)  # a missing recipe file is named before any model is built
    sections = read_recipe(request.recipe)
    missing = sorted({s.split("/")[0] for s in request.stages} - set(sections))
    if missing:
        logger.info("recipe %s has no section %s: planned with the defaults", request.recipe, missing)


def plan(request: PlanRequest) -> list[MemoryEstimate]:
    """Estimates per rank for every requested stage and strategy, stage by stage."""
    check_request(request)
    estimates = []
    for stage in request.stages:
        stage_plan = plan_stage(request.recipe, stage, request.text_tokens)
        for note in stage_plan.spec.notes:
            logger.info("%s: %s", stage, note)
        estimates += [estimate(stage_plan, strategy, request) for strategy in request.strategies]
    return estimates


def recommend(estimates: list[MemoryEstimate]) -> dict[str, str | None]:
    """stage -> the cheapest strategy that fits (ddp > zero2 > fsdp2 > zero3 > zero3_offload), or None."""
    choice: dict[str, str | None] = {}
    for item in estimates:
        choice.setdefault(item.stage, None)
    for stage in choice:
        fitting = {e.strategy for e in estimates if e.stage == stage and e.fits}
        choice[stage] = next((s for s in PREFERENCE if s in fitting), None)
    return choice


def _gib(n: int) -> str:
    return f"{n / GIB:.1f}"


def format_plan(estimates: list[MemoryEstimate], request: PlanRequest | None = None) -> str:
    """A readable table per stage (GiB per rank for each part, fits yes/no), the assumptions, and
    one recommendation line per stage."""
    lines = []
    if request is not None:
        memory = request.gpu_memory_bytes
        lines.append(
            f"Memory plan for recipe {request.recipe}: {request.gpus} GPU(s) x {request.nodes} node(s) "
            f"(world size {request.world_size}), {memory / GB:g} GB = {memory / GIB:.1f} GiB per GPU."
        )
    lines.append(
        "GiB (2^30 bytes) per rank; GB means 10^9 bytes. total = params + grads + optim + max(activ, step) "
        "+ buffers + overhead; step: the optimiser step's fp32 temporary; cpu: CPU RAM per rank (offload)."
    )
    columns = ("params", "grads", "optim", "activ", "step", "buffers", "overhead", "total", "cpu", "fits")
    header = f"  {'strategy':<14}" + "".join(f"{c:>9}" for c in columns)
    notes: list[str] = []
    for stage in dict.fromkeys(e.stage for e in estimates):
        rows = [e for e in estimates if e.stage == stage]
        first = rows[0]
        lines += [
            "",
            f"{stage}: {first.precision}; trains {first.trainable_parameters:,} of "
            f"{first.trainable_parameters + first.frozen_parameters:,} parameters",
            f"  heaviest batch: {first.modality}, {first.micro_batch} per rank, "
            f"{first.sequence_length} tokens per {'sample' if stage == 'stage2' else 'sequence'}",
            header,
        ]
        for e in rows:
            parts = (e.parameters, e.gradients, e.optimizer, e.activations, e.optimizer_step, e.buffers, e.overhead)
            parts = (*parts, e.total)
            cpu = _gib(e.cpu) if e.cpu else "-"
            lines.append(
                f"  {e.strategy:<14}"
                + "".join(f"{_gib(x):>9}" for x in parts)
                + f"{cpu:>9}{'yes' if e.fits else 'no':>9}"
            )
        notes += [f"  {stage}: {note}" for note in first.notes if f"  {stage}: {note}" not in notes]
    lines += [
        "",
        f"Overhead: {CUDA_CONTEXT_BYTES / GIB:.1f} GiB CUDA context and workspaces + {FRAGMENTATION:.0%} "
        "allocator fragmentation. Assumed:",
        *notes,
        "",
        "Recommendation (cheapest strategy that fits: ddp > zero2 > fsdp2/zero3 > zero3_offload):",
    ]
    for stage, strategy in recommend(estimates).items():
        if strategy is None:
            smallest = min((e for e in estimates if e.stage == stage), key=lambda e: e.total)
            lines.append(
                f"  {stage}: none fits; the smallest is {smallest.strategy} at {_gib(smallest.total)} GiB "
                "(lower the micro batch or turn on gradient checkpointing)"
            )
            continue
        chosen = next(e for e in estimates if e.stage == stage and e.strategy == strategy)
        also = " (or zero3)" if strategy == "fsdp2" and any(e.fits for e in rows_of(estimates, stage, "zero3")) else ""
        budget = f" of {_gib(request.gpu_memory_bytes)}" if request is not None else ""
        lines.append(f"  {stage}: {strategy}{also}, {_gib(chosen.total)}{budget} GiB per rank")
    return "\n".join(lines)


def rows_of(estimates: list[MemoryEstimate], stage: str, strategy: str) -> list[MemoryEstimate]:
    return [e for e in estimates if e.stage == stage and e.strategy == strategy]


__all__ = [
    "CUDA_CONTEXT_BYTES",
    "FRAGMENTATION",
    "GB",
    "GIB",
    "MemoryEstimate",
    "MemorySizeError",
    "PlanError",
    "PlanRequest",
    "STAGES",
    "STRATEGIES",
    "build_stage_model",
    "format_plan",
    "parse_memory_size",
    "plan",
    "plan_stage",
    "recommend",
    "stage_spec",
    "stages_named",
]
