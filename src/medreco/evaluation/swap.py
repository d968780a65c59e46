"""Swap consistency: does the model tell which image is which?

Each closed question is asked again with its two images in the other order (its swapped twin,
`data.mining.swap`: same text and options, the true answer's inverse as the answer). A model that
reads the images answers the swapped question with the inverse of its first answer. The headline,
`order_dependent`, is taken over questions whose true answer is not its own inverse: the share
where the model's second answer is the inverse of its first and differs from it. A model that
ignores the images (a blind VLM, a text-only model) gives one answer to both orders and scores 0
there, and so does one that always answers "Both cases"."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence

import torch

from ..data.mining.questions import LETTERS
from ..data.mining.swap import CHANGE_INVERSES, inverse_option, row_inverse, swapped_row, true_inverse
from .metrics import clustered_mean, clustered_paired_test, mcnemar_test, wilson_interval
from .vqa import CLOSED_SCORING, best_letter, closed_option_scores, question_cluster

logger = logging.getLogger(__name__)


def _share(hits: Sequence[bool]) -> dict:
    """Rate, hits, count and 95% Wilson interval of a list of booleans."""
    hits = [bool(h) for h in hits]
    low, high = wilson_interval(sum(hits), len(hits))
    return {
        "rate": sum(hits) / len(hits) if hits else 0.0,
        "hits": sum(hits),
        "questions": len(hits),
        "ci95": [low, high],
    }


def _judge(row: dict, chosen: str, chosen_swapped: str) -> dict:
    """One eligible row's verdicts from the letters chosen in the original and the swapped order."""
    options = list(row["options"])
    truth = options[LETTERS.index(row["answer"])]
    first, second = options[LETTERS.index(chosen)], options[LETTERS.index(chosen_swapped)]
    true_inverse, chosen_inverse = row_inverse(row, truth), row_inverse(row, first)
    consistent = chosen_inverse is not None and chosen_inverse == second
    return {
        "consistent": consistent,
        "asymmetric": true_inverse != truth,
        "order_dependent": consistent and second != first,
        "correct": first == truth,
        "correct_swapped": second == true_inverse,
    }


def combined_letter(row: dict, scores: Sequence[float], scores_swapped: Sequence[float]) -> str:
    """TILA's inversion-aware choice for one row: each option's probability (softmax of its
    scores) in the first order averaged with the probability of its inverse in the swapped order;
    an option without an inverse among the options gets no support from the swapped order."""
    options = list(row["options"])
    first = torch.tensor(scores, dtype=torch.float).softmax(0)
    second = torch.tensor(scores_swapped, dtype=torch.float).softmax(0)
    fused = []
    for index, option in enumerate(options):
        inverse = row_inverse(row, option)
        support = second[options.index(inverse)] if inverse in options else 0.0
        fused.append(float(first[index] + support) / 2)
    return LETTERS[max(range(len(fused)), key=lambda i: (fused[i], -i))]


def swap_consistency(
    rows: Sequence[dict],
    predicted: Sequence[str | None],
    predicted_swapped: Sequence[str | None],
    studies: dict | None = None,
    scores: Sequence[Sequence[float] | None] | None = None,
    scores_swapped: Sequence[Sequence[float] | None] | None = None,
) -> dict:
    """Swap consistency from the letters a system chose for each row (`predicted`) and for the row
    with its images swapped (`predicted_swapped`, same options, see `swapped_row`). Rows whose true
    answer has no inverse among the options, or without a prediction (None), are skipped.

    Returns `questions` (eligible rows), `skipped`, and, each as {rate, hits, questions, ci95}:
    `consistency` (the second answer is the inverse of the first, over eligible rows),
    `order_dependent` (the headline: consistent and different, over eligible rows whose true answer
    is not its own inverse; with `studies` that know their patients, also its patient-clustered
    bootstrap interval, `clustered`), `both_orders_correct`, `accuracy` and `accuracy_swapped`;
    `by_dimension` (the headline per dimension); `hits` (per-row lists) with `rows` and
    `order_dependent_rows` (indices into `rows` they are aligned with) and, when known, `clusters`
    (the order-dependent rows' patients), for comparing two systems (`swap_comparison`). With
    `scores` and `scores_swapped` (each option's score per row, both orders), also `combined` and
    `protocols` (TILA's four, see the module doc)."""
    if not len(rows) == len(predicted) == len(predicted_swapped):
        raise ValueError(f"{len(rows)} rows, {len(predicted)} predictions, {len(predicted_swapped)} swapped ones")
    verdicts: dict[int, dict] = {}
    for i, (row, chosen, chosen_swapped) in enumerate(zip(rows, predicted, predicted_swapped, strict=True)):
        if chosen is not None and chosen_swapped is not None and true_inverse(row) is not None:
            verdicts[i] = _judge(row, chosen, chosen_swapped)
    eligible = sorted(verdicts)
    asymmetric = [i for i in eligible if verdicts[i]["asymmetric"]]
    hits = {
        "consistent": [verdicts[i]["consistent"] for i in eligible],
        "both_orders_correct": [verdicts[i]["correct"] and verdicts[i]["correct_swapped"] for i in eligible],
        "order_dependent": [verdicts[i]["order_dependent"] for i in asymmetric],
    }
    headline = _share(hits["order_dependent"])
    by_dimension: dict[str, list[bool]] = defaultdict(list)
    for i in asymmetric:
        by_dimension[str(rows[i].get("dimension") or "unknown")].append(verdicts[i]["order_dependent"])
    result = {
        "questions": len(eligible),
        "skipped": len(rows) - len(eligible),
        "consistency": _share(hits["consistent"]),
        "order_dependent": headline,
        "both_orders_correct": _share(hits["both_orders_correct"]),
        "accuracy": _share([verdicts[i]["correct"] for i in eligible]),
        "accuracy_swapped": _share([verdicts[i]["correct_swapped"] for i in eligible]),
        "by_dimension": {key: _share(values) for key, values in sorted(by_dimension.items())},
        "hits": hits,
        "rows": eligible,
        "order_dependent_rows": asymmetric,
    }
    protocols = {
        "standard": result["accuracy"],
        "reversed": result["accuracy_swapped"],
        "consistency": result["both_orders_correct"],
    }
    if scores is not None and scores_swapped is not None:
        combined = []
        for i in eligible:
            truth = rows[i]["answer"]
            if scores[i] is not None and scores_swapped[i] is not None:
                combined.append(combined_letter(rows[i], scores[i], scores_swapped[i]) == truth)
        result["combined"] = protocols["combined"] = _share(combined)
    result["protocols"] = {
        name: protocols[name] for name in ("standard", "reversed", "combined", "consistency") if name in protocols
    }
    if studies is not None and asymmetric:
        clusters = [question_cluster(rows[i], studies) for i in asymmetric]
        if None not in clusters:
            result["clusters"] = clusters
            headline["clustered"] = clustered_mean([float(h) for h in hits["order_dependent"]], clusters)
    return result


