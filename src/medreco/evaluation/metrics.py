"""Metric functions: ranking (Recall@k, NDCG), classification (balanced accuracy), statistics
(Wilson intervals, McNemar, patient-clustered bootstrap intervals and a clustered paired test), text.

The ranking, classification and statistics functions are small and checked against hand-computed
cases in `tests/evaluation/test_metrics.py` (and against SciPy where it is installed). The text
metrics are the field's standard implementations, called with settings that `docs/evaluation.md`
explains: sacreBLEU (corpus BLEU, with its signature), Google's rouge-score (ROUGE-L) and nltk's
METEOR without its WordNet synonym stage (`meteor_no_synonyms`: WordNet cannot be had offline)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

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


# ---- text metrics (open-ended answers): the standard implementations, so numbers compare with the field's
# sacreBLEU with its 13a tokeniser and exponential smoothing (its defaults), lower-cased (`-lc`): see `bleu`
BLEU_SETTINGS = {"tokenize": "13a", "lowercase": True, "smooth_method": "exp"}
ROUGE_USE_STEMMER = False  # as Hugging Face evaluate's "rouge" and pycocoevalcap's ROUGE-L: no stemming
TEXT_METRICS = ("bleu", "rouge_l", "meteor_no_synonyms")  # the names `text_scores` reports them under


def tokenize(text: str) -> list[str]:
    """Lower-cased alphanumeric runs (punctuation dropped): the words METEOR and `exact_match` see
    (rouge-score's own tokeniser splits the same way)."""
    import re

    return re.findall(r"[a-z0-9]+", text.lower())


def bleu(predictions: Sequence[str], references: Sequence[str]) -> dict:
    """Corpus BLEU-4 by sacreBLEU (Post, 2018), one reference per prediction, on a 0-1 scale (sacreBLEU's
    score / 100), with its signature: `{"bleu": 0.41, "bleu_signature":
    "nrefs:1|case:lc|eff:no|tok:13a|smooth:exp|version:2.6.0"}`.

    The settings (`BLEU_SETTINGS`) are sacreBLEU's defaults but for case: the 13a tokeniser (mteval-v13a,
    WMT's; punctuation split off, so "effusion." and "effusion ." agree), corpus-level n-gram statistics
    (a short answer lacking a 4-gram does not zero the score; no effective order) and exponential smoothing
    of orders with no match. Case is folded (`sacrebleu -lc`, "case:lc") because VQA and report-generation
    scores are case-insensitive by convention (the COCO caption evaluation, pycocoevalcap, with which the
    Medical-Diff-VQA authors' code scores, lower-cases), and because the demo's language model writes with a
    lower-casing word-piece vocabulary: case-sensitive BLEU would score the tokenizer, not the answer, each
    "Case B" of a reference missing the model's "case b". ROUGE-L and METEOR fold case too. The signature
    says all of this, and the version, to whoever reproduces the number. An empty corpus scores 0."""
    from sacrebleu.metrics import BLEU

    pairs = list(zip(predictions, references, strict=True))
    metric = BLEU(**BLEU_SETTINGS)
    if not pairs:
        metric.corpus_score([""], [[""]])  # the signature needs one scoring (it counts the references)
        return {"bleu": 0.0, "bleu_signature": str(metric.get_signature())}
    result = metric.corpus_score([p for p, _ in pairs], [[r for _, r in pairs]])
    return {"bleu": result.score / 100, "bleu_signature": str(metric.get_signature())}


def rouge_l(predictions: Sequence[str], references: Sequence[str]) -> float:
    """Mean over the pairs of the sentence-level ROUGE-L F-measure (longest common subsequence; F1, beta 1)
    by Google's `rouge-score` (its tokeniser: lower case, alphanumeric runs). No stemming
    (`ROUGE_USE_STEMMER`): the default of Hugging Face evaluate's "rouge" and of pycocoevalcap's ROUGE-L,
    which VQA and report-generation papers use; METEOR is the text score that credits shared stems."""
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=ROUGE_USE_STEMMER)
    scores = [
        scorer.score(target=r, prediction=p)["rougeL"].fmeasure for p, r in zip(predictions, references, strict=True)
    ]
    return float(np.mean(scores)) if scores else 0.0


class _NoSynonyms:
    """A WordNet stand-in with no synsets: nltk's METEOR then matches exact words and Porter stems only."""

    def synsets(self, lemma: str, *args, **kwargs) -> list:
        return []


