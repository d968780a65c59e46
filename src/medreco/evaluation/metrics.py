"""Metric functions: ranking (Recall@k, NDCG), classification (balanced accuracy), statistics
(Wilson intervals, McNemar, patient-clustered bootstrap intervals and a clustered paired test), text.

Each is small and checked against hand-computed cases in `tests/evaluation/test_metrics.py`."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence

import numpy as np


def recall_at_k(ranked: Sequence[str], relevant: set[str] | Sequence[str], k: int) -> float:
    """1.0 when any relevant item is among the first `k` ranked items (the paper's Recall@k)."""
    relevant = set(relevant)
    if not relevant:
        raise ValueError("Recall@k needs at least one relevant item")
    return float(any(item in relevant for item in ranked[:k]))


def ndcg_at_k(ranked: Sequence[str], relevant: set[str] | Sequence[str], k: int) -> float:
    """Binary-relevance NDCG@k: DCG of the ranking over the DCG of an ideal one."""
    relevant = set(relevant)
    if not relevant:
        raise ValueError("NDCG needs at least one relevant item")
    dcg = sum(1.0 / math.log2(rank + 2) for rank, item in enumerate(ranked[:k]) if item in relevant)
    ideal = sum(1.0 / math.log2(rank + 2) for rank in range(min(k, len(relevant))))
    return dcg / ideal


def wilson_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a proportion (well-behaved near 0 and 1 and for small n)."""
    if trials == 0:
        return (0.0, 1.0)
    z = _normal_quantile(0.5 + confidence / 2)
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    # the interval contains the estimate exactly (rounding put the bound of 30/30 at 0.9999999999999999)
    return (max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half)))


def mcnemar_test(correct_a: Sequence[bool], correct_b: Sequence[bool]) -> dict:
    """McNemar's test on paired outcomes: exact binomial p-value (two-sided) on the discordant pairs.
    Returns b (A right, B wrong), c (A wrong, B right) and p_value."""
    if len(correct_a) != len(correct_b):
        raise ValueError("McNemar needs paired outcomes of equal length")
    b = sum(1 for x, y in zip(correct_a, correct_b) if x and not y)
    c = sum(1 for x, y in zip(correct_a, correct_b) if y and not x)
    n = b + c
    if n == 0:
        return {"b": 0, "c": 0, "p_value": 1.0}
    tail = sum(math.comb(n, i) for i in range(0, min(b, c) + 1)) / 2**n
    return {"b": b, "c": c, "p_value": min(1.0, 2 * tail)}


def balanced_accuracy(true_labels: Sequence[str], predicted_labels: Sequence[str]) -> float:
    """The mean over true classes of the share predicted right (per-class recall): the
    "macro-accuracy" BioViL-T and TILA report, which a majority-class guess cannot inflate."""
    if len(true_labels) != len(predicted_labels):
        raise ValueError("balanced accuracy needs one prediction per label")
    if not true_labels:
        raise ValueError("balanced accuracy needs at least one label")
    by_class: dict[str, list[bool]] = {}
    for truth, predicted in zip(true_labels, predicted_labels):
        by_class.setdefault(truth, []).append(truth == predicted)
    return sum(sum(hits) / len(hits) for hits in by_class.values()) / len(by_class)


def _cluster_totals(values: Sequence[float], clusters: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Per cluster: the sum of the values and their count (clusters in first-seen order)."""
    if len(values) != len(clusters):
        raise ValueError(f"{len(values)} values for {len(clusters)} cluster labels")
    if not values:
        raise ValueError("no values to summarise")
    index: dict[str, int] = {}
    codes = np.array([index.setdefault(str(c), len(index)) for c in clusters])
    totals = np.bincount(codes, weights=np.asarray(values, dtype=float), minlength=len(index))
    return totals, np.bincount(codes, minlength=len(index)).astype(float)


def clustered_mean(
    values: Sequence[float], clusters: Sequence[str], confidence: float = 0.95, resamples: int = 10000, seed: int = 0
) -> dict:
    """The mean of `values` with a cluster bootstrap interval: whole clusters (patients) are
    resampled with replacement, so values from one patient move together and the interval is as
    wide as the number of patients warrants, not the number of rows."""
    totals, counts = _cluster_totals(values, clusters)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(totals), size=(resamples, len(totals)))
    means = totals[draws].sum(axis=1) / counts[draws].sum(axis=1)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    return {"mean": float(totals.sum() / counts.sum()), "interval": (float(low), float(high)), "clusters": len(totals)}


def clustered_paired_test(
    scores_a: Sequence[float],
    scores_b: Sequence[float],
    clusters: Sequence[str],
    confidence: float = 0.95,
    resamples: int = 10000,
    seed: int = 0,
) -> dict:
    """A minus B on paired scores (e.g. hits of two methods on the same queries), with clustering:
    the difference's cluster-bootstrap interval, and the two-sided p-value of a sign-flip
    permutation test on the per-cluster sums of differences (under "no difference" each
    patient's total is as likely positive as negative). Returns difference, interval, p_value,
    clusters and the test's name."""
    if len(scores_a) != len(scores_b):
        raise ValueError("a paired test needs the same number of scores on both sides")
    differences = [float(a) - float(b) for a, b in zip(scores_a, scores_b)]
    summary = clustered_mean(differences, clusters, confidence, resamples, seed)
    totals, _ = _cluster_totals(differences, clusters)
    rng = np.random.default_rng(seed + 1)
    signs = rng.choice([-1.0, 1.0], size=(resamples, len(totals)))
    observed = abs(totals.sum())
    extreme = int((np.abs((signs * totals).sum(axis=1)) >= observed - 1e-12).sum())
    return {
        "difference": summary["mean"],
        "interval": summary["interval"],
        "p_value": (extreme + 1) / (resamples + 1),
        "clusters": summary["clusters"],
        "test": "patient-clustered sign-flip permutation test; cluster-bootstrap 95% interval",
    }


