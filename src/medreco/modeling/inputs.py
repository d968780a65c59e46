"""Typed groups of the retrieval model's training inputs (`MedReCoModel.forward`): texts, entity
statements, ranking candidates, priors and progression pairs, each moving to a device like a tensor."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch


class _Inputs:
    """A typed group of model inputs that moves to a device like a tensor (`.to(device)`), so that
    trainers can place a batch without knowing its structure."""

    def to(self, *args, **kwargs):
        moved = {}
        for item in fields(self):
            value = getattr(self, item.name)
            moved[item.name] = value.to(*args, **kwargs) if hasattr(value, "to") else value
        return replace(self, **moved)


@dataclass
class TextBatch(_Inputs):
    """Texts as tokens (`input_ids`, `attention_mask`) or as the pooled outputs of a frozen text
    backbone (`pooled`, see `MedReCoTextEncoder.pool`), which then take precedence."""

    input_ids: torch.Tensor | None = None
    attention_mask: torch.Tensor | None = None
    pooled: torch.Tensor | None = None


@dataclass
class StatementBatch(_Inputs):
    """Entity statements mined from a batch's reports: the batch's distinct entities (one row each),
    the statements, `pairs` `(P, 2)` of (entity row, image row) and `groups` `(P,)` (equal ids: the
    same statement); optionally `negatives`, hard-negative statements (a statement with its finding's
    presence reversed, CLIP-clinic) with their `negative_groups` in the same id space."""

    entities: TextBatch
    statements: TextBatch
    pairs: torch.Tensor
    groups: torch.Tensor | None = None
    negatives: TextBatch | None = None
    negative_groups: torch.Tensor | None = None


@dataclass
class ReportSupervision(_Inputs):
    """What CLIP-clinic adds to an alignment batch's report side: `hard_negatives`, H reports that
    each differ from one of the batch's reports in one finding (extra texts that no image shows),
    with `negative_rows` `(H,)`, the batch row each was made from (never a soft target of that row:
    it contradicts that study's report), and `clinical_labels` `(B + H, C)`, the clinical-label
    vectors of [reports; hard negatives] (for the clinical soft labels)."""

    hard_negatives: TextBatch | None = None
    clinical_labels: torch.Tensor | None = None
    negative_rows: torch.Tensor | None = None


@dataclass
class CandidateBatch(_Inputs):
    """The images ranked against a batch's anchors: `pixel_values`, `modality_ids`, and `relevance`
    `(A, C)` of each candidate to each anchor (None: candidates are [positives; negatives], one of
    each per anchor)."""

    pixel_values: torch.Tensor
    modality_ids: torch.Tensor
    relevance: torch.Tensor | None = None


@dataclass
class PriorBatch(_Inputs):
    """Each alignment study's prior (temporal pretraining): `pixel_values` like the current
    images' (rows where `has_prior` `(B,)` is False are ignored), and `changed` `(B,)`, whether the
    current report describes a change from the prior (TILA's change label). TAMM's supervision:
    `trend` `(B,)`, the pair's trend (an index into `PROGRESSION_CLASSES`, -1 none), and for the rows with
    a trend, in batch order, the priors' reports and the pairs' rationale and counter rationale."""

    pixel_values: torch.Tensor
    has_prior: torch.Tensor
    changed: torch.Tensor | None = None
    trend: torch.Tensor | None = None
    prior_reports: TextBatch | None = None
    rationale: TextBatch | None = None
    counter_rationale: TextBatch | None = None


@dataclass
class ProgressionBatch(_Inputs):
    """Prior/current pairs for the progression head: the two studies' static tokens `(B, N, d)`
    (cached from a frozen encoder, or `last_hidden_state`), `has_prior` `(B,)` (False: the
    missing-prior token instead, the static baseline), the finding's text embedding
    `entity_embeddings` `(B, d)`, and `labels` `(B,)` indices into `PROGRESSION_CLASSES` (for the
    loss). `both_orders` also reads every pair backwards (prior as current), for TILA's losses."""

    current_tokens: torch.Tensor
    prior_tokens: torch.Tensor
    entity_embeddings: torch.Tensor
    has_prior: torch.Tensor | None = None
    labels: torch.Tensor | None = None
    both_orders: bool = False
