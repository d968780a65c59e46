"""The retrieval model's text encoder: a BERT-style backbone, mean pooling and a projection into the
shared space (paper, section 4.5: BioLORD-2023 by default)."""

from __future__ import annotations

import torch
from torch import nn
from transformers import AutoModel


class MedReCoTextEncoder(nn.Module):
    """Any BERT-style encoder, mean-pooled over real tokens, projected to the shared size, L2-normalised."""

    def __init__(self, text_config, projection_dim: int):
        super().__init__()
        self.backbone = build_text_backbone(text_config)
        self.projection = nn.Linear(text_config.hidden_size, projection_dim, bias=False)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.project(self.pool(input_ids, attention_mask, token_type_ids))

    def pool(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The backbone's mean-pooled output, `(B, text hidden)`: fixed while the backbone is frozen,
        so a trainer may compute it once per text."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        hidden = self.backbone(**inputs).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)

    def project(self, pooled: torch.Tensor) -> torch.Tensor:
        """Pooled backbone output -> L2-normalised shared-space embedding (fp32: similarities need it)."""
        return nn.functional.normalize(self.projection(pooled.to(self.projection.weight.dtype)).float(), dim=-1)


def build_text_backbone(text_config, pretrained_name_or_path: str | None = None, **kwargs) -> nn.Module:
    """A text encoder from a config or pretrained weights, without its pooling head (mean pooling
    replaces it, and an unused head would be dead weight in distributed training)."""
    if pretrained_name_or_path is None:
        backbone = AutoModel.from_config(text_config)
    else:
        backbone = AutoModel.from_pretrained(pretrained_name_or_path, **kwargs)
    if getattr(backbone, "pooler", None) is not None:
        backbone.pooler = None
    return backbone


__all__ = ["MedReCoTextEncoder", "build_text_backbone"]
