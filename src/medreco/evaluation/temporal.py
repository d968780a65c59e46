"""TILA's four protocols for interval-change predictions, scored by class-balanced macro-accuracy
(BioViL-T's and MS-CXR-T's metric), with intervals clustered by patient.

- **standard**: the forward reading (prior -> current) against the label;
- **reversed**: the pair read backwards against the inverse label (improving <-> worsening);
- **combined**: inversion-aware scoring, the forward probabilities averaged with the inverted
  reversed ones (TILA, Eq. 7);
- **consistency**: a pair counts only when both readings are right. "Stable" is its own inverse,
  so a model that calls everything stable is consistent; crediting consistency only with the
  forward reading right is what keeps that from scoring.

A majority-class guess scores 1/3 on each (one class fully right, the others never)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from ..data.mining import ProgressionPair, progression_pairs
from ..data.reports.ontology import entity_prompts
from ..inference.progression import encode_studies
from ..modeling import PROGRESSION_CLASSES, inversion_aware_probabilities
from .metrics import balanced_accuracy
from .probe import conditioned_features, fit_logistic

PROTOCOLS = ("standard", "reversed", "combined", "consistency")


def _balanced(labels: np.ndarray, hits: np.ndarray, index: np.ndarray | None = None) -> float:
    """Mean over the true classes present of the share of hits (for row `index`es when given)."""
    if index is not None:
        labels, hits = labels[index], hits[index]
    recalls = [hits[labels == c].mean() for c in np.unique(labels)]
    return float(np.mean(recalls)) if recalls else float("nan")


def clustered_balanced_accuracy(
    labels: Sequence[int],
    hits: Sequence[bool],
    clusters: Sequence[str],
    compared_hits: Sequence[bool] | None = None,
    resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict:
    """Class-balanced accuracy of `hits` (one per row with its true class in `labels`), with a
    cluster bootstrap interval: whole patients are resampled and the balanced accuracy computed
    anew (class counts move with them). With `compared_hits` (another system on the same rows) it
    is the difference, with the two-sided bootstrap p-value of "no difference"."""
    labels, hits = np.asarray(labels), np.asarray(hits, dtype=float)
    if len(labels) != len(hits) or len(labels) != len(clusters):
        raise ValueError(f"{len(labels)} labels, {len(hits)} hits and {len(clusters)} cluster labels")
    if not len(labels):
        raise ValueError("no pairs to score")
    other = None if compared_hits is None else np.asarray(compared_hits, dtype=float)

    def statistic(index: np.ndarray | None) -> float:
        value = _balanced(labels, hits, index)
        return value if other is None else value - _balanced(labels, other, index)

    groups: dict[str, list[int]] = {}
    for row, cluster in enumerate(clusters):
        groups.setdefault(str(cluster), []).append(row)
    members = [np.array(rows) for rows in groups.values()]
    rng = np.random.default_rng(seed)
    draws = np.array(
        [
            statistic(np.concatenate([members[i] for i in rng.integers(0, len(members), len(members))]))
            for _ in range(resamples)
        ]
    )
    alpha = (1 - confidence) / 2
    low, high = np.nanquantile(draws, [alpha, 1 - alpha])
    result = {"value": statistic(None), "interval": [float(low), float(high)], "pairs": len(labels)}
    result["patients"] = len(members)
    if other is not None:
        tail = min(np.mean(draws <= 0), np.mean(draws >= 0))
        result["p_value"] = float(min(1.0, 2 * tail))
    return result


def protocol_hits(labels: torch.Tensor, forward_logits: torch.Tensor, reversed_logits: torch.Tensor) -> dict:
    """Per protocol, whether each pair is right: labels `(P,)` indices into `PROGRESSION_CLASSES`,
    the logits `(P, 3)` of each pair read forwards and backwards."""
    forward = forward_logits.argmax(-1)
    backward = reversed_logits.argmax(-1)
    combined = inversion_aware_probabilities(forward_logits, reversed_logits).argmax(-1)
    standard, reversed_right = forward == labels, backward == (2 - labels)
    return {
        "standard": standard,
        "reversed": reversed_right,
        "combined": combined == labels,
        "consistency": standard & reversed_right,
    }


def progression_protocols(
    labels: torch.Tensor,
    forward_logits: torch.Tensor,
    reversed_logits: torch.Tensor,
    clusters: Sequence[str],
    groups: Sequence[str] | None = None,
    baseline: dict | None = None,
) -> dict:
    """The four protocols' class-balanced accuracies with patient-clustered intervals, over all
    pairs and (with `groups`, e.g. each pair's finding or family) per group; with `baseline` (the
    `protocol_hits` of another model on the same pairs) each protocol's difference from it."""
    hits = protocol_hits(labels, forward_logits, reversed_logits)
    truth = labels.tolist()
    result: dict = {"classes": list(PROGRESSION_CLASSES), "pairs": len(truth), "patients": len(set(clusters))}
    result["class_counts"] = {c: truth.count(i) for i, c in enumerate(PROGRESSION_CLASSES)}
    for name in PROTOCOLS:
        result[name] = clustered_balanced_accuracy(truth, hits[name].tolist(), clusters)
        if baseline is not None:
            result[name]["minus_baseline"] = clustered_balanced_accuracy(
                truth, hits[name].tolist(), clusters, compared_hits=baseline[name].tolist()
            )
    if groups is not None:
        by_group: dict[str, dict] = {}
        for group in sorted(set(groups)):
            rows = [i for i, g in enumerate(groups) if g == group]
            by_group[group] = {"pairs": len(rows)}
            for name in PROTOCOLS:
                by_group[group][name] = balanced_accuracy(
                    [truth[i] for i in rows], [truth[i] if hits[name][i] else -1 for i in rows]
                )
        result["by_group"] = by_group
    return result


