"""The point-wise reranker (paper, Eq. 7-11).

For each image of a query-candidate pair: its entity-aware feature and its `top_k` visual tokens
most attended by the conditioner. The sequence [CLS; f_q; V_q; f_c; V_c] with segment and
position embeddings passes a shallow self-attention encoder with modality-expert feed-forward
layers; a linear head on CLS gives the relevance logit (sigmoid = probability)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers.utils import ModelOutput

from .blocks import MedReCoBlock, check_modality_ids
from .configuration_reranker import MedReCoRerankerConfig
from .modeling_utils import MedReCoPreTrainedModel

SEGMENT_CLS, SEGMENT_QUERY, SEGMENT_CANDIDATE = 0, 1, 2


@dataclass
class RerankerOutput(ModelOutput):
    """loss: BCE when labels are given. logits `(B,)`; probabilities = sigmoid(logits)."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    probabilities: torch.Tensor | None = None


def select_top_tokens(visual_tokens: torch.Tensor, attention: torch.Tensor, k: int) -> torch.Tensor:
    """Eq. 7: the `k` tokens with the highest conditioner attention, in descending order, `(B, k, d)`."""
    if attention.shape != visual_tokens.shape[:2]:
        raise ValueError(f"attention {tuple(attention.shape)} does not match tokens {tuple(visual_tokens.shape[:2])}")
    k = min(k, visual_tokens.shape[1])
    indices = attention.topk(k, dim=1).indices
    return visual_tokens.gather(1, indices[..., None].expand(-1, -1, visual_tokens.shape[-1]))


class MedReCoReranker(MedReCoPreTrainedModel):
    """Scores query-candidate pairs from their entity-conditioned token subsets."""

    config: MedReCoRerankerConfig
    config_class = MedReCoRerankerConfig
    main_input_name = "query_tokens"

    def __init__(self, config: MedReCoRerankerConfig):
        super().__init__(config)
        hidden = config.hidden_size
        self.cls_token = nn.Parameter(torch.zeros(1, 1, hidden))
        self.input_norm = nn.LayerNorm(hidden, eps=config.layer_norm_eps)
        self.segment_embedding = nn.Embedding(3, hidden)
        self.position_embedding = nn.Embedding(config.top_k + 1, hidden)
        self.layers = nn.ModuleList(MedReCoBlock(config) for _ in range(config.num_layers))
        self.final_norm = nn.LayerNorm(hidden, eps=config.layer_norm_eps)
        self.classifier = nn.Linear(hidden, 1)
        self.post_init()

    def _segment(self, feature: torch.Tensor, tokens: torch.Tensor, segment: int) -> torch.Tensor:
        sequence = self.input_norm(torch.cat([feature[:, None, :], tokens], dim=1))
        positions = torch.arange(sequence.shape[1], device=sequence.device)
        segment_ids = torch.full_like(positions, segment)
        return sequence + self.position_embedding(positions) + self.segment_embedding(segment_ids)

    def forward(
        self,
        query_tokens: torch.Tensor,
        query_features: torch.Tensor,
        candidate_tokens: torch.Tensor,
        candidate_features: torch.Tensor,
        modality_ids: torch.Tensor,
        labels: torch.Tensor | None = None,
        **kwargs,
    ) -> RerankerOutput:
        """query/candidate_tokens `(B, K, d)` (from `select_top_tokens`), features `(B, d)`,
        modality_ids `(B,)`, labels `(B,)` in {0, 1} or soft targets in [0, 1]."""
        batch, k, _ = query_tokens.shape
        if k > self.config.top_k or candidate_tokens.shape[1] > self.config.top_k:
            raise ValueError(
                f"at most top_k={self.config.top_k} tokens per image, got {k} and {candidate_tokens.shape[1]}"
            )
        if not (candidate_tokens.shape[0] == query_features.shape[0] == candidate_features.shape[0] == batch):
            raise ValueError("query and candidate inputs must have the same batch size")
        modality_ids = check_modality_ids(modality_ids, batch, self.config.num_experts).to(query_tokens.device)
        cls = self.cls_token.expand(batch, -1, -1) + self.segment_embedding.weight[SEGMENT_CLS]
        hidden_states = torch.cat(
            [
                cls,
                self._segment(query_features, query_tokens, SEGMENT_QUERY),
                self._segment(candidate_features, candidate_tokens, SEGMENT_CANDIDATE),
            ],
            dim=1,
        )
        for layer in self.layers:
            hidden_states, _ = layer(hidden_states, modality_ids)
        logits = self.classifier(self.final_norm(hidden_states[:, 0])).squeeze(-1)
        loss = None
        if labels is not None:
            loss = nn.functional.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))
        return RerankerOutput(loss=loss, logits=logits, probabilities=torch.sigmoid(logits))


__all__ = ["MedReCoReranker", "RerankerOutput", "select_top_tokens"]
