"""A ceiling before training stage 2: what a linear read-out of the frozen stage-1 features knows.

The comparative VLM reads frozen stage-1 vision features. When it falls short on a finding, the
shortfall is stage 1's if the features do not show the finding, stage 2's if they do. Per entity,
`linear_probe` fits an L2-regularised logistic regression on the entity-conditioned stage-1 features
of the training studies (label: the mined status, positive 1 or negative 0) and scores the test
studies (AUC, accuracy, balanced accuracy, against the majority class). `presence_ceiling` turns the
probe's test probabilities into the accuracy they imply on the closed presence questions ("Which
case shows ...?"): the Bayes choice of text prior (the text-only answerer fitted on the training
questions) times the probe's probabilities of the two studies' statuses each option implies. That is
what a stage 2 reading the frozen features as well as a linear probe could reach on presence."""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import torch
from tqdm.auto import tqdm

from ..data.mining import MinedData
from ..data.mining.vqa import LETTERS, TextOnlyAnswerer
from ..data.reports.ontology import Ontology
from ..inference.encoder import RetrievalEncoder
from .metrics import balanced_accuracy, wilson_interval
from .swap import swap_consistency
from .vqa import accuracy_summary, baseline_comparisons

logger = logging.getLogger(__name__)
LABELS = {"positive": 1, "negative": 0}  # the statuses a presence question is asked about


@dataclass
class ProbeFeatures:
    """Entity-conditioned features `(S, d)` of the labelled studies of a split, labels `(S,)` (1 positive)."""

    features: torch.Tensor
    labels: torch.Tensor
    study_ids: list[str]


def conditioned_features(
    encoder: RetrievalEncoder,
    data: MinedData,
    wanted: Mapping[str, Sequence[str]],
    prompts: Mapping[str, str],
    batch_size: int = 16,
    chunk_size: int = 512,
    progress: bool = False,
    tensors: Mapping[str, torch.Tensor] | None = None,
) -> dict[str, dict[str, torch.Tensor]]:
    """entity -> study -> the study's feature `(d,)` conditioned on `prompts[entity]`, for the studies
    `wanted[entity]`. As in `evaluate_retrieval`, each image is encoded once (`encode_images`) and
    its visual tokens conditioned on every entity that wants it (`condition`); studies go through in
    chunks of `chunk_size`, so only one chunk's tokens are held, never a whole training split's."""
    needing: dict[str, list[str]] = defaultdict(list)  # study -> the entities that want it
    for entity, study_ids in wanted.items():
        for study in study_ids:
            needing[study].append(entity)
    ids = sorted(needing)
    found: dict[str, dict[str, torch.Tensor]] = {entity: {} for entity in wanted}
    bar = tqdm(total=len(ids), desc="probe features", unit="study", disable=not progress, leave=False)
    for start in range(0, len(ids), chunk_size):
        chunk = ids[start : start + chunk_size]
        encoded = encoder.encode_images(
            [data.studies[s].image for s in chunk],
            [data.studies[s].modality for s in chunk],
            chunk,
            batch_size=batch_size,
            tensors=tensors,
        )
        for block in encoded:
            for entity in sorted({e for s in block.study_ids for e in needing[s]}):
                rows = [i for i, s in enumerate(block.study_ids) if entity in needing[s]]
                index = torch.tensor(rows)
                features, _ = encoder.condition(block.tokens[index], block.modality_ids[index], prompts[entity])
                found[entity].update({block.study_ids[i]: feature for i, feature in zip(rows, features, strict=True)})
        bar.update(len(chunk))
    bar.close()
    return found


def entity_labels(data: MinedData, split: str, entity_id: str) -> dict[str, int]:
    """Study id -> 1 (positive) / 0 (negative) for the split's studies whose report says either."""
    labels = {}
    for study_id in data.study_ids(split):
        status = data.studies[study_id].status(entity_id)
        if status in LABELS:
            labels[study_id] = LABELS[status]
    return labels


def _labelled(features: Mapping[str, torch.Tensor], labels: Mapping[str, int]) -> ProbeFeatures:
    """The labelled studies' features stacked in sorted study order."""
    ids = sorted(labels)
    stacked = torch.stack([features[s] for s in ids]) if ids else torch.empty(0, 0)
    return ProbeFeatures(stacked, torch.tensor([labels[s] for s in ids], dtype=torch.float32), ids)


