"""Training objectives: stage 1's (MedReCo paper, section 4.5), CLIP-clinic's soft labels, and the
temporal ones of TILA and TAMM.

Ranking losses take a similarity matrix `(anchors, candidates)` and a relevance matrix of the
same shape: 1 = positive, 0 = negative, -1 = unknown (ignored). Data builders fill relevance for
every anchor-candidate pair whose report similarity they know, which is what lets a batch's
other samples serve as hard negatives.

TILA's objectives (section 2) work on progression logits `(B, 3)` over (improving, stable,
worsening), whose reversal `flip(-1)` is the inverse change, and on SigLIP's pairwise sigmoid."""

from __future__ import annotations

import torch
from torch import nn


def symmetric_infonce_loss(
    image_embeds: torch.Tensor,
    text_embeds: torch.Tensor,
    logit_scale: torch.Tensor,
    groups: torch.Tensor | None = None,
) -> torch.Tensor:
    """CLIP-style InfoNCE: row i of each input is a matching image-text pair.

    `groups` `(B,)`: rows with the same id say the same thing (template reports repeat "No pleural
    effusion." across many images); each row's target is then spread evenly over its group instead
    of calling its duplicates negatives (the soft labels of CLIP-clinic, section 4.2, reduced to
    identical content)."""
    size = image_embeds.shape[0]
    if groups is None:
        targets = torch.eye(size, device=image_embeds.device)
    else:
        targets = (groups[:, None] == groups[None, :]).float()
    return soft_target_infonce_loss(image_embeds, text_embeds, logit_scale, targets)


