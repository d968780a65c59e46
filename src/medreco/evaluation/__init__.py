"""Evaluation: ranking, statistics and text metrics; retrieval, VQA and longitudinal protocols."""

from .metrics import bleu, exact_match, mcnemar_test, meteor, ndcg_at_k, recall_at_k, rouge_l, wilson_interval
from .retrieval import entity_level, evaluate_retrieval, summarize_retrieval
from .vqa import choose_option, closed_accuracy

__all__ = [
    "bleu",
    "choose_option",
    "closed_accuracy",
    "entity_level",
    "evaluate_retrieval",
    "exact_match",
    "mcnemar_test",
    "meteor",
    "ndcg_at_k",
    "recall_at_k",
    "rouge_l",
    "summarize_retrieval",
    "wilson_interval",
]