def _normal_quantile(p: float) -> float:
    """Inverse standard normal CDF (Acklam's rational approximation, |error| < 1.2e-9)."""
    a = (
        -3.969683028665376e01,
        2.209460984245205e02,
        -2.759285104469687e02,
        1.383577518672690e02,
        -3.066479806614716e01,
        2.506628277459239e00,
    )
    b = (
        -5.447609879822406e01,
        1.615858368580409e02,
        -1.556989798598866e02,
        6.680131188771972e01,
        -1.328068155288572e01,
    )
    c = (
        -7.784894002430293e-03,
        -3.223964580411365e-01,
        -2.400758277161838e00,
        -2.549732539343734e00,
        4.374664141464968e00,
        2.938163982698783e00,
    )
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)
    if p < 0.02425:
        q = math.sqrt(-2 * math.log(p))
        return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / (
            (((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1
        )
    if p > 1 - 0.02425:
        return -_normal_quantile(1 - p)
    q = p - 0.5
    r = q * q
    return (
        (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5])
        * q
        / (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1)
    )


# ---- text metrics (open-ended answers)
def tokenize(text: str) -> list[str]:
    import re

    return re.findall(r"[a-z0-9]+", text.lower())


def bleu(predictions: Sequence[str], references: Sequence[str], max_order: int = 4, smooth: bool = True) -> float:
    """Corpus BLEU (Papineni et al.) with brevity penalty; add-one smoothing of higher orders
    (Lin & Och) so short answers do not score 0 for lacking a 4-gram."""
    matches, possible = [0] * max_order, [0] * max_order
    prediction_length = reference_length = 0
    for prediction, reference in zip(predictions, references, strict=True):
        p, r = tokenize(prediction), tokenize(reference)
        prediction_length, reference_length = prediction_length + len(p), reference_length + len(r)
        for n in range(1, max_order + 1):
            p_ngrams, r_ngrams = _ngrams(p, n), _ngrams(r, n)
            matches[n - 1] += sum((p_ngrams & r_ngrams).values())
            possible[n - 1] += max(0, len(p) - n + 1)
    if prediction_length == 0:
        return 0.0
    precisions = []
    for n in range(max_order):
        if smooth and n > 0:
            precisions.append((matches[n] + 1) / (possible[n] + 1))
        else:
            precisions.append(matches[n] / possible[n] if possible[n] else 0.0)
    if min(precisions) <= 0:
        return 0.0
    geometric = math.exp(sum(math.log(p) for p in precisions) / max_order)
    ratio = prediction_length / max(reference_length, 1)
    penalty = 1.0 if ratio > 1 else math.exp(1 - 1 / ratio)
    return geometric * penalty


def rouge_l(predictions: Sequence[str], references: Sequence[str], beta: float = 1.2) -> float:
    """Mean sentence-level ROUGE-L F-measure (longest common subsequence; beta as in the ROUGE paper)."""
    scores = []
    for prediction, reference in zip(predictions, references, strict=True):
        p, r = tokenize(prediction), tokenize(reference)
        lcs = _lcs(p, r)
        if lcs == 0:
            scores.append(0.0)
            continue
        precision, recall = lcs / len(p), lcs / len(r)
        scores.append((1 + beta**2) * precision * recall / (recall + beta**2 * precision))
    return float(np.mean(scores)) if scores else 0.0


def meteor(
    predictions: Sequence[str], references: Sequence[str], alpha: float = 0.9, beta: float = 3.0, gamma: float = 0.5
) -> float:
    """METEOR with exact unigram matching (no stemming or synonyms, which need WordNet data):
    harmonic mean weighted to recall, times a fragmentation penalty."""
    scores = []
    for prediction, reference in zip(predictions, references, strict=True):
        p, r = tokenize(prediction), tokenize(reference)
        alignment = _align_unigrams(p, r)
        matched = len(alignment)
        if matched == 0:
            scores.append(0.0)
            continue
        precision, recall = matched / len(p), matched / len(r)
        f_mean = precision * recall / (alpha * precision + (1 - alpha) * recall)
        chunks = 1 + sum(
            1 for (i0, j0), (i1, j1) in itertools.pairwise(alignment) if not (i1 == i0 + 1 and j1 == j0 + 1)
        )
        penalty = gamma * (chunks / matched) ** beta
        scores.append(f_mean * (1 - penalty))
    return float(np.mean(scores)) if scores else 0.0


def exact_match(predictions: Sequence[str], references: Sequence[str]) -> float:
    pairs = list(zip(predictions, references, strict=True))
    return float(np.mean([tokenize(p) == tokenize(r) for p, r in pairs])) if pairs else 0.0


def _ngrams(tokens: list[str], n: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def _lcs(a: list[str], b: list[str]) -> int:
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b):
            current.append(previous[j] + 1 if x == y else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


def _align_unigrams(p: list[str], r: list[str]) -> list[tuple[int, int]]:
    """Greedy in-order exact alignment: each prediction token to the first unused equal reference token."""
    used, alignment = set(), []
    for i, token in enumerate(p):
        for j, other in enumerate(r):
            if j not in used and other == token:
                used.add(j)
                alignment.append((i, j))
                break
    return sorted(alignment, key=lambda pair: pair[0])


__all__ = [
    "bleu",
    "exact_match",
    "mcnemar_test",
    "meteor",
    "ndcg_at_k",
    "recall_at_k",
    "rouge_l",
    "wilson_interval",
]
