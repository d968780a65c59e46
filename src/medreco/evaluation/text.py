"""Open-ended answer scores that need a model or our report parser: BERTScore with a local
encoder, and entity-level F1 from the rule-based decomposer.

BERTScore (Zhang et al., 2020) greedily matches each token of one text to its most similar token
of the other by cosine of contextual embeddings; F1 is the harmonic mean of the matched
precision and recall. We compute it with whatever encoder is given (the bundled MiniLM offline),
without idf weighting or baseline rescaling, so values are comparable between systems scored
with the same encoder only. The `bert-score` package would download its model from the Hub.

Entity F1 compares the clinical facts two texts state: for every vocabulary entity of the
modality, its mention status and its attributes (side, lobes, grade, size, number, margins,
density) as read by `medreco.data`'s parser. It is the role RadGraph F1 plays in the paper,
computed with our own decomposer (RadGraph needs a model download).

RaTEScore and RadGraph F1 themselves are added when their packages and models are available
(`available_report_metrics`); when not, the reason is recorded instead of a score."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from types import SimpleNamespace

import numpy as np
import torch

from ..data.mining.similarity import MetricUnavailableError, RadGraphSimilarity, RaTEScoreSimilarity, SimilarityMetric
from ..data.reports.decomposition import RuleBasedDecomposer
from ..data.reports.statement import MentionStatus

logger = logging.getLogger(__name__)


class BERTScorer:
    """BERTScore F1 with a local Hugging Face encoder (`bundled:minilm` by default).

    Example:
    ```python
    >>> BERTScorer().score(["small left effusion"], ["small left pleural effusion"])
    ```"""

    def __init__(self, model_name_or_path: str = "bundled:minilm", layer: int | None = None, batch_size: int = 32):
        from transformers import AutoModel, AutoTokenizer

        from ..factory import resolve_text_encoder

        path = resolve_text_encoder(model_name_or_path)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path).eval()
        self.layer = layer
        self.batch_size = batch_size

    @torch.no_grad()
    def _embed(self, texts: list[str]) -> list[torch.Tensor]:
        """Unit-norm contextual embeddings of each text's word pieces (special tokens dropped)."""
        out = []
        for start in range(0, len(texts), self.batch_size):
            batch = self.tokenizer(
                texts[start : start + self.batch_size],
                padding=True,
                truncation=True,
                max_length=256,
                return_tensors="pt",
                return_special_tokens_mask=True,
            )
            special = batch.pop("special_tokens_mask").bool()
            outputs = self.model(**batch, output_hidden_states=self.layer is not None)
            hidden = outputs.last_hidden_state if self.layer is None else outputs.hidden_states[self.layer]
            hidden = torch.nn.functional.normalize(hidden.float(), dim=-1)
            keep = batch["attention_mask"].bool() & ~special
            out.extend(hidden[i][keep[i]] for i in range(hidden.shape[0]))
        return out

    def score(self, predictions: Sequence[str], references: Sequence[str]) -> dict[str, float]:
        """Mean precision, recall and F1 over the pairs; an empty text scores 0 against anything."""
        pairs = list(zip(predictions, references, strict=True))
        if not pairs:
            return {"precision": 0.0, "recall": 0.0, "f1": 0.0}
        embedded = self._embed([p for p, _ in pairs] + [r for _, r in pairs])
        scores = []
        for p, r in zip(embedded[: len(pairs)], embedded[len(pairs) :], strict=True):
            if len(p) == 0 or len(r) == 0:
                scores.append((0.0, 0.0, 0.0))
                continue
            similarity = p @ r.T
            precision = similarity.max(dim=1).values.mean().item()
            recall = similarity.max(dim=0).values.mean().item()
            f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
            scores.append((precision, recall, f1))
        mean = np.mean(scores, axis=0)
        return {"precision": float(mean[0]), "recall": float(mean[1]), "f1": float(mean[2])}


def clinical_facts(text: str, modality: str, decomposer: RuleBasedDecomposer) -> set[tuple]:
    """(entity id, "status", value) and (entity id, attribute, value) for every entity the text mentions."""
    if not text.strip():
        return set()
    facts = set()
    for entity_id, statement in decomposer.decompose(text, modality).mentioned().items():
        facts.add((entity_id, "status", statement.status.value))
        if statement.status is MentionStatus.POSITIVE:
            for name, value in statement.attributes.comparable().items():
                facts.add((entity_id, name, value))
    return facts


def entity_f1(
    predictions: Sequence[str],
    references: Sequence[str],
    modalities: Sequence[str],
    decomposer: RuleBasedDecomposer | None = None,
) -> dict[str, float]:
    """Micro-averaged precision, recall and F1 of the clinical facts of predictions against references."""
    decomposer = decomposer or RuleBasedDecomposer()
    true_positive = predicted = expected = 0
    for prediction, reference, modality in zip(predictions, references, modalities, strict=True):
        p, r = clinical_facts(prediction, modality, decomposer), clinical_facts(reference, modality, decomposer)
        true_positive += len(p & r)
        predicted += len(p)
        expected += len(r)
    precision = true_positive / predicted if predicted else 0.0
    recall = true_positive / expected if expected else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


__all__ = ["BERTScorer", "clinical_facts", "entity_f1"]


def available_report_metrics() -> tuple[list[SimilarityMetric], dict[str, str]]:
    """RaTEScore and RadGraph F1 scorers that load here, and for the others why not (what to install)."""
    metrics, unavailable = [], {}
    for metric_class in (RaTEScoreSimilarity, RadGraphSimilarity):
        try:
            metrics.append(metric_class())
        except MetricUnavailableError as error:
            unavailable[metric_class.name] = str(error)
            logger.info("%s not computed: %s", metric_class.name, error)
    return metrics, unavailable


def mean_text_score(metric: SimilarityMetric, predictions: Sequence[str], references: Sequence[str]) -> float:
    """The mean of a text-pair metric (RaTEScore, RadGraph F1, ...) over answers and references."""
    if not predictions:
        return 0.0
    pairs = metric.score([SimpleNamespace(text=t) for t in predictions], [SimpleNamespace(text=t) for t in references])
    return float(np.mean(pairs))