def _majority_logits(labels: torch.Tensor, train_labels: Sequence[int]) -> torch.Tensor:
    majority = max(range(len(PROGRESSION_CLASSES)), key=list(train_labels).count)
    return torch.nn.functional.one_hot(torch.full_like(labels, majority), len(PROGRESSION_CLASSES)).float()


def score_progression(
    predictor,
    pairs: Sequence[ProgressionPair],
    studies: Mapping,
    train_labels: Sequence[int],
    groups: Sequence[str],
    baseline=None,
    progress: bool = False,
) -> dict:
    """TILA's four protocols for a progression model (an `inference.ProgressionPredictor`) on
    `pairs` (their images in `studies`: objects with `image` and `modality`), beside the majority
    class of `train_labels` and, when given, a `baseline` predictor (e.g. the same model trained
    without the prior, or without TILA's losses), each with its patient-clustered difference; per
    group (`by_group`: each pair's family, or finding), and on the pairs whose change the images
    show (`image_answerable`, where that is known)."""
    if not pairs:
        raise ValueError("no pairs with a directional change to score")
    labels = torch.tensor([PROGRESSION_CLASSES.index(p.progression) for p in pairs])
    clusters = [p.patient_id for p in pairs]
    needed = {s: studies[s] for p in pairs for s in (p.prior, p.current)}

    def readings(model) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = encode_studies(model.encoder, needed, progress=progress)
        entities = model.entity_embeddings([p.entity_id for p in pairs], entity_prompts())
        return model.logits(pairs, tokens, entities)

    systems = {"model": readings(predictor)}
    if baseline is not None:
        systems["baseline"] = readings(baseline)
    majority = _majority_logits(labels, train_labels)
    systems["majority"] = (majority, majority)

    def scored(rows: list[int]) -> dict:
        index = torch.tensor(rows, dtype=torch.long)
        subset_labels = labels[index]
        subset_clusters = [clusters[i] for i in rows]
        hits = {name: protocol_hits(subset_labels, f[index], r[index]) for name, (f, r) in systems.items()}
        report = {}
        for name, (f, r) in systems.items():
            compared = None if name == "majority" else hits["majority"]
            report[name] = progression_protocols(
                subset_labels, f[index], r[index], subset_clusters, [groups[i] for i in rows], compared
            )
        if baseline is not None:
            report["model_minus_baseline"] = {
                protocol: clustered_balanced_accuracy(
                    subset_labels.tolist(),
                    hits["model"][protocol].tolist(),
                    subset_clusters,
                    compared_hits=hits["baseline"][protocol].tolist(),
                )
                for protocol in PROTOCOLS
            }
        return report

    result = {"all": scored(list(range(len(pairs))))}
    answerable = [i for i, p in enumerate(pairs) if p.image_answerable]
    if answerable and any(p.image_answerable is not None for p in pairs):
        result["image_answerable"] = scored(answerable)
    return result


