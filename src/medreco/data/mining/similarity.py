"""Entity-level similarity between two reports' statements (MedReCo section 4.4).

The paper scores each pair of entity texts with three metrics (BioLORD embeddings, RaTEScore,
RadGraph-XL), ranks pairs by the average of the metrics' ranks, and calls a pair positive when
every metric exceeds 0.9 and negative when every metric is below 0.3. Metrics here are
pluggable: embedding similarity (BioLORD by name, the bundled MiniLM offline), status and
attribute agreement (offline, exact), and adapters for RaTEScore and RadGraph that load them
when installed and raise `MetricUnavailableError` saying what to install when not."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import torch

from ...errors import MedReCoError
from ..reports.attributes import read_attributes
from ..reports.statement import EntityStatement, MentionStatus

logger = logging.getLogger(__name__)


class MetricUnavailableError(MedReCoError, RuntimeError):
    """A similarity metric whose package or model is not available here."""


class SimilarityMetric(ABC):
    name: str

    @abstractmethod
    def score(self, a: list[EntityStatement], b: list[EntityStatement]) -> np.ndarray:
        """Similarity in [0, 1] of each pair (a[i], b[i])."""

    def matrix(self, a: list[EntityStatement], b: list[EntityStatement]) -> np.ndarray:
        """All pairs (a[i], b[j]); metrics with vector forms override this."""
        return np.array([[self.score([x], [y])[0] for y in b] for x in a])


class EmbeddingSimilarity(SimilarityMetric):
    """Cosine similarity (clipped to [0, 1]) of mean-pooled sentence embeddings of the entity texts."""

    name = "embedding"

    def __init__(
        self, model_name_or_path: str = "FremyCompany/BioLORD-2023", batch_size: int = 64, device: str = "cpu"
    ):
        from transformers import AutoModel, AutoTokenizer

        from ...factory import resolve_text_encoder

        path = resolve_text_encoder(model_name_or_path)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            self.model = AutoModel.from_pretrained(path).to(device).eval()
        except OSError as error:
            raise MetricUnavailableError(
                f"cannot load the text encoder {model_name_or_path!r} ({error.__class__.__name__}); offline, use "
                "'bundled:minilm'"
            ) from error
        self.batch_size, self.device = batch_size, device
        self._cache: dict[str, np.ndarray] = {}

    @torch.no_grad()
    def embed(self, texts: list[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        for start in range(0, len(missing), self.batch_size):
            chunk = missing[start : start + self.batch_size]
            batch = self.tokenizer(chunk, padding=True, truncation=True, max_length=256, return_tensors="pt").to(
                self.device
            )
            hidden = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            vectors = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1).clamp(min=1), dim=-1)
            for text, vector in zip(chunk, vectors.cpu().numpy()):
                self._cache[text] = vector
        return np.stack([self._cache[t] for t in texts]) if texts else np.zeros((0, 1))

    def score(self, a: list[EntityStatement], b: list[EntityStatement]) -> np.ndarray:
        x, y = self.embed([s.text for s in a]), self.embed([s.text for s in b])
        return np.clip((x * y).sum(-1), 0.0, 1.0)

    def matrix(self, a: list[EntityStatement], b: list[EntityStatement]) -> np.ndarray:
        return np.clip(self.embed([s.text for s in a]) @ self.embed([s.text for s in b]).T, 0.0, 1.0)


class AgreementSimilarity(SimilarityMetric):
    """Exact agreement of mention status and of the attributes both texts state (size within 20%,
    number, side, lobe, grade, margins, density): 0 when statuses differ, else the share of agreeing
    attributes (1 when neither states any)."""

    name = "agreement"

    def score(self, a: list[EntityStatement], b: list[EntityStatement]) -> np.ndarray:
        return np.array([_agreement(_facts(x), _facts(y)) for x, y in zip(a, b)], dtype=np.float64)

    def matrix(self, a: list[EntityStatement], b: list[EntityStatement]) -> np.ndarray:
        # each statement's facts are gathered once, not once per pair
        first, second = [_facts(x) for x in a], [_facts(y) for y in b]
        return np.array([[_agreement(x, y) for y in second] for x in first], dtype=np.float64).reshape(len(a), len(b))


def _facts(statement: EntityStatement) -> tuple[MentionStatus, dict]:
    """Mention status and, for positive mentions, the attributes the text states."""
    positive = statement.status is MentionStatus.POSITIVE
    return statement.status, statement.attributes.comparable() if positive else {}


def _stated_attributes(status: MentionStatus, text: str) -> dict:
    return read_attributes(text).comparable() if status is MentionStatus.POSITIVE else {}


def statement_key(status: str | MentionStatus, text: str) -> tuple:
    """What a statement says, as a hashable key: its mention status and, for positive mentions, the
    attributes its text states. "No pleural effusion." and "No effusion is seen." share a key."""
    status = MentionStatus(status)
    return status.value, tuple(sorted(_stated_attributes(status, text).items()))


def _agreement(x: tuple[MentionStatus, dict], y: tuple[MentionStatus, dict]) -> float:
    (status, first), (other_status, second) = x, y
    if status is not other_status:
        return 0.0
    if status is not MentionStatus.POSITIVE:
        return 1.0
    shared = first.keys() & second.keys()
    if not shared:
        return 1.0 if not first and not second else 0.5
    agree = 0
    for name in shared:
        u, v = first[name], second[name]
        agree += abs(u - v) <= 0.2 * max(u, v) if name == "size_mm" else u == v
    return agree / len(first.keys() | second.keys())


class RaTEScoreSimilarity(SimilarityMetric):
    """RaTEScore (Zhao et al., 2024) when the `RaTEScore` package and its Hub models are available."""

    name = "ratescore"

    def __init__(self, use_gpu: bool = False):
        try:
            from RaTEScore import RaTEScore
        except ImportError as error:
            raise MetricUnavailableError("RaTEScore is not installed: pip install RaTEScore") from error
        try:
            self._scorer = RaTEScore(use_gpu=use_gpu)
        except Exception as error:  # it downloads a DeBERTa NER model and BioLORD from the Hub
            raise MetricUnavailableError(f"RaTEScore could not load its models ({error.__class__.__name__})") from error

    def score(self, a: list[EntityStatement], b: list[EntityStatement]) -> np.ndarray:
        return np.clip(
            np.asarray(self._scorer.compute_score([s.text for s in a], [s.text for s in b]), dtype=float), 0, 1
        )


class RadGraphSimilarity(SimilarityMetric):
    """RadGraph F1 (entity and relation agreement) when the `radgraph` package and its model are available."""

    name = "radgraph"

    def __init__(self, model_type: str = "radgraph-xl"):
        try:
            from radgraph import F1RadGraph
        except ImportError as error:
            raise MetricUnavailableError("RadGraph is not installed: pip install radgraph") from error
        try:
            self._scorer = F1RadGraph(reward_level="partial", model_type=model_type)
        except Exception as error:
            raise MetricUnavailableError(f"RadGraph could not load its model ({error.__class__.__name__})") from error

    def score(self, a: list[EntityStatement], b: list[EntityStatement]) -> np.ndarray:
        _, rewards, _, _ = self._scorer(hyps=[s.text for s in a], refs=[s.text for s in b])
        return np.clip(np.asarray(rewards, dtype=float), 0, 1)


SIMILARITY_METRICS = ("embedding", "agreement", "ratescore", "radgraph")


def build_similarity_metric(name: str, text_encoder: str | None = None) -> SimilarityMetric:
    """A similarity metric by name (`SIMILARITY_METRICS`); `text_encoder` is the embedding metric's
    model (`EmbeddingSimilarity`'s default, BioLORD-2023, when None)."""
    if name == "embedding":
        return EmbeddingSimilarity(text_encoder) if text_encoder else EmbeddingSimilarity()
    if name == "agreement":
        return AgreementSimilarity()
    if name == "ratescore":
        return RaTEScoreSimilarity()
    if name == "radgraph":
        return RadGraphSimilarity()
    raise ValueError(f"unknown similarity metric {name!r}; choose from {', '.join(SIMILARITY_METRICS)}")


@dataclass
class SimilarityThresholds:
    """Paper defaults: positive when every metric > 0.9, negative when every metric < 0.3.
    A dict gives one threshold per metric name (embedding models differ in their cosine ranges)."""

    positive: float | dict[str, float] = 0.9
    negative: float | dict[str, float] = 0.3

    def for_metric(self, name: str) -> tuple[float, float]:
        positive = self.positive[name] if isinstance(self.positive, dict) else self.positive
        negative = self.negative[name] if isinstance(self.negative, dict) else self.negative
        return positive, negative


class ReportSimilarity:
    """Several metrics over pairs of entity statements, combined as the paper does."""

    def __init__(self, metrics: list[SimilarityMetric], thresholds: SimilarityThresholds | None = None):
        if not metrics:
            raise ValueError("at least one similarity metric is needed")
        self.metrics = metrics
        self.thresholds = thresholds or SimilarityThresholds()

    @classmethod
    def offline(cls, thresholds: SimilarityThresholds | None = None) -> ReportSimilarity:
        """Embedding (bundled MiniLM) + agreement: what runs with no network."""
        return cls([EmbeddingSimilarity("bundled:minilm"), AgreementSimilarity()], thresholds)

    def matrices(self, a: list[EntityStatement], b: list[EntityStatement]) -> dict[str, np.ndarray]:
        return {metric.name: metric.matrix(a, b) for metric in self.metrics}

    def relevance(self, a: list[EntityStatement], b: list[EntityStatement]) -> np.ndarray:
        """(len(a), len(b)) of 1 (positive), 0 (negative) or -1 (neither); unmentioned -> -1."""
        matrices = self.matrices(a, b)
        above = [m > self.thresholds.for_metric(name)[0] for name, m in matrices.items()]
        below = [m < self.thresholds.for_metric(name)[1] for name, m in matrices.items()]
        relevance = np.full((len(a), len(b)), -1, dtype=np.int64)
        relevance[np.logical_and.reduce(above)] = 1
        relevance[np.logical_and.reduce(below)] = 0
        unmentioned_a = np.array([s.status is MentionStatus.NOT_MENTIONED for s in a])
        unmentioned_b = np.array([s.status is MentionStatus.NOT_MENTIONED for s in b])
        relevance[unmentioned_a[:, None] | unmentioned_b[None, :]] = -1
        return relevance

    def ranking_score(self, a: list[EntityStatement], b: list[EntityStatement]) -> np.ndarray:
        """The paper's ranking signal: for each statement of `a`, every candidate of `b` scored by the
        average over metrics of its normalised rank (0 = least similar, 1 = most; ties share ranks)."""
        ranks = [_average_ranks(matrix) for matrix in self.matrices(a, b).values()]
        return np.mean(ranks, axis=0)


def _average_ranks(matrix: np.ndarray) -> np.ndarray:
    """Row-wise ranks in [0, 1], tied values getting the mean of their ranks."""
    below = (matrix[:, None, :] < matrix[:, :, None]).sum(-1)
    equal = (matrix[:, None, :] == matrix[:, :, None]).sum(-1)
    return (below + (equal - 1) / 2) / max(1, matrix.shape[1] - 1)


__all__ = [
    "AgreementSimilarity",
    "build_similarity_metric",
    "EmbeddingSimilarity",
    "MetricUnavailableError",
    "RaTEScoreSimilarity",
    "RadGraphSimilarity",
    "ReportSimilarity",
    "SIMILARITY_METRICS",
    "SimilarityMetric",
    "SimilarityThresholds",
]
