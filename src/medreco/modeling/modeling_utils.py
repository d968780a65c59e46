"""What every MedReCo model shares: weight initialisation, strict checkpoint loading, parameter counts."""

from __future__ import annotations

from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init

# Parameters our modules declare directly (not inside a Linear/Embedding/Conv layer).
_LEARNED_TOKENS = (
    "cls_query",
    "cls_token",
    "spatial_position_embedding",
    "depth_position_embedding",
    "temporal_embedding",
    "missing_prior",
)


def block_classes(model: nn.Module) -> list[str]:
    """Names of the block classes `model` holds that must stay whole: those our models declare and
    those the pretrained models inside them name (BERT's layers, a language model's decoder
    layers), wherever they sit in the module tree, kept to the classes really present. A block
    holding the input embeddings (BERT's `BertEmbeddings`) is left out: Accelerate's FSDP2 gives
    the embeddings a unit of their own and would shard them twice."""
    present = {type(module).__name__ for module in model.modules()}
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if embeddings is not None:
        present -= {type(module).__name__ for module in model.modules() if embeddings in module.modules()}
    names: list[str] = []
    for module in model.modules():
        if isinstance(module, MedReCoPreTrainedModel):
            declared = module._block_classes
        else:
            declared = sorted(getattr(module, "_no_split_modules", None) or [])
        names += [name for name in declared if name in present and name not in names]
    return names


class CheckpointMismatchError(ValueError):
    """A checkpoint's weights do not match the model: loading would silently leave random weights."""


class MedReCoPreTrainedModel(PreTrainedModel):
    """Base of the MedReCo models.

    `from_pretrained` is strict: missing, unexpected or mismatched weights raise
    `CheckpointMismatchError` unless `strict=False` is passed (then they are logged and returned
    with `output_loading_info=True`, as in transformers)."""

    base_model_prefix = "medreco"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_attention_backend = True
    _block_classes = ("MedReCoBlock", "EntityCrossAttentionLayer")  # those of ours a model may hold

    @property
    def _no_split_modules(self) -> set[str]:
        """The blocks device maps keep whole and FSDP shards one unit each (Accelerate reads this,
        in our code and in TRL's or anyone's): computed from what the model holds now, so a
        language model loaded after construction brings its decoder layers and absent classes never
        appear (Accelerate refuses a class the model lacks)."""
        return set(block_classes(self))

    @_no_split_modules.setter
    def _no_split_modules(self, value) -> None:
        """transformers' `post_init` stores the declared classes; ours are computed (above)."""

    def get_input_embeddings(self) -> nn.Module | None:
        """The token embeddings, for models with text input (libraries such as Accelerate's FSDP
        ask every model); the image-only models have none."""
        return None

    def _init_weights(self, module):
        super()._init_weights(module)
        std = getattr(self.config, "initializer_range", 0.02)
        for name, parameter in module.named_parameters(recurse=False):
            if name in _LEARNED_TOKENS:
                init.trunc_normal_(parameter, std=std)

    @classmethod
    def from_pretrained(cls, *args, strict: bool = True, **kwargs):
        wants_info = kwargs.pop("output_loading_info", False)
        source = args[0] if args else kwargs.get("pretrained_model_name_or_path")
        try:
            model, info = super().from_pretrained(*args, output_loading_info=True, **kwargs)
        except RuntimeError as error:
            if "ignore_mismatched_sizes" not in str(error):
                raise
            raise CheckpointMismatchError(
                f"checkpoint {source} has weights whose shapes do not match {cls.__name__} (see the load report above)"
            ) from error
        problems = {
            name: sorted(map(str, info[name]))
            for name in ("missing_keys", "unexpected_keys", "mismatched_keys")
            if info[name]
        }
        if strict and problems:
            details = "; ".join(
                f"{name}: {keys[:8]}{' ...' if len(keys) > 8 else ''}" for name, keys in problems.items()
            )
            raise CheckpointMismatchError(
                f"checkpoint {source} does not match {cls.__name__} ({details}). Pass strict=False to load it anyway."
            )
        return (model, info) if wants_info else model

    def parameter_counts(self) -> dict[str, int]:
        """Total parameters and, per modality, the parameters one sample of that modality uses."""
        modalities = getattr(self.config, "modalities", None) or self.config.vision_config.modalities
        return count_active_parameters(self, modalities)


def count_active_parameters(model: nn.Module, modalities: list[str]) -> dict[str, int]:
    """`{"total": n, "<modality>": active}`: a sample never uses the experts of other modalities.
    A layer with a single expert (shared, e.g. `moe=False`) is active for every modality."""
    total = sum(p.numel() for p in model.parameters())
    unused = [0] * len(modalities)
    for module in model.modules():
        experts = getattr(module, "experts", None)
        if isinstance(experts, nn.ModuleList) and len(experts) > 1:
            sizes = [sum(p.numel() for p in expert.parameters()) for expert in experts]
            for modality_id in range(len(modalities)):
                unused[modality_id] += sum(sizes) - (sizes[modality_id] if modality_id < len(sizes) else 0)
    return {"total": total, **{modality: total - unused[i] for i, modality in enumerate(modalities)}}


__all__ = ["CheckpointMismatchError", "MedReCoPreTrainedModel", "count_active_parameters"]