def evaluate_progression(
    predictor,
    data,
    split: str = "test",
    baseline=None,
    levels: Sequence[str] = ("abnormal", "disease"),
    progress: bool = False,
) -> dict:
    """`score_progression` on a mined folder's (`MinedData`) longitudinal pairs of `split`, by family."""
    pairs = progression_pairs(data.rows("longitudinal", split), levels)
    if not pairs:
        raise ValueError(f"{data.directory}: no {split} longitudinal pairs with a directional change to score")
    train = progression_pairs(data.rows("longitudinal", "train"), levels)
    train_labels = [PROGRESSION_CLASSES.index(p.progression) for p in train]
    families = [data.studies[p.current].modality for p in pairs]
    result = score_progression(predictor, pairs, data.studies, train_labels, families, baseline, progress)
    return {"split": split, **result}


def change_probe(
    encoder,
    data,
    split: str = "test",
    levels: Sequence[str] = ("abnormal", "disease"),
    progress: bool = False,
) -> dict:
    """What a linear read-out of the frozen stage-1 features knows of change, before a progression
    head is trained: per progression class a one-vs-rest L2 logistic regression on each pair's
    entity-conditioned features `[current - prior, current]`, fitted on the training split's pairs
    and scored on `split` with the four protocols (the reversed reading swaps the two studies);
    beside it the same probe on the current study alone (`current_only`: what needs no prior).
    `encoder` is an `inference.RetrievalEncoder` (a progression model's, or any stage-1 model's)."""
    train = progression_pairs(data.rows("longitudinal", "train"), levels)
    scored = progression_pairs(data.rows("longitudinal", split), levels)
    if not train or not scored:
        raise ValueError(f"{data.directory}: the change probe needs train and {split} pairs with a directional change")
    wanted: dict[str, set[str]] = defaultdict(set)
    for pair in (*train, *scored):
        wanted[pair.entity_id].update((pair.prior, pair.current))
    prompts = entity_prompts()
    features = conditioned_features(
        encoder,
        data,
        {entity: sorted(studies) for entity, studies in wanted.items()},
        {entity: prompts.get(entity, entity) for entity in wanted},
        progress=progress,
    )

    def design(pairs: Sequence[ProgressionPair], reverse: bool, current_only: bool) -> torch.Tensor:
        rows = []
        for pair in pairs:
            current, prior = features[pair.entity_id][pair.current], features[pair.entity_id][pair.prior]
            if reverse:
                current, prior = prior, current
            rows.append(current if current_only else torch.cat([current - prior, current]))
        return torch.stack(rows)

    train_labels = torch.tensor([PROGRESSION_CLASSES.index(p.progression) for p in train])
    labels = torch.tensor([PROGRESSION_CLASSES.index(p.progression) for p in scored])
    clusters, families = [p.patient_id for p in scored], [data.studies[p.current].modality for p in scored]
    result: dict = {"split": split, "train_pairs": len(train)}
    for name, current_only in (("pair", False), ("current_only", True)):
        fitted = design(train, False, current_only)
        probes = [fit_logistic(fitted, (train_labels == c).float()) for c in range(len(PROGRESSION_CLASSES))]

        def logits(x: torch.Tensor, probes=probes) -> torch.Tensor:
            return torch.stack([probe.probabilities(x) for probe in probes], dim=-1).clamp_min(1e-6).log()

        forward, backward = logits(design(scored, False, current_only)), logits(design(scored, True, current_only))
        result[name] = progression_protocols(labels, forward, backward, clusters, families)
    return result


__all__ = [
    "PROTOCOLS",
    "change_probe",
    "evaluate_progression",
    "score_progression",
    "clustered_balanced_accuracy",
    "progression_protocols",
    "protocol_hits",
]