def meteor(predictions: Sequence[str], references: Sequence[str], wordnet) -> float:
    """Mean over the pairs of nltk's sentence-level METEOR (`nltk.translate.meteor_score`; Banerjee & Lavie,
    2005, with nltk's parameters alpha 0.9, beta 3, gamma 0.5): exact, Porter-stem and WordNet-synonym
    matching stages, a recall-weighted harmonic mean times a fragmentation penalty. `wordnet` is a WordNet
    reader (`nltk.corpus.wordnet` once `nltk.download("wordnet")` has run: the full METEOR that
    Hugging Face evaluate's "meteor" computes, up to its tokeniser). Texts are split by `tokenize`."""
    from nltk.translate.meteor_score import meteor_score

    scores = [
        meteor_score([tokenize(r)], tokenize(p), wordnet=wordnet) for p, r in zip(predictions, references, strict=True)
    ]
    return float(np.mean(scores)) if scores else 0.0


def meteor_no_synonyms(predictions: Sequence[str], references: Sequence[str]) -> float:
    """`meteor` without its synonym stage (exact and Porter-stem matches only), reported under this name.

    WordNet, which the synonym stage needs, is data nltk downloads at run time: no package index has it in
    a form nltk reads (docs/evaluation.md), and these machines have no other network. A full METEOR of the
    same tokens scores at least as high (the synonym stage only adds matches to the exact and stem ones, and
    in METEOR's formula an added match never lowers the score), so this is a lower bound of it, not a number
    to put beside published METEOR."""
    return meteor(predictions, references, wordnet=_NoSynonyms())


def text_scores(predictions: Sequence[str], references: Sequence[str]) -> dict:
    """BLEU (with its signature), ROUGE-L and METEOR without synonyms of answers against references
    (`TEXT_METRICS`, plus `bleu_signature`)."""
    return {
        **bleu(predictions, references),
        "rouge_l": rouge_l(predictions, references),
        "meteor_no_synonyms": meteor_no_synonyms(predictions, references),
    }


def rescore_open_ended(metrics_json: str | Path) -> dict:
    """The text scores of a finished run's open-ended answers, recomputed from its saved outputs without
    generating again: `metrics.json` of `medreco demo` keeps every (question, reference, answer) under
    `vqa.examples`. Returns `{"scores", "bleu_signature", "previous"}` as `evaluate_open_ended` does: the
    new BLEU, ROUGE-L and METEOR, the other scores (entity F1, BERTScore, ...) as saved, and `previous`,
    the saved scores as they were."""
    from ..errors import read_text_file

    try:
        metrics = json.loads(read_text_file(metrics_json))
        previous, examples = metrics["vqa"]["open_ended"], metrics["vqa"]["examples"]
        pairs = [(e["answer"], e["reference"]) for e in examples]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise ValueError(
            f"{metrics_json}: not the metrics.json of a finished run (no vqa.open_ended scores with their examples)"
        ) from None
    if len(examples) != previous.get("questions"):
        raise ValueError(f"{metrics_json}: {len(examples)} saved answers for {previous['questions']} questions")
    text = text_scores([answer for answer, _ in pairs], [reference for _, reference in pairs])
    signature = text.pop("bleu_signature")
    others = {k: v for k, v in previous.items() if k not in (*TEXT_METRICS, "meteor", "questions")}
    return {
        "scores": {"questions": len(examples), **text, **others},
        "bleu_signature": signature,
        "previous": previous,
    }


def exact_match(predictions: Sequence[str], references: Sequence[str]) -> float:
    """The share of answers whose words (`tokenize`) equal the reference's."""
    pairs = list(zip(predictions, references, strict=True))
    return float(np.mean([tokenize(p) == tokenize(r) for p, r in pairs])) if pairs else 0.0


def mean_ranking_scores(
    rankings: Sequence[Sequence[str]], relevant: Sequence[Sequence[str]], ks: Sequence[int] = (1, 3, 5)
) -> dict:
    """Recall@k and NDCG@k (`recall_at_k`, `ndcg_at_k`) averaged over queries, for each k of `ks`."""
    if len(rankings) != len(relevant):
        raise ValueError(f"{len(rankings)} rankings for {len(relevant)} sets of relevant items")
    if not rankings:
        raise ValueError("no queries to score")
    scores: dict = {"queries": len(rankings)}
    for k in ks:
        scores[f"recall@{k}"] = float(np.mean([recall_at_k(r, rel, k) for r, rel in zip(rankings, relevant)]))
        scores[f"ndcg@{k}"] = float(np.mean([ndcg_at_k(r, rel, k) for r, rel in zip(rankings, relevant)]))
    return scores


__all__ = [
    "BLEU_SETTINGS",
    "ROUGE_USE_STEMMER",
    "TEXT_METRICS",
    "balanced_accuracy",
    "bleu",
    "clustered_mean",
    "clustered_paired_test",
    "exact_match",
    "mcnemar_test",
    "mean_ranking_scores",
    "meteor",
    "meteor_no_synonyms",
    "ndcg_at_k",
    "recall_at_k",
    "rescore_open_ended",
    "rouge_l",
    "text_scores",
    "tokenize",
    "wilson_interval",
]