def probe_features(
    encoder: RetrievalEncoder,
    data: MinedData,
    split: str,
    entity_id: str,
    batch_size: int = 16,
    progress: bool = False,
    tensors: Mapping[str, torch.Tensor] | None = None,
    prompt: str | None = None,
) -> ProbeFeatures:
    """The entity-conditioned stage-1 feature of every study of `split` whose statement about
    `entity_id` is positive (label 1) or negative (0), in sorted study order, computed without
    gradients. `prompt`: the text the model reads for the entity (default: the vocabulary's)."""
    labels = entity_labels(data, split, entity_id)
    if prompt is None:
        prompt = _entity_info(Ontology.load(), entity_id)[1]
    found = conditioned_features(
        encoder, data, {entity_id: sorted(labels)}, {entity_id: prompt}, batch_size, progress=progress, tensors=tensors
    )
    return _labelled(found[entity_id], labels)


@dataclass
class LogisticProbe:
    """A fitted logistic regression on standardised features: p = sigmoid(((x - mean) / scale) @ w + b)."""

    mean: torch.Tensor
    scale: torch.Tensor
    weight: torch.Tensor
    bias: torch.Tensor

    def probabilities(self, features: torch.Tensor) -> torch.Tensor:
        z = (features.double() - self.mean) / self.scale
        return torch.sigmoid(z @ self.weight + self.bias).float()


