"""Evaluation: ranking, statistics and text metrics; retrieval, VQA and longitudinal protocols."""

from .answerability import answerability_breakdown
from .metrics import bleu, exact_match, mcnemar_test, meteor, ndcg_at_k, recall_at_k, rouge_l, wilson_interval
from .probe import fit_logistic, linear_probe, presence_ceiling, probe_features, probe_table, rank_auc
from .public_sets import PUBLIC_SETS, ImageLocator, PublicSetDataError, run_public_set
from .retrieval import ClipBaseline, entity_level, evaluate_retrieval, summarize_retrieval
from .swap import evaluate_swap_consistency, inverse_option, swap_comparison, swap_consistency, swapped_row
from .text import BERTScorer, available_report_metrics, clinical_facts, entity_f1, mean_text_score
from .vqa import (
    CLOSED_SCORING,
    accuracy_summary,
    baseline_hits,
    choose_option,
    choose_options,
    closed_accuracy,
    closed_predictions,
    evaluate_closed_vqa,
    evaluate_longitudinal,
    evaluate_open_ended,
    preload_images,
    sample_rows,
    text_only_baseline,
)

__all__ = [
    "PUBLIC_SETS",
    "ClipBaseline",
    "CLOSED_SCORING",
    "BERTScorer",
    "PublicSetDataError",
    "ImageLocator",
    "accuracy_summary",
    "answerability_breakdown",
    "available_report_metrics",
    "bleu",
    "choose_option",
    "choose_options",
    "clinical_facts",
    "closed_accuracy",
    "baseline_hits",
    "closed_predictions",
    "entity_f1",
    "entity_level",
    "evaluate_closed_vqa",
    "evaluate_longitudinal",
    "evaluate_open_ended",
    "evaluate_retrieval",
    "evaluate_swap_consistency",
    "exact_match",
    "inverse_option",
    "mcnemar_test",
    "mean_text_score",
    "meteor",
    "ndcg_at_k",
    "recall_at_k",
    "rouge_l",
    "run_public_set",
    "preload_images",
    "sample_rows",
    "summarize_retrieval",
    "swap_comparison",
    "swap_consistency",
    "swapped_row",
    "text_only_baseline",
    "wilson_interval",
    "fit_logistic",
    "linear_probe",
    "presence_ceiling",
    "probe_features",
    "probe_table",
    "rank_auc",
]
