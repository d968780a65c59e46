"""Transformer pieces shared by the vision encoder, the conditioner and the reranker.

One attention implementation (dispatched through the transformers attention interface, so SDPA
and flash attention apply) and one modality-expert feed-forward layer serve every model here."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from transformers.activations import ACT2FN
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain softmax attention on (batch, heads, length, head_dim) tensors; returns the weights too."""
    weights = torch.matmul(query, key.transpose(-1, -2)) * scaling
    if attention_mask is not None:
        weights = weights + attention_mask
    weights = nn.functional.softmax(weights, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return output, weights


class MedReCoAttention(nn.Module):
    """Multi-head attention: self-attention, or cross-attention when `key_value_states` is given."""

    def __init__(self, config, hidden_size: int, num_heads: int):
        super().__init__()
        self.config = config
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.scaling = self.head_dim**-0.5
        self.dropout = config.attention_dropout
        self.is_causal = False
        self.q_proj = nn.Linear(hidden_size, hidden_size)
        self.k_proj = nn.Linear(hidden_size, hidden_size)
        self.v_proj = nn.Linear(hidden_size, hidden_size)
        self.o_proj = nn.Linear(hidden_size, hidden_size)

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        batch, query_length, _ = hidden_states.shape
        source = hidden_states if key_value_states is None else key_value_states
        query = self.q_proj(hidden_states).view(batch, query_length, self.num_heads, self.head_dim).transpose(1, 2)
        key = self.k_proj(source).view(batch, -1, self.num_heads, self.head_dim).transpose(1, 2)
        value = self.v_proj(source).view(batch, -1, self.num_heads, self.head_dim).transpose(1, 2)

        implementation = self.config._attn_implementation
        attention_interface: Callable = eager_attention_forward
        if not output_attentions and implementation not in (None, "eager"):
            attention_interface = ALL_ATTENTION_FUNCTIONS[implementation]
        output, weights = attention_interface(
            self,
            query,
            key,
            value,
            attention_mask,
            scaling=self.scaling,
            dropout=self.dropout if self.training else 0.0,
            is_causal=False,
        )
        output = self.o_proj(output.reshape(batch, query_length, -1))
        return output, (weights if output_attentions else None)


class FeedForward(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int, hidden_act: str):
        super().__init__()
        self.fc1 = nn.Linear(hidden_size, intermediate_size)
        self.act = ACT2FN[hidden_act]
        self.fc2 = nn.Linear(intermediate_size, hidden_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(hidden_states)))


class ModalityExpertsFeedForward(nn.Module):
    """One feed-forward expert per modality, hard-routed by each sample's modality id.

    `hidden_states` is (N, ..., hidden) and `modality_ids` is (N,). Each sample only ever meets
    its own expert, so a mixed-modality batch gives the same result as per-sample calls."""

    def __init__(self, hidden_size: int, intermediate_size: int, hidden_act: str, num_experts: int):
        super().__init__()
        self.experts = nn.ModuleList(
            FeedForward(hidden_size, intermediate_size, hidden_act) for _ in range(num_experts)
        )

    def forward(self, hidden_states: torch.Tensor, modality_ids: torch.Tensor) -> torch.Tensor:
        if len(self.experts) == 1:
            return self.experts[0](hidden_states)
        output = torch.zeros_like(hidden_states)
        for expert_id in torch.unique(modality_ids).tolist():
            rows = torch.nonzero(modality_ids == expert_id, as_tuple=True)[0]
            output = output.index_copy(0, rows, self.experts[expert_id](hidden_states.index_select(0, rows)))
        return output


class MedReCoBlock(GradientCheckpointingLayer):
    """Pre-norm self-attention block whose feed-forward layer is a set of modality experts (one
    shared layer when `config.moe` is False)."""

    def __init__(self, config):
        super().__init__()
        self.norm1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.attention = MedReCoAttention(config, config.hidden_size, config.num_attention_heads)
        self.norm2 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        experts = config.num_experts if config.moe else 1
        self.mlp = ModalityExpertsFeedForward(config.hidden_size, config.intermediate_size, config.hidden_act, experts)

    def forward(
        self, hidden_states: torch.Tensor, modality_ids: torch.Tensor, output_attentions: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        attended, weights = self.attention(self.norm1(hidden_states), output_attentions=output_attentions)
        hidden_states = hidden_states + attended
        hidden_states = hidden_states + self.mlp(self.norm2(hidden_states), modality_ids)
        return hidden_states, weights


def check_modality_ids(modality_ids: torch.Tensor, batch_size: int, num_experts: int) -> torch.Tensor:
    """Validate a (batch,) tensor of expert ids and return it as int64."""
    modality_ids = torch.as_tensor(modality_ids).reshape(-1).long()
    if modality_ids.numel() != batch_size:
        raise ValueError(f"expected {batch_size} modality ids (one per image), got {modality_ids.numel()}")
    if modality_ids.numel() and (modality_ids.min() < 0 or modality_ids.max() >= num_experts):
        raise ValueError(
            f"modality ids must lie in [0, {num_experts}); got {sorted(set(modality_ids.tolist()))}. "
            "Use config.modality_id(name) to look ids up."
        )
    return modality_ids
