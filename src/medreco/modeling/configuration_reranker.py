"""Configuration of the reranker (paper, section 4.5, Eq. 7-11)."""

from __future__ import annotations

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig

from .configuration_vision import ModalityTableMixin, check_heads_divide


@strict
class MedReCoRerankerConfig(ModalityTableMixin, PreTrainedConfig):
    r"""Settings of [`MedReCoReranker`] (paper, Eq. 7-11).

    Each image of a query-candidate pair contributes its entity-aware feature and its `top_k`
    most attended visual tokens; the sequence [CLS; query; candidate] goes through a shallow
    self-attention encoder whose feed-forward layers are modality experts."""

    model_type = "medreco_reranker"

    hidden_size: int = 512
    num_layers: int = 3
    num_attention_heads: int = 8
    intermediate_size: int = 2048
    hidden_act: str = "gelu"
    top_k: int = 64
    modalities: list[str] | None = None
    moe: bool = True  # False: one feed-forward layer per block shared by every modality
    attention_dropout: float = 0.0
    layer_norm_eps: float = 1e-6
    initializer_range: float = 0.02

    @property
    def max_sequence_length(self) -> int:
        return 1 + 2 * (self.top_k + 1)

    def validate_architecture(self):
        check_heads_divide(self.hidden_size, self.num_attention_heads)
        if self.top_k < 1:
            raise ValueError(f"top_k must be positive, got {self.top_k}")


__all__ = ["MedReCoRerankerConfig"]
