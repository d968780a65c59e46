"""Closed-VQA accuracy split by what the images can answer.

A mined question may record whether its images answer it (`image_answerable`: True, False, or
None when unknown) and, when only the report does, why (`answerability_reason`). The synthetic
cohort records both (`medreco.data.phantom.answerability`); a real archive records neither. On
report-only questions no image reader can beat the language prior, so a VLM's margin over a blind
VLM or a text-only baseline means something only on the image-answerable ones: this module scores
the groups apart, from each system's hits alone (no model is run)."""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Sequence

from .metrics import clustered_paired_test, mcnemar_test
from .vqa import accuracy_summary, question_cluster

logger = logging.getLogger(__name__)

GROUPS = {True: "image_answerable", False: "report_only", None: "unknown"}
NOTHING_KNOWN = (
    "the mined questions record nothing about what their images show (no `image_answerable` "
    "values, as in a mined folder from a real archive), so accuracy cannot be split by answerability"
)
UNSPECIFIED_REASON = "unspecified"


def answerability_of(row: dict) -> bool | None:
    """A row's `image_answerable` as True, False or None (missing, None, or a value it cannot read)."""
    value = row.get("image_answerable")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return {"true": True, "false": False}.get(value.strip().lower())
    try:  # numpy bools, 0/1 columns; NaN (a missing value in a pandas column) is unknown
        return None if value != value else bool(value)
    except (TypeError, ValueError):
        return None


def _summaries(system_hits: dict[str, Sequence[bool]], indices: Sequence[int]) -> dict[str, dict]:
    return {name: accuracy_summary([bool(hits[i]) for i in indices]) for name, hits in system_hits.items()}


def _strata(
    system_hits: dict[str, Sequence[bool]], indices: Sequence[int], keys: Sequence[str]
) -> dict[str, dict[str, dict]]:
    """key -> system -> accuracy summary, over the rows of `indices` grouped by their `keys`."""
    grouped: dict[str, list[int]] = defaultdict(list)
    for i in indices:
        grouped[keys[i]].append(i)
    return {key: _summaries(system_hits, members) for key, members in sorted(grouped.items())}


def _comparisons(
    system_hits: dict[str, Sequence[bool]], indices: Sequence[int], clusters: Sequence[str | None], reference: str
) -> dict[str, dict]:
    """`reference` against every other system on the rows of `indices`: accuracy difference, exact
    McNemar test and, when every row's patients are known, the patient-clustered paired test."""
    if reference not in system_hits:
        return {}
    ours = [bool(system_hits[reference][i]) for i in indices]
    grouped = [clusters[i] for i in indices]
    comparisons = {}
    for name, hits in system_hits.items():
        if name == reference:
            continue
        theirs = [bool(hits[i]) for i in indices]
        comparison = {
            "difference": (sum(ours) - sum(theirs)) / len(ours) if ours else 0.0,
            "mcnemar": mcnemar_test(ours, theirs),
        }
        if ours and None not in grouped:
            comparison["clustered"] = clustered_paired_test(ours, theirs, grouped)
        comparisons[name] = comparison
    return comparisons


def _group_summary(
    system_hits: dict[str, Sequence[bool]],
    indices: Sequence[int],
    keys: dict[str, list[str]],
    clusters: Sequence[str | None],
    reference: str,
) -> dict:
    summary = {
        "questions": len(indices),
        "systems": _summaries(system_hits, indices),
        "comparisons": _comparisons(system_hits, indices, clusters, reference),
        "by_family": _strata(system_hits, indices, keys["family"]),
        "by_dimension": _strata(system_hits, indices, keys["dimension"]),
        "by_family_dimension": _strata(system_hits, indices, keys["family_dimension"]),
    }
    if None in (clusters[i] for i in indices):
        summary["clustered_note"] = "some studies know no patient: no patient-clustered comparison"
    return summary


def answerability_breakdown(
    system_hits: dict[str, Sequence[bool]], rows: Sequence[dict], studies: dict, reference: str = "vlm"
) -> dict:
    """Each system's closed-VQA hits on `rows` (e.g. "vlm", "blind_vlm", "text_only", "majority",
    each aligned with `rows`) split by the rows' `image_answerable`: "image_answerable" (True),
    "report_only" (False) and "unknown" (None or missing). Per group: each system's accuracy with
    its Wilson interval (`systems`), `reference` against every other system (`comparisons`:
    difference, McNemar and, when the studies know their patients, the patient-clustered paired
    test, each question clustered by `question_cluster`), accuracy by modality family, by dimension
    and by "family/dimension"; report-only questions also count their `answerability_reason`s
    (`reasons`). When no row knows its answerability: `available` False, the `reason` and the
    overall accuracies only."""
    rows = list(rows)
    for name, hits in system_hits.items():
        if len(hits) != len(rows):
            raise ValueError(f"system {name!r} has {len(hits)} hits for {len(rows)} questions")
    everything = range(len(rows))
    known = [answerability_of(row) for row in rows]
    if all(value is None for value in known):
        return {
            "available": False,
            "reason": NOTHING_KNOWN,
            "questions": len(rows),
            "systems": _summaries(system_hits, everything),
        }
    if reference not in system_hits:
        logger.warning("no hits of the reference system %r: the breakdown has no comparisons", reference)
    families = [getattr(studies.get(row["study_a"]), "modality", None) or "unknown" for row in rows]
    dimensions = [str(row.get("dimension") or "unknown") for row in rows]
    keys = {
        "family": families,
        "dimension": dimensions,
        "family_dimension": [f"{f}/{d}" for f, d in zip(families, dimensions, strict=True)],
    }
    clusters = [question_cluster(row, studies) for row in rows]
    members: dict[str, list[int]] = {group: [] for group in GROUPS.values()}
    for i, value in enumerate(known):
        members[GROUPS[value]].append(i)
    groups = {
        group: _group_summary(system_hits, indices, keys, clusters, reference)
        for group, indices in members.items()
        if indices
    }
    if "report_only" in groups:
        reasons = Counter(
            str(rows[i].get("answerability_reason") or UNSPECIFIED_REASON) for i in members["report_only"]
        )
        groups["report_only"]["reasons"] = dict(reasons.most_common())
    return {
        "available": True,
        "reference": reference,
        "questions": len(rows),
        "counts": {group: len(indices) for group, indices in members.items()},
        "systems": _summaries(system_hits, everything),
        "groups": groups,
    }


__all__ = ["GROUPS", "NOTHING_KNOWN", "answerability_breakdown", "answerability_of"]
