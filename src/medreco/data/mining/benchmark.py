"""Scoring report decomposition against the synthetic cohort's ground truth (used by
`benchmarks/report_mining.py` and the tests)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from ..phantom import FINDING_TYPES, read_ground_truth, read_manifest
from ..reports.decomposition import ReportDecomposer
from ..reports.ontology import Entity, Ontology


def phantom_entity(ontology: Ontology, key: str, modality: str) -> Entity:
    """The vocabulary entity of a synthetic finding type, in the study's family when it lists it."""
    name = FINDING_TYPES[key].entity
    try:
        return ontology.find(name, modality)
    except KeyError:
        return ontology.find(name)  # e.g. cardiac enlargement is listed for CXR only


def score_decomposition(decomposer: ReportDecomposer, cohort_dir: str | Path) -> dict:
    """Mention-status accuracy and sentence-level span precision/recall over every (study, finding)."""
    confusion: Counter = Counter()
    true_positive_sentences = predicted_sentences = reference_sentences = 0
    for record in read_manifest(cohort_dir):
        truth = read_ground_truth(cohort_dir, record.study_id)
        entities = {key: phantom_entity(decomposer.ontology, key, record.modality) for key in truth["mentions"]}
        result = decomposer.decompose(record.report, record.modality, list(entities.values()))
        for key, mention in truth["mentions"].items():
            statement = result.statements[entities[key].id]
            confusion[(mention["status"], statement.status.value)] += 1
            reference = set(mention["sentences"])
            predicted = set(statement.sentences)
            true_positive_sentences += len(reference & predicted)
            predicted_sentences += len(predicted)
            reference_sentences += len(reference)
    total = sum(confusion.values())
    correct = sum(n for (expected, got), n in confusion.items() if expected == got)
    return {
        "pairs": total,
        "status_accuracy": correct / total if total else 0.0,
        "span_precision": true_positive_sentences / predicted_sentences if predicted_sentences else 0.0,
        "span_recall": true_positive_sentences / reference_sentences if reference_sentences else 0.0,
        "confusion": {f"{expected} -> {got}": n for (expected, got), n in sorted(confusion.items())},
    }


def score_change_labels(decomposer: ReportDecomposer, cohort_dir: str | Path) -> dict:
    """Interval-change labels read from prior/current reports against the cohort's true changes.
    Pairs failing the bidirectional check (or unmentioned in a report) are counted as dropped."""
    from .longitudinal import consistent_change_label

    records = {r.study_id: r for r in read_manifest(cohort_dir)}
    confusion: Counter = Counter()
    for record in records.values():
        if record.prior_study_id is None:
            continue
        prior = records[record.prior_study_id]
        for key, change in read_ground_truth(cohort_dir, record.study_id)["changes_from_prior"].items():
            entity = phantom_entity(decomposer.ontology, key, record.modality)
            before = decomposer.decompose(prior.report, prior.modality, [entity]).statements[entity.id]
            after = decomposer.decompose(record.report, record.modality, [entity]).statements[entity.id]
            label = consistent_change_label(before, after)
            confusion[(change["label"], label.label if label else "dropped")] += 1
    kept = sum(n for (_, got), n in confusion.items() if got != "dropped")
    correct = sum(n for (expected, got), n in confusion.items() if expected == got)
    total = sum(confusion.values())
    return {
        "pairs": total,
        "kept": kept,
        "accuracy_on_kept": correct / kept if kept else 0.0,
        "confusion": {f"{expected} -> {got}": n for (expected, got), n in sorted(confusion.items())},
    }


__all__ = ["phantom_entity", "score_change_labels", "score_decomposition"]
