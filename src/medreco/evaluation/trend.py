"""TAMM's protocols on a mined folder: the trend classifier on adjacent study pairs, and temporal
sentence similarity.

- **Trend classification**: each test pair's overall trend (improving / stable / worsening, from
  `study_trends`) predicted from the whole-image feature difference by the stage-1 model's trend
  classifier, scored like the progression models (TILA's four protocols, class-balanced with
  patient-clustered intervals) against the majority trend of the training pairs.
- **Temporal sentence similarity** (TAMM's zero-shot MS-CXR-T task): pairs of sentences describing a
  finding's change, *paraphrases* (the same direction, worded by different reports) or
  *contradictions* (opposite directions); a pair is called a paraphrase when the cosine of the two
  texts' embeddings exceeds a threshold chosen on the training split's pairs. Accuracy,
  class-balanced, in the model's text space and in its text backbone's."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from ..data.mining import MinedData, ProgressionPair
from ..data.mining.longitudinal import study_trends
from ..data.reports.change import PROGRESSION_OF_CHANGE
from ..inference.encoder import RetrievalEncoder
from ..modeling import PROGRESSION_CLASSES
from .temporal import score_progression

TREND = "trend"  # the entity id trend pairs carry (a patient's trend is no finding's)
INVERSE = {"improving": "worsening", "worsening": "improving"}


def trend_pairs(data: MinedData, split: str) -> list[ProgressionPair]:
    """The split's adjacent study pairs with a trend, as `ProgressionPair`s of the pseudo-entity `TREND`."""
    trends = study_trends(data.rows("longitudinal", split), lambda study: data.studies[study].statements)
    return [ProgressionPair(t.prior, t.current, t.patient_id, TREND, t.trend) for t in trends]


def evaluate_trends(predictor, data: MinedData, split: str = "test", progress: bool = False) -> dict:
    """TILA's four protocols for a `TrendPredictor` on the split's trend pairs, by modality, beside
    the majority trend of the training pairs."""
    pairs = trend_pairs(data, split)
    if not pairs:
        raise ValueError(f"{data.directory}: no {split!r} study pairs with a trend (longitudinal rows) to score")
    train_labels = [PROGRESSION_CLASSES.index(p.progression) for p in trend_pairs(data, "train")]
    if not train_labels:
        raise ValueError(f"{data.directory}: no training pairs with a trend, so no majority class")
    families = [data.studies[p.current].modality for p in pairs]
    return {"split": split, **score_progression(predictor, pairs, data.studies, train_labels, families, None, progress)}


def change_sentences(data: MinedData, split: str) -> dict[tuple[str, str], list[str]]:
    """(finding, progression) -> the distinct texts of the split's current reports that describe that
    finding's directional change (the statement's sentences), sorted."""
    found: dict[tuple[str, str], set[str]] = defaultdict(set)
    for row in data.rows("longitudinal", split):
        progression = PROGRESSION_OF_CHANGE.get(row["label"])
        if progression not in INVERSE:
            continue
        statement = data.studies[row["current"]].statements.get(row["entity_id"], {})
        text = " ".join(statement.get("sentences", [])).strip()
        if text:
            found[(row["entity_id"], progression)].add(text)
    return {key: sorted(texts) for key, texts in found.items()}


def sentence_pairs(data: MinedData, split: str, limit: int = 1000, seed: int = 0) -> list[tuple[str, str, bool]]:
    """Up to `limit` (text, text, is paraphrase) pairs about one finding, as many contradictions as
    paraphrases, drawn reproducibly."""
    sentences = change_sentences(data, split)
    rng = random.Random(seed)
    paraphrases, contradictions = [], []
    for (entity, progression), texts in sorted(sentences.items()):
        paraphrases += [(a, b, True) for i, a in enumerate(texts) for b in texts[i + 1 :]]
        if progression == "worsening":
            opposite = sentences.get((entity, INVERSE[progression]), [])
            contradictions += [(a, b, False) for a in texts for b in opposite]
    each = min(len(paraphrases), len(contradictions), limit // 2)
    return rng.sample(paraphrases, each) + rng.sample(contradictions, each)


def _cosines(encoder: RetrievalEncoder, pairs: Sequence[tuple[str, str, bool]]) -> dict[str, np.ndarray]:
    texts = sorted({t for a, b, _ in pairs for t in (a, b)})
    row = {t: i for i, t in enumerate(texts)}
    shared, backbone = encoder.embed_texts(texts)
    first, second = [row[a] for a, _, _ in pairs], [row[b] for _, b, _ in pairs]
    return {
        "shared": (shared[first] * shared[second]).sum(-1).numpy(),
        "backbone": (backbone[first] * backbone[second]).sum(-1).numpy(),
    }


def _best_threshold(cosines: np.ndarray, labels: np.ndarray) -> float:
    """The cut that maximises class-balanced accuracy (a paraphrase above it)."""
    candidates = np.unique(cosines)
    scores = [
        (np.mean(cosines[labels] > c) + np.mean(cosines[~labels] <= c)) / 2 if labels.any() and (~labels).any() else 0
        for c in candidates
    ]
    return float(candidates[int(np.argmax(scores))])


def temporal_sentence_similarity(
    encoder: RetrievalEncoder, data: MinedData, split: str = "test", limit: int = 1000, seed: int = 0
) -> dict:
    """TAMM's temporal sentence-similarity task on the mined change sentences (see the module doc)."""
    train, scored = sentence_pairs(data, "train", limit, seed), sentence_pairs(data, split, limit, seed)
    if not train or not scored:
        raise ValueError(
            f"{data.directory}: temporal sentence similarity needs paraphrase and contradiction pairs in the "
            f"'train' and {split!r} splits (reports that describe a finding growing and shrinking)"
        )
    train_cosines, cosines = _cosines(encoder, train), _cosines(encoder, scored)
    train_labels = np.array([p for _, _, p in train])
    labels = np.array([p for _, _, p in scored])
    result: dict = {"split": split, "pairs": len(scored), "paraphrases": int(labels.sum())}
    for space in ("shared", "backbone"):
        threshold = _best_threshold(train_cosines[space], train_labels)
        called = cosines[space] > threshold
        result[space] = {
            "accuracy": float((np.mean(called[labels]) + np.mean(~called[~labels])) / 2),
            "threshold": threshold,
            "mean_cosine": {
                "paraphrase": float(cosines[space][labels].mean()),
                "contradiction": float(cosines[space][~labels].mean()),
            },
        }
    return result


__all__ = [
    "TREND",
    "change_sentences",
    "evaluate_trends",
    "sentence_pairs",
    "temporal_sentence_similarity",
    "trend_pairs",
]