def soft_target_infonce_loss(
    image_embeds: torch.Tensor, text_embeds: torch.Tensor, logit_scale: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """InfoNCE against soft targets (CLIP-clinic, Eqs. 1-2 and 6-7), with extra texts.

    `image_embeds` `(B, d)`; `text_embeds` `(B + H, d)`: the B paired texts, then H hard negatives
    (texts no image in the batch shows); `targets` `(B, B + H)`, non-negative, each row's weights
    over the texts (normalised here). Image to text is a softmax over all B + H texts; text to image
    over the B images for the B paired texts only (hard negatives have no image of their own), with
    the transposed targets. Cross-entropy against soft targets is the paper's KL divergence plus the
    targets' entropy, which does not depend on the model: the same gradients, and with one-hot
    targets the same value as CLIP's loss."""
    size = image_embeds.shape[0]
    if targets.shape != (size, text_embeds.shape[0]) or text_embeds.shape[0] < size:
        raise ValueError(
            f"targets must be (images, texts) with at least one text per image; got {tuple(targets.shape)} for "
            f"{size} images and {text_embeds.shape[0]} texts"
        )
    # in float32 even under autocast: a bf16 cosine near 1 moves in steps of 1/256, 0.4 at a logit scale of 100
    with torch.autocast(image_embeds.device.type, enabled=False):
        logits = logit_scale.exp().float() * (image_embeds.float() @ text_embeds.float().t())
    targets = targets.float()
    image_to_text = targets / targets.sum(dim=1, keepdim=True)
    paired = targets[:, :size].t()
    text_to_image = paired / paired.sum(dim=1, keepdim=True)
    return (
        nn.functional.cross_entropy(logits, image_to_text)
        + nn.functional.cross_entropy(logits[:, :size].t(), text_to_image)
    ) / 2


def dynamic_soft_labels(similarity: torch.Tensor, threshold: float) -> torch.Tensor:
    """CLIP-clinic's dynamic soft labels (Eqs. 4-5): `(N, M)` similarities (cosines; row i's own
    text in column i) above `threshold` rescaled to (0, 1], the rest 0, each row's own text 1, rows
    normalised to sum to 1. Rows whose vectors are all zero (a study with no label) keep only their
    own text."""
    if not 0 <= threshold < 1:
        raise ValueError(f"a soft-label threshold must be in [0, 1); got {threshold}")
    similarity = similarity.float()
    labels = torch.where(similarity > threshold, (similarity - threshold) / (1 - threshold), 0.0).clamp(max=1)
    rows = torch.arange(similarity.shape[0], device=similarity.device)
    labels[rows, rows] = 1.0
    return labels / labels.sum(dim=1, keepdim=True)


def triplet_loss_with_hard_negatives(
    similarity: torch.Tensor, relevance: torch.Tensor, margin: float = 0.2, mining: str = "semi_hard"
) -> torch.Tensor:
    """Eq. 6 with in-batch negative mining. Every (anchor, positive) pair is contrasted with:

    - `"hardest"`: the anchor's most similar negative (batch-hard);
    - `"semi_hard"`: the most similar negative that is still less similar than the positive,
      falling back to the hardest when there is none (FaceNet; batch-hard alone tends to
      collapse all features early in training);
    - `"all"`: every negative, averaged over the violating triplets (batch-all).

    Anchors without both a positive and a negative do not contribute; a batch with none gives a
    zero loss that keeps the graph."""
    check_ranking_inputs(similarity, relevance)
    negatives = relevance == 0
    positives = relevance == 1
    usable = positives & negatives.any(dim=1, keepdim=True)
    if not usable.any():
        return similarity.sum() * 0.0
    anchor_index, positive_index = usable.nonzero(as_tuple=True)
    positive_similarity = similarity[anchor_index, positive_index][:, None]  # (pairs, 1)
    negative_similarity = similarity[anchor_index].masked_fill(~negatives[anchor_index], float("-inf"))
    if mining == "all":
        violations = (negative_similarity - positive_similarity + margin).clamp(min=0)
        active = violations > 0
        return violations[active].mean() if active.any() else violations.sum() * 0.0
    hardest = negative_similarity.max(dim=1).values
    if mining == "semi_hard":
        easier = negative_similarity.masked_fill(negative_similarity >= positive_similarity, float("-inf"))
        semi_hard = easier.max(dim=1).values
        hardest = torch.where(torch.isfinite(semi_hard), semi_hard, hardest)
    elif mining != "hardest":
        raise ValueError(f"unknown mining strategy {mining!r}; use 'hardest', 'semi_hard' or 'all'")
    return (hardest - positive_similarity.squeeze(1) + margin).clamp(min=0).mean()


def smooth_ap_loss(similarity: torch.Tensor, relevance: torch.Tensor, temperature: float = 0.01) -> torch.Tensor:
    """1 - SmoothAP (Brown et al., 2020): average precision with the rank's step function replaced
    by a sigmoid of temperature `temperature`. Candidates with relevance -1 are left out."""
    check_ranking_inputs(similarity, relevance)
    considered = relevance >= 0
    positives = relevance == 1
    usable_anchors = positives.any(dim=1) & (considered & ~positives).any(dim=1)
    if not usable_anchors.any():
        return similarity.sum() * 0.0
    sim = similarity[usable_anchors]
    considered, positives = considered[usable_anchors], positives[usable_anchors]
    # difference[a, i, j] = s_aj - s_ai: how far candidate j sits above candidate i.
    difference = sim[:, None, :] - sim[:, :, None]
    soft_above = torch.sigmoid(difference / temperature)
    eye = torch.eye(sim.shape[1], dtype=torch.bool, device=sim.device)
    soft_above = soft_above.masked_fill(eye, 0.0)
    rank_all = 1 + (soft_above * considered[:, None, :]).sum(-1)
    rank_positive = 1 + (soft_above * positives[:, None, :]).sum(-1)
    precision = (rank_positive / rank_all) * positives
    average_precision = precision.sum(-1) / positives.sum(-1)
    return 1 - average_precision.mean()


def contrastive_ranking_loss(
    similarity: torch.Tensor, relevance: torch.Tensor, logit_scale: torch.Tensor
) -> torch.Tensor:
    """Multi-positive InfoNCE over the labelled candidates (supervised contrastive, Khosla et al.,
    2020): each (anchor, positive) pair is a softmax over that positive and all the anchor's
    negatives, at the model's learnable temperature. Unlike a margin, the temperature amplifies
    small cosine differences, so features that start nearly identical (small models trained from
    scratch) still receive a useful gradient instead of settling in the collapsed state where
    every triplet costs exactly the margin. Unknown pairs (-1) are left out."""
    check_ranking_inputs(similarity, relevance)
    negatives = relevance == 0
    usable = (relevance == 1) & negatives.any(dim=1, keepdim=True)
    if not usable.any():
        return similarity.sum() * 0.0
    logits = logit_scale.exp().float() * similarity.float()
    negative_logits = logits.masked_fill(~negatives, float("-inf"))
    anchor_index, positive_index = usable.nonzero(as_tuple=True)
    positive_logits = logits[anchor_index, positive_index]
    denominator = torch.logaddexp(positive_logits, torch.logsumexp(negative_logits[anchor_index], dim=1))
    return (denominator - positive_logits).mean()


def check_ranking_inputs(similarity: torch.Tensor, relevance: torch.Tensor) -> None:
    if similarity.shape != relevance.shape or similarity.ndim != 2:
        raise ValueError(
            f"similarity and relevance must both be (anchors, candidates); got {tuple(similarity.shape)} and "
            f"{tuple(relevance.shape)}"
        )


def triplet_relevance(num_anchors: int, device: torch.device | None = None) -> torch.Tensor:
    """Relevance for candidates laid out as [positives; negatives], one of each per anchor, with
    nothing known about the other pairs."""
    relevance = torch.full((num_anchors, 2 * num_anchors), -1, dtype=torch.long, device=device)
    rows = torch.arange(num_anchors, device=device)
    relevance[rows, rows] = 1
    relevance[rows, rows + num_anchors] = 0
    return relevance


def invert_progression(values: torch.Tensor) -> torch.Tensor:
    """TILA's `S` (Eq. 4): improving and worsening swapped, stable kept, on the last dimension of
    probabilities or logits `(..., 3)`; on labels (0, 1, 2) use `2 - labels`."""
    return values.flip(-1)


def bidirectional_cross_entropy(
    forward_logits: torch.Tensor,
    reversed_logits: torch.Tensor,
    labels: torch.Tensor,
    class_weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """TILA's BiCE (Eq. 3): cross-entropy of the forward pair with its label and of the reversed
    pair with the inverse label (`2 - y`), averaged; `class_weights` as in weighted cross-entropy."""
    forward = nn.functional.cross_entropy(forward_logits.float(), labels, weight=class_weights)
    backward = nn.functional.cross_entropy(reversed_logits.float(), 2 - labels, weight=class_weights)
    return (forward + backward) / 2


def temporal_consistency_loss(forward_logits: torch.Tensor, reversed_logits: torch.Tensor) -> torch.Tensor:
    """TILA's TCL (Eq. 5): mean over pairs of the squared distance between the forward class
    probabilities and the inverted reversed ones; 0 exactly when the reversed reading mirrors the
    forward one."""
    forward = forward_logits.float().softmax(-1)
    reversed_inverted = invert_progression(reversed_logits.float().softmax(-1))
    return (forward - reversed_inverted).pow(2).sum(-1).mean()


def inversion_aware_probabilities(forward_logits: torch.Tensor, reversed_logits: torch.Tensor) -> torch.Tensor:
    """TILA's inversion-aware scoring (Eq. 7): the mean of the forward probabilities and the
    inverted probabilities of the reversed pair."""
    return (forward_logits.float().softmax(-1) + invert_progression(reversed_logits.float().softmax(-1))) / 2


def pairwise_sigmoid_loss(
    image_embeds: torch.Tensor,
    text_embeds: torch.Tensor,
    positives: torch.Tensor,
    logit_scale: torch.Tensor,
    logit_bias: torch.Tensor,
) -> torch.Tensor:
    """SigLIP's loss (Zhai et al., 2023) with the positive pairs given: `-1/B sum_ij log
    sigmoid(z_ij (t x_i . y_j + b))`, z = +1 where `positives` `(B, B)` is True, else -1;
    `logit_scale` is log t."""
    with torch.autocast(image_embeds.device.type, enabled=False):
        logits = logit_scale.exp().float() * (image_embeds.float() @ text_embeds.float().t()) + logit_bias.float()
    signs = positives.float() * 2 - 1
    return -nn.functional.logsigmoid(signs * logits).sum() / logits.shape[0]


def sigmoid_loss(
    image_embeds: torch.Tensor, text_embeds: torch.Tensor, logit_scale: torch.Tensor, logit_bias: torch.Tensor
) -> torch.Tensor:
    """SigLIP's loss: row i of each input is a matching pair, every other pair a negative."""
    eye = torch.eye(image_embeds.shape[0], dtype=torch.bool, device=image_embeds.device)
    return pairwise_sigmoid_loss(image_embeds, text_embeds, eye, logit_scale, logit_bias)


def change_aware_sigmoid_loss(
    inverted_image_embeds: torch.Tensor,
    text_embeds: torch.Tensor,
    changed: torch.Tensor,
    logit_scale: torch.Tensor,
    logit_bias: torch.Tensor,
) -> torch.Tensor:
    """TILA's change-aware sigmoid loss (Eq. 1) on the inverted pairs (prior and current swapped):
    a pair still matches its own report only when that report describes no change (`changed[i]`
    False); a changed pair read backwards, and every other pair, is a negative."""
    eye = torch.eye(inverted_image_embeds.shape[0], dtype=torch.bool, device=inverted_image_embeds.device)
    positives = eye & ~changed.bool().to(eye.device)[:, None]
    return pairwise_sigmoid_loss(inverted_image_embeds, text_embeds, positives, logit_scale, logit_bias)


def trend_classification_loss(
    image_logits: torch.Tensor, text_logits: torch.Tensor, labels: torch.Tensor
) -> torch.Tensor:
    """TAMM's trend loss (Eqs. 4-6): cross-entropy of the trend predicted from the image-embedding
    difference and from the report-embedding difference of adjacent studies, averaged."""
    return (
        nn.functional.cross_entropy(image_logits.float(), labels)
        + nn.functional.cross_entropy(text_logits.float(), labels)
    ) / 2


def rationale_consistency_loss(
    predicted_next: torch.Tensor,
    next_tokens: torch.Tensor,
    predicted_previous: torch.Tensor,
    previous_tokens: torch.Tensor,
) -> torch.Tensor:
    """TAMM's bidirectional consistency (Eq. 9): squared error of the tokens predicted forwards
    (from the earlier study and the rationale) and backwards (from the later study and the counter
    rationale), per element, summed over the two directions."""
    forward = (predicted_next.float() - next_tokens.float()).pow(2).mean()
    backward = (predicted_previous.float() - previous_tokens.float()).pow(2).mean()
    return forward + backward


__all__ = [
    "bidirectional_cross_entropy",
    "change_aware_sigmoid_loss",
    "contrastive_ranking_loss",
    "dynamic_soft_labels",
    "inversion_aware_probabilities",
    "invert_progression",
    "pairwise_sigmoid_loss",
    "rationale_consistency_loss",
    "sigmoid_loss",
    "temporal_consistency_loss",
    "trend_classification_loss",
    "smooth_ap_loss",
    "soft_target_infonce_loss",
    "symmetric_infonce_loss",
    "triplet_loss_with_hard_negatives",
    "triplet_relevance",
]
