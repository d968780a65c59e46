"""Scoring report decomposition: against the synthetic cohort's ground truth, and against
hand-labelled report text (a JSONL file of {"modality", "text", "labels": {finding name: status}})
(used by `benchmarks/report_mining.py`, `medreco score-reports` and the tests)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

from ...errors import TextFileError, read_text_file
from ..phantom import FINDING_TYPES, read_ground_truth, read_manifest
from ..reports.ontology import Entity, Ontology
from ..reports.statement import ReportDecomposer


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


STATUSES = ("positive", "negative", "uncertain", "not mentioned")


def read_labelled_reports(path: str | Path) -> list[dict]:
    """Lines of a labelled-report file; raises TextFileError naming the line that is not one."""
    rows = []
    for number, line in enumerate(read_text_file(path, "labelled reports (JSONL)").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise TextFileError(f"{path}, line {number}: not valid JSON ({error.msg})") from None
        if not isinstance(row, dict) or not {"modality", "text", "labels"} <= row.keys():
            raise TextFileError(f"{path}, line {number}: needs modality, text and labels")
        bad = {k: v for k, v in row["labels"].items() if v not in STATUSES}
        if bad:
            raise TextFileError(f"{path}, line {number}: statuses must be one of {STATUSES}, got {bad}")
        rows.append({**row, "line": number})
    return rows


def score_labelled_reports(decomposer: ReportDecomposer, path: str | Path) -> dict:
    """Mention-status accuracy on hand-labelled report text. Each label names a finding or structure
    as a radiologist would (resolved in the decomposer's vocabulary, synonyms included); a name the
    vocabulary cannot resolve counts as wrong ("unresolved"). A reader gives each vocabulary entity
    one status, so labels of one excerpt that name the same entity are scored once when they agree,
    and not at all when they disagree ("right kidney" normal and "left kidney" with a cyst are both
    the kidneys; "filling defects" seen and "pulmonary embolism" suspected are both the embolism):
    those are listed under "conflicts". Returns overall, per-modality and per-kind accuracy, the
    confusion, every error and every conflict."""
    confusion: Counter = Counter()
    by_modality: dict[str, Counter] = defaultdict(Counter)
    by_kind: dict[str, Counter] = defaultdict(Counter)
    errors, conflicts = [], []
    shared = 0
    for row in read_labelled_reports(path):
        groups: dict[str, list[str]] = {}  # entity id (or the name, unresolved) -> its labels' names
        entities: dict[str, Entity] = {}
        for name in row["labels"]:
            try:
                entity = decomposer.ontology.find(name, row["modality"])
            except KeyError:
                groups[f"?{name}"] = [name]
                continue
            entities[entity.id] = entity
            groups.setdefault(entity.id, []).append(name)
        result = decomposer.decompose(row["text"], row["modality"], list(entities.values()))
        for key, names in groups.items():
            got = result.statements[key].status.value if key in entities else "unresolved"
            if len(names) > 1:
                shared += len(names)
                if len({row["labels"][name] for name in names}) > 1:
                    labels = {name: row["labels"][name] for name in names}
                    conflicts.append({"id": row.get("id", row["line"]), "labels": labels, "got": got})
                    continue
            expected = row["labels"][names[0]]
            right = got == expected
            confusion[(expected, got)] += 1
            for table, table_key in ((by_modality, row["modality"]), (by_kind, row.get("kind", ""))):
                table[table_key]["right" if right else "wrong"] += 1
            if not right:
                label = " / ".join(names)
                errors.append(
                    {
                        "id": row.get("id", row["line"]),
                        "text": row["text"],
                        "label": label,
                        "expected": expected,
                        "got": got,
                    }
                )
    total = sum(confusion.values())
    unresolved = sum(n for (_, got), n in confusion.items() if got == "unresolved")
    resolved_errors = len(errors) - unresolved

    def accuracy(counts: Counter) -> float:
        return counts["right"] / (counts["right"] + counts["wrong"]) if counts else 0.0

    return {
        "labels": total,
        # labels that named one entity together with another label of their excerpt (scored once)
        "labels_sharing_an_entity": shared,
        # excerpts whose labels give one entity two statuses (not scored)
        "conflicts": conflicts,
        # over every label (a name the vocabulary lacks counts as wrong)
        "status_accuracy": (total - len(errors)) / total if total else 0.0,
        # over the labels the vocabulary resolves: how well mention statuses are read
        "status_accuracy_resolved": (total - unresolved - resolved_errors) / (total - unresolved)
        if total > unresolved
        else 0.0,
        "vocabulary_coverage": (total - unresolved) / total if total else 0.0,
        "by_modality": {k: accuracy(v) for k, v in sorted(by_modality.items())},
        "by_kind": {k: accuracy(v) for k, v in sorted(by_kind.items())},
        "confusion": {f"{expected} -> {got}": n for (expected, got), n in sorted(confusion.items())},
        "errors": errors,
    }


__all__ = [
    "phantom_entity",
    "read_labelled_reports",
    "score_change_labels",
    "score_decomposition",
    "score_labelled_reports",
]