def swap_comparison(ours: dict, theirs: dict) -> dict:
    """Two systems' `swap_consistency` results on the same rows (e.g. the VLM and the blind VLM):
    the difference in the headline (`order_dependent`) with the exact McNemar test and, when the
    results know the rows' patients, the patient-clustered paired test."""
    if ours["order_dependent_rows"] != theirs["order_dependent_rows"]:
        raise ValueError("the two results judge different rows: run both systems on the same questions")
    a, b = ours["hits"]["order_dependent"], theirs["hits"]["order_dependent"]
    comparison = {
        "difference": ours["order_dependent"]["rate"] - theirs["order_dependent"]["rate"],
        "questions": len(a),
        "mcnemar": mcnemar_test(a, b),
    }
    if a and "clusters" in ours:
        comparison["clustered"] = clustered_paired_test(a, b, ours["clusters"])
    return comparison


def evaluate_swap_consistency(
    model,
    processor,
    rows: Sequence[dict],
    studies: dict,
    progress: bool = False,
    scoring: str = CLOSED_SCORING[0],
    answered: Sequence[str] | None = None,
    answered_scores: Sequence[Sequence[float]] | None = None,
) -> dict:
    """Swap consistency of a VLM under one `scoring`: it answers every row whose true answer has an
    inverse among its options in both image orders (`closed_predictions`), and the letters are judged
    by `swap_consistency`. `answered`: the letters the model already chose for `rows` in their own
    order under `scoring` (an earlier closed evaluation), so that only the swapped twins are asked;
    with `answered_scores` (each option's score behind them) the combined protocol is scored too.
    Also returns `scoring` and the per-row letters, aligned with `rows` (`predicted`,
    `predicted_swapped`; None for a row without a swapped twin)."""
    rows = list(rows)
    if answered is not None and len(answered) != len(rows):
        raise ValueError(f"{len(answered)} answers given for {len(rows)} rows")
    if answered_scores is not None and len(answered_scores) != len(rows):
        raise ValueError(f"{len(answered_scores)} option scores given for {len(rows)} rows")
    twins = [swapped_row(row) for row in rows]
    eligible = [i for i, twin in enumerate(twins) if twin is not None]
    logger.info("swap consistency: %d of %d questions have a swapped twin", len(eligible), len(rows))
    predicted: list[str | None] = [None] * len(rows)
    predicted_swapped: list[str | None] = [None] * len(rows)
    scores: list | None = None if answered is not None and answered_scores is None else [None] * len(rows)
    scores_swapped: list | None = [None] * len(rows)
    if eligible:
        scorings = (scoring,)
        if answered is None:
            first = closed_option_scores(model, processor, [rows[i] for i in eligible], studies, progress, scorings)
        elif answered_scores is not None:
            first = {scoring: [answered_scores[i] for i in eligible]}
        second = closed_option_scores(model, processor, [twins[i] for i in eligible], studies, progress, scorings)
        for position, i in enumerate(eligible):
            predicted_swapped[i] = best_letter(second[scoring][position])
            scores_swapped[i] = second[scoring][position]
            if answered is None or answered_scores is not None:
                scores[i] = first[scoring][position]
                predicted[i] = best_letter(first[scoring][position]) if answered is None else answered[i]
            else:
                predicted[i] = answered[i]
    return {
        **swap_consistency(
            rows, predicted, predicted_swapped, studies, scores, scores_swapped if scores is not None else None
        ),
        "scoring": scoring,
        "predicted": predicted,
        "predicted_swapped": predicted_swapped,
    }


__all__ = [
    "CHANGE_INVERSES",
    "evaluate_swap_consistency",
    "inverse_option",
    "swap_comparison",
    "swap_consistency",
    "swapped_row",
]
