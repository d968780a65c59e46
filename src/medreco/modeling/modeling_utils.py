"""What every MedReCo model shares: weight initialisation, strict checkpoint loading, parameter counts."""

from __future__ import annotations

from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init

# Parameters our modules declare directly (not inside a Linear/Embedding/Conv layer).
_LEARNED_TOKENS = ("cls_query", "cls_token", "spatial_position_embedding", "depth_position_embedding")


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
    _no_split_modules = ["MedReCoBlock"]

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
