"""Configuration of the modality-routed MoE vision transformer (MedReCo paper, section 4.5)."""

from __future__ import annotations

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig

# One expert MLP per modality family. The order is the id table saved with every config, so a
# checkpoint keeps its routing even if this default changes.
DEFAULT_MODALITIES = ["chest_xray", "chest_ct", "abdominal_ct", "brain_mri", "ultrasound"]


def check_heads_divide(hidden_size: int, num_attention_heads: int) -> None:
    """Attention splits `hidden_size` evenly across heads."""
    if hidden_size % num_attention_heads:
        raise ValueError(
            f"hidden_size ({hidden_size}) must be divisible by num_attention_heads ({num_attention_heads})"
        )


class ModalityTableMixin:
    """The modality-to-expert id table shared by configs whose blocks have modality experts."""

    def __post_init__(self, **kwargs):
        if self.modalities is None:
            self.modalities = list(DEFAULT_MODALITIES)
        super().__post_init__(**kwargs)

    @property
    def num_experts(self) -> int:
        return len(self.modalities)

    def modality_id(self, name: str) -> int:
        """The expert id of a modality family name; raises `ValueError` listing the known ones."""
        try:
            return self.modalities.index(name)
        except ValueError:
            raise ValueError(f"unknown modality {name!r}; this model knows {self.modalities}") from None

    def validate_modalities(self):
        if len(set(self.modalities)) != len(self.modalities) or not self.modalities:
            raise ValueError(f"modalities must be a non-empty list of unique names, got {self.modalities}")


@strict
class MedReCoVisionConfig(ModalityTableMixin, PreTrainedConfig):
    r"""Settings of [`MedReCoVisionModel`]. Defaults are the paper's sizes.

    The encoder has two stages: `num_spatial_layers` self-attention blocks inside each slice,
    then `num_depth_layers` blocks along depth at every in-plane location (volumes only).
    Each block's feed-forward layer is split into one expert per entry of `modalities`; every
    sample is routed to its modality's expert by id, so one batch may mix modalities. With
    `moe=False` the blocks share one feed-forward layer (the paper's MoE-vs-shared ablation); the
    modality table still names the ids the model accepts.

    `num_temporal_layers > 0` adds BioViL-T's prior-image fusion (`MedReCoTemporalFusion`): the
    current and the prior study's tokens, with 2D sinusoidal positions and learned temporal
    embeddings, through that many self-attention blocks; the current half of the output is the
    temporal feature `P_diff`, and a learned missing-prior token stands in when a study has no
    prior. 0 (the MedReCo paper) builds no fusion.

    Example:
    ```python
    >>> config = MedReCoVisionConfig()  # 480x480 in-plane, 24x24 grid, 576 tokens of dim 512
    >>> config.modality_id("chest_ct")
    1
    ```"""

    model_type = "medreco_vision"
    base_config_key = "vision_config"

    hidden_size: int = 512
    num_spatial_layers: int = 8
    num_depth_layers: int = 4
    num_attention_heads: int = 8
    intermediate_size: int = 2048
    hidden_act: str = "gelu"
    num_channels: int = 1
    image_size: int = 480
    patch_size: int = 20
    depth_patch_size: int = 10
    max_depth: int = 240
    modalities: list[str] | None = None
    moe: bool = True  # False: one feed-forward layer per block shared by every modality (the ablation)
    num_temporal_layers: int = 0  # BioViL-T's prior-image fusion blocks (0: none, the MedReCo paper)
    attention_dropout: float = 0.0
    layer_norm_eps: float = 1e-6
    initializer_range: float = 0.02

    def validate_architecture(self):
        """Reject sizes that cannot build a model, with the field named."""
        check_heads_divide(self.hidden_size, self.num_attention_heads)
        if self.image_size % self.patch_size:
            raise ValueError(f"image_size ({self.image_size}) must be a multiple of patch_size ({self.patch_size})")
        if self.num_temporal_layers < 0:
            raise ValueError(f"num_temporal_layers must be >= 0, got {self.num_temporal_layers}")

    @property
    def grid_size(self) -> int:
        """Tokens per side of the in-plane grid at the configured image size (24 at the paper's size)."""
        return self.image_size // self.patch_size

    @property
    def num_depth_positions(self) -> int:
        return max(1, self.max_depth // self.depth_patch_size)


__all__ = ["DEFAULT_MODALITIES", "MedReCoVisionConfig", "ModalityTableMixin", "check_heads_divide"]
