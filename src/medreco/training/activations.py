"""Activation memory of one training step, from model configs alone: the transformer stacks a
step runs (`Tower`), what each layer keeps for backward and its working set, the entity
conditioner's cross-attention, and the step's budget (`ActivationBudget`). The planner
(`medreco.training.planner`) assembles these per stage; nothing here builds a model."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Tower:
    """A stack of transformer layers one step runs: `sequences` x `length` tokens through `layers`."""

    name: str
    sequences: int
    length: int
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_hidden: int
    gated_mlp: bool = False  # SwiGLU (Qwen2): gate, up, act(gate), product
    eager_attention: bool = False  # attention probabilities materialised (MPNet): heads x length per token
    attention_dropout: bool = False
    hidden_dropout: bool = False  # dropout on the attention and MLP outputs (BERT, MPNet)
    saves: bool = True  # False: nothing upstream or inside needs gradients (a frozen tower on raw inputs)
    checkpointed: bool = False

    @property
    def tokens(self) -> int:
        return self.sequences * self.length


def layer_bytes(tower: Tower, activation: int) -> float:
    """Bytes one layer keeps per token for backward (Korthikanti et al., 2022, generalised): the
    two norms' inputs and outputs (4h), query and attention output (2h), keys and values (2 x kv
    width), the MLP's hidden activations (2i; 4i gated), the attention probabilities when they are
    materialised (heads x length, x2 with dropout) and dropout masks at one byte per element."""
    h, i = tower.hidden, tower.intermediate
    elements = 6 * h + 2 * tower.kv_hidden + (4 if tower.gated_mlp else 2) * i
    masks = 0
    if tower.eager_attention:
        elements += tower.heads * tower.length * (2 if tower.attention_dropout else 1)
        masks += tower.heads * tower.length if tower.attention_dropout else 0
    if tower.hidden_dropout:
        elements += 2 * h
        masks += 2 * h
    return elements * activation + masks


def tower_bytes(tower: Tower, activation: int) -> tuple[int, int]:
    """(kept, working): bytes kept until backward, and the working set of one layer on top (its
    backward's gradient temporaries, its recomputation under checkpointing, or a no-grad forward).
    Checkpointed towers keep only each layer's input (hidden per token)."""
    one_layer = int(tower.tokens * layer_bytes(tower, activation))
    if not tower.saves:
        return 0, one_layer
    if tower.checkpointed:
        return tower.tokens * tower.layers * tower.hidden * activation, one_layer
    return tower.layers * one_layer, one_layer


def conditioner_bytes(config, hidden: int, groups: int, images: int, tokens: int, activation: int) -> int:
    """The entity conditioner (cross-attention of `groups` queries per image over `images` x `tokens`
    visual tokens): per layer the normed tokens, keys and values and their attention layout copies
    (5 x images x tokens x hidden), the attention scores and fp32 softmax (groups x images x heads x
    tokens, 4 + activation bytes each) and the queries' own layer (12h + 2i per query)."""
    queries = groups * images
    per_layer = (
        5 * images * tokens * hidden * activation
        + queries * config.num_attention_heads * tokens * (4 + activation)
        + queries * (12 * hidden + 2 * config.intermediate_size) * activation
    )
    return images * tokens * hidden * activation + config.num_layers * per_layer


@dataclass(frozen=True)
class ImageCase:
    """One modality's batch: its preprocessed size, micro batch and token grid."""

    modality: str
    size: tuple[int, int, int]  # (D, H, W)
    micro_batch: int
    grid_tokens: int  # in-plane tokens per slice, n = (H/p)(W/p)
    depth_tokens: int  # D' = D / depth patch (1 for 2D)

    @property
    def voxels(self) -> int:
        return self.size[0] * self.size[1] * self.size[2]

    @property
    def tokens(self) -> int:
        return self.grid_tokens * self.depth_tokens


def vision_towers(vision, images: int, case: ImageCase, saves: bool, checkpointed: bool) -> list[Tower]:
    """The MoE-ViT (`vision`: its config): spatial blocks over every slice's n tokens, then depth
    blocks over the D' tokens at every in-plane location (volumes only)."""
    common = dict(
        hidden=vision.hidden_size,
        intermediate=vision.intermediate_size,
        heads=vision.num_attention_heads,
        kv_hidden=vision.hidden_size,
        eager_attention=vision._attn_implementation == "eager",
        saves=saves,
        checkpointed=checkpointed,
    )
    towers = [
        Tower("vision/spatial", images * case.depth_tokens, case.grid_tokens, vision.num_spatial_layers, **common)
    ]
    if case.depth_tokens > 1 and vision.num_depth_layers:
        towers.append(
            Tower("vision/depth", images * case.grid_tokens, case.depth_tokens, vision.num_depth_layers, **common)
        )
    return towers


def text_tower(config, name: str, sequences: int, length: int, checkpointed: bool) -> Tower:
    """A BERT-style encoder (BERT, MPNet) or a causal LM (Qwen2, Llama) from its config."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    gated = getattr(config, "hidden_act", "") in ("silu", "swiglu") and getattr(config, "model_type", "") != "bert"
    return Tower(
        name,
        sequences,
        length,
        config.num_hidden_layers,
        config.hidden_size,
        config.intermediate_size,
        heads,
        config.hidden_size // heads * kv_heads,
        gated_mlp=gated,
        eager_attention=config._attn_implementation == "eager",
        attention_dropout=bool(getattr(config, "attention_probs_dropout_prob", 0) or 0),
        hidden_dropout=bool(getattr(config, "hidden_dropout_prob", 0) or 0),
        checkpointed=checkpointed,
    )


@dataclass
class ActivationBudget:
    """Activation bytes of one step: what is kept for backward (towers' and `extra`), plus the
    largest of the working sets that do not coexist (one layer's, the loss's gradients)."""

    activation: int
    towers: list[Tower] = field(default_factory=list)
    extra: int = 0
    working: int = 0

    def add(self, *towers: Tower) -> None:
        self.towers.extend(towers)

    def total(self) -> int:
        kept, working = self.extra, self.working
        for tower in self.towers:
            tower_kept, tower_working = tower_bytes(tower, self.activation)
            kept, working = kept + tower_kept, max(working, tower_working)
        return kept + working


__all__ = [
    "ActivationBudget",
    "ImageCase",
    "Tower",
    "conditioner_bytes",
    "layer_bytes",
    "text_tower",
    "tower_bytes",
    "vision_towers",
]