def fit_logistic(features: torch.Tensor, labels: torch.Tensor, l2: float = 1e-2, max_iter: int = 200) -> LogisticProbe:
    """L2-regularised logistic regression (mean log loss + l2 / 2 * |w|^2) on standardised
    features, fitted by full-batch LBFGS in float64 from zero: deterministic, no random draws."""
    x = features.detach().double()
    y = labels.detach().double()
    mean = x.mean(0)
    scale = x.std(0, unbiased=False).clamp_min(1e-8)
    z = (x - mean) / scale
    weight = torch.zeros(x.shape[1], dtype=torch.float64, requires_grad=True)
    bias = torch.zeros((), dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS(
        [weight, bias],
        lr=1.0,
        max_iter=max_iter,
        tolerance_grad=1e-9,
        tolerance_change=1e-12,
        history_size=20,
        line_search_fn="strong_wolfe",
    )

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(z @ weight + bias, y)
        loss = loss + 0.5 * l2 * weight.square().sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        optimizer.step(closure)
    return LogisticProbe(mean, scale, weight.detach(), bias.detach())


def rank_auc(scores: Sequence[float], labels: Sequence[int]) -> float:
    """ROC AUC as the Mann-Whitney statistic: the share of (positive, negative) pairs the scores
    order correctly, ties counting one half (average ranks)."""
    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels).astype(bool)
    positives, negatives = int(y.sum()), int((~y).sum())
    if not positives or not negatives:
        raise ValueError("AUC needs at least one positive and one negative")
    _, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    ranks = (np.cumsum(counts) - (counts - 1) / 2)[inverse]  # 1-based average rank of each score
    return float((ranks[y].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def _entity_info(ontology: Ontology, entity_id: str) -> tuple[str, str]:
    """(family, prompt) of an entity; an id the vocabulary lacks reads as itself, family its prefix."""
    try:
        entity = ontology[entity_id]
    except KeyError:
        return entity_id.split("/")[0], entity_id
    return entity.family, entity.prompt


def _eligible(counts: dict[str, list[int]], min_train: int, min_class: int) -> str | None:
    """Why an entity cannot be probed (None when it can): `counts` holds train and test labels."""
    train, test = counts["train"], counts["test"]
    if len(train) < min_train:
        return f"{len(train)} labelled training studies (< {min_train})"
    for name, labels in (("training", train), ("test", test)):
        positives = sum(labels)
        if min(positives, len(labels) - positives) < min_class:
            return f"{positives} positive / {len(labels) - positives} negative {name} studies (< {min_class} of each)"
    return None


def _score(probe: LogisticProbe, train: ProbeFeatures, test: ProbeFeatures) -> dict:
    """Test scores of a fitted probe, with the majority class of the training split for reference."""
    probabilities = probe.probabilities(test.features)
    truth = test.labels.long().tolist()
    predicted = (probabilities >= 0.5).long().tolist()
    train_rate = float(train.labels.mean())
    majority = int(train_rate >= 0.5)
    return {
        "n_train": len(train.study_ids),
        "train_positives": int(train.labels.sum()),
        "train_negatives": len(train.study_ids) - int(train.labels.sum()),
        "n_test": len(test.study_ids),
        "positives": sum(truth),
        "negatives": len(truth) - sum(truth),
        "auc": rank_auc(probabilities.tolist(), truth),
        "accuracy": float(np.mean([p == t for p, t in zip(predicted, truth, strict=True)])),
        "balanced_accuracy": balanced_accuracy(truth, predicted),
        "majority_accuracy": float(np.mean([t == majority for t in truth])),
        "probabilities": dict(zip(test.study_ids, probabilities.tolist(), strict=True)),
    }


def linear_probe(
    encoder: RetrievalEncoder,
    data: MinedData,
    entities: Sequence[str] | None = None,
    min_train: int = 20,
    progress: bool = False,
    split: str = "test",
    train_split: str = "train",
    min_class: int = 3,
    l2: float = 1e-2,
    batch_size: int = 16,
    tensors: Mapping[str, torch.Tensor] | None = None,
) -> dict:
    """Per entity, a logistic-regression probe of the frozen entity-conditioned stage-1 features for
    the mined status, fitted on `train_split` and scored on `split` (see the module doc). An entity
    is probed when it has at least `min_train` labelled training studies and at least `min_class`
    positives and negatives in both splits; the others are listed under `skipped` with the reason.
    `entities`: default every entity some study's report states something about."""
    if split == train_split:
        raise ValueError(f"the probe is fitted on split {train_split!r}: score it on another split")
    if entities is None:
        entities = sorted({e for study in data.studies.values() for e in study.statements})
    splits = {"train": train_split, "test": split}
    labels = {e: {name: entity_labels(data, s, e) for name, s in splits.items()} for e in entities}
    skipped = {}
    for entity in entities:
        reason = _eligible({k: list(v.values()) for k, v in labels[entity].items()}, min_train, min_class)
        if reason is not None:
            skipped[entity] = reason
    probed = [e for e in entities if e not in skipped]
    if not probed:
        raise ValueError(
            f"{data.directory}: no entity has enough labelled studies to probe (at least {min_train} in "
            f"{train_split!r} and {min_class} positive and negative in {train_split!r} and {split!r})"
        )
    ontology = Ontology.load()
    info = {entity: _entity_info(ontology, entity) for entity in probed}  # (family, prompt)
    wanted = {e: sorted({s for split_labels in labels[e].values() for s in split_labels}) for e in probed}
    prompts = {entity: prompt for entity, (_, prompt) in info.items()}
    found = conditioned_features(encoder, data, wanted, prompts, batch_size, progress=progress, tensors=tensors)
    results = {}
    for entity in probed:
        train, test = (_labelled(found[entity], labels[entity][name]) for name in ("train", "test"))
        results[entity] = {
            "family": info[entity][0],
            **_score(fit_logistic(train.features, train.labels, l2), train, test),
        }
        logger.info("probe %s: AUC %.3f on %d test studies", entity, results[entity]["auc"], test.labels.numel())
    return {
        "split": split,
        "train_split": train_split,
        "settings": {"min_train": min_train, "min_class": min_class, "l2": l2},
        "entities": results,
        "skipped": skipped,
        "summary": {
            "entities": len(results),
            "mean_auc": float(np.mean([r["auc"] for r in results.values()])),
            "mean_balanced_accuracy": float(np.mean([r["balanced_accuracy"] for r in results.values()])),
        },
    }


def probe_table(result: dict) -> list[dict]:
    """One row per probed entity, sorted by family and entity: entity, family, n_train, n_test, AUC,
    balanced accuracy."""
    rows = [
        {
            "entity": entity,
            "family": entry["family"],
            "n_train": entry["n_train"],
            "n_test": entry["n_test"],
            "auc": entry["auc"],
            "balanced_accuracy": entry["balanced_accuracy"],
        }
        for entity, entry in result["entities"].items()
    ]
    return sorted(rows, key=lambda row: (row["family"], row["entity"]))


def option_statuses(option: str, labels: Sequence[str]) -> tuple[int, int] | None:
    """The (Case A, Case B) labels (1 positive) a presence option implies; None for another wording."""
    la, lb = labels
    return {
        "both cases": (1, 1),
        "neither case": (0, 0),
        f"{la} only".lower(): (1, 0),
        f"{lb} only".lower(): (0, 1),
    }.get(option.strip().lower())


def _choices(row: dict, prior: list[float], p_a: float, p_b: float) -> tuple[int, int] | None:
    """(Bayes choice, probe-only choice) of option indices, or None when an option is no presence option."""
    implied = [option_statuses(option, row.get("labels") or ("Case A", "Case B")) for option in row["options"]]
    if None in implied:
        return None
    tiny = 1e-12
    likelihood = [
        math.log(max(p_a if a else 1 - p_a, tiny)) + math.log(max(p_b if b else 1 - p_b, tiny)) for a, b in implied
    ]
    posterior = [s + lik for s, lik in zip(prior, likelihood, strict=True)]
    return int(np.argmax(posterior)), int(np.argmax(likelihood))


def _log_prior(scores: list[float]) -> list[float]:
    """The text prior over the options, normalised (log softmax of the text-only scores)."""
    top = max(scores)
    total = top + math.log(sum(math.exp(s - top) for s in scores))
    return [s - total for s in scores]


def presence_ceiling(probe_result: dict, rows: Sequence[dict], train_rows: Sequence[dict], studies: Mapping) -> dict:
    """The accuracy on the closed presence questions (`rows` with dimension "presence") that the
    probe implies: per row whose entity was probed and whose two studies have test probabilities,
    the option maximising prior(option) x p_A(status_A) x p_B(status_B), the prior being the
    text-only answerer fitted on `train_rows` (mined training questions, before the language-prior
    filter). Returns the ceiling's accuracy (95% Wilson interval), the text-only answerer's and the
    probe alone's (uniform prior) on the same rows with McNemar and, when `studies` know their
    patients, patient-clustered comparisons against the ceiling, accuracies per entity, and counts of
    the presence rows left out. The probabilities are the probe's posteriors used as likelihoods, so
    the training base rate counts in both factors (as in the spec of this ceiling)."""
    answerer = TextOnlyAnswerer().fit(SimpleNamespace(**row) for row in train_rows)  # one pass, rows unkept
    entities = probe_result["entities"]
    covered, ceiling, text, probe_only, chosen = [], [], [], [], []
    left_out = {"no probe": 0, "no probability": 0, "other options": 0}
    for row in rows:
        if row.get("dimension") != "presence":
            continue
        entry = entities.get(row.get("entity_id"))
        if entry is None:
            left_out["no probe"] += 1
            continue
        p_a, p_b = (entry["probabilities"].get(row[key]) for key in ("study_a", "study_b"))
        if p_a is None or p_b is None:
            left_out["no probability"] += 1
            continue
        scores = answerer.option_scores(row["question"], row["options"])
        prior = _log_prior(scores)
        choices = _choices(row, prior, p_a, p_b)
        if choices is None:
            left_out["other options"] += 1
            continue
        covered.append(row)
        chosen.append((LETTERS[choices[0]], LETTERS[_choices(row, prior, p_b, p_a)[0]]))  # then the images swapped
        ceiling.append(LETTERS[choices[0]] == row["answer"])
        probe_only.append(LETTERS[choices[1]] == row["answer"])
        text.append(LETTERS[int(np.argmax(scores))] == row["answer"])
    summary = _ceiling_summary(covered, ceiling, text, probe_only, left_out, studies)
    if covered:  # the same choice with the two images' probabilities exchanged: what order-awareness the probe allows
        swap = swap_consistency(covered, [c[0] for c in chosen], [c[1] for c in chosen], studies)
        summary["swap_consistency"] = {k: swap[k] for k in ("questions", "order_dependent", "both_orders_correct")}
    return summary


def _ceiling_summary(
    rows: list[dict],
    ceiling: list[bool],
    text: list[bool],
    probe_only: list[bool],
    left_out: dict[str, int],
    studies: Mapping,
) -> dict:
    """The ceiling's accuracy and its comparisons (see `presence_ceiling`)."""
    by_entity: dict[str, dict[str, list[bool]]] = defaultdict(lambda: {"ceiling": [], "text_only": []})
    for row, hit, text_hit in zip(rows, ceiling, text, strict=True):
        by_entity[row["entity_id"]]["ceiling"].append(hit)
        by_entity[row["entity_id"]]["text_only"].append(text_hit)
    comparisons = (
        baseline_comparisons(ceiling, rows, {"text_only": text, "probe_only": probe_only}, studies) if rows else {}
    )
    return {
        "questions": len(rows),
        "accuracy": sum(ceiling) / len(ceiling) if ceiling else None,
        "ci95": list(wilson_interval(sum(ceiling), len(ceiling))),
        "text_only": comparisons.get("text_only", accuracy_summary(text)),
        "probe_only": comparisons.get("probe_only", accuracy_summary(probe_only)),
        "by_entity": {
            entity: {
                "questions": len(hits["ceiling"]),
                "ceiling": sum(hits["ceiling"]) / len(hits["ceiling"]),
                "text_only": sum(hits["text_only"]) / len(hits["text_only"]),
            }
            for entity, hits in sorted(by_entity.items())
        },
        "left_out": left_out,
    }


__all__ = [
    "LogisticProbe",
    "ProbeFeatures",
    "conditioned_features",
    "entity_labels",
    "fit_logistic",
    "linear_probe",
    "option_statuses",
    "presence_ceiling",
    "probe_features",
    "probe_table",
    "rank_auc",
]
