"""TAMM's temporal modules (sections 3.2-3.3): a trend classifier shared by the image- and the
text-embedding differences of adjacent studies, and a rationale-conditioned predictor of the adjacent
study's patch tokens. Built on a retrieval model when a recipe switches their losses on."""

from __future__ import annotations

import torch
from torch import nn

# BioViL-T's and TILA's progression classes, and TAMM's trends, in the order whose reversal (index
# 2 - i) is the inverse change: the pair read backwards turns improving into worsening, stable stays stable
PROGRESSION_CLASSES = ("improving", "stable", "worsening")


class RationaleConditionedPredictor(nn.Module):
    """TAMM's f_VLM: one study's patch tokens `(B, N, d)` and a rationale embedding `(B, d)` -> the
    adjacent study's tokens, a residual MLP whose normalised input the rationale scales and shifts
    (FiLM), so the text says what changes and the tokens where."""

    def __init__(self, hidden_size: int, intermediate_size: int, layer_norm_eps: float = 1e-6):
        super().__init__()
        self.norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.modulation = nn.Linear(hidden_size, 2 * hidden_size)
        self.mlp = nn.Sequential(
            nn.Linear(hidden_size, intermediate_size), nn.GELU(), nn.Linear(intermediate_size, hidden_size)
        )

    def forward(self, tokens: torch.Tensor, rationale: torch.Tensor) -> torch.Tensor:
        scale, shift = self.modulation(rationale.to(tokens.dtype)).chunk(2, dim=-1)
        return tokens + self.mlp(self.norm(tokens) * (1 + scale[:, None]) + shift[:, None])


def attach_trend_parts(model: nn.Module, trend_weight: float, rationale_weight: float) -> nn.Module:
    """The retrieval `model` with TAMM's loss weights set and the modules they need (created, with
    the model's initialisation, when missing; a model saved with them keeps its own)."""
    config = model.config
    config.trend_weight, config.rationale_weight = float(trend_weight), float(rationale_weight)
    hidden = config.vision_config.hidden_size
    created = []
    if trend_weight and getattr(model, "trend_head", None) is None:
        model.trend_head = nn.Linear(hidden, len(PROGRESSION_CLASSES))
        created.append(model.trend_head)
    if rationale_weight and getattr(model, "rationale_predictor", None) is None:
        model.rationale_predictor = RationaleConditionedPredictor(hidden, config.conditioner_config.intermediate_size)
        created.append(model.rationale_predictor)
    device = model.logit_scale.device
    for module in created:
        module.apply(model._init_weights)
        module.to(device)
    return model


__all__ = ["PROGRESSION_CLASSES", "RationaleConditionedPredictor", "attach_trend_parts"]
