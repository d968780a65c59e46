"""Swap consistency: does the model tell which image is which?

Showing a closed question's two images in the other order keeps its text and options; the correct
answer becomes the inverse of the original one ("Case A only" <-> "Case B only", "Larger in Case B"
<-> "Smaller in Case B", "Smooth in Case A, spiculated in Case B" <-> "Spiculated in Case A, smooth in
Case B", a change "new" <-> "resolved", "increased" <-> "decreased"); symmetric answers ("Both
cases", "Similar in both", "Round in both", "The same side", "stable") are their own inverse, and
"Absent in Case B" has none. A model that reads the images answers the swapped question with the
inverse of its first answer. The headline, `order_dependent`, is taken over questions whose true
answer is not its own inverse: the share where the model's second answer is the inverse of its
first and differs from it. A model that ignores the images (a blind VLM, a text-only model) gives
one answer to both orders and scores 0 there, and so does one that always answers "Both cases"."""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Sequence

from ..data.mining.vqa import CHANGE_OPTIONS, LETTERS, change_sentence
from ..data.reports.change import INVERSE_CHANGE
from .metrics import clustered_mean, clustered_paired_test, mcnemar_test, wilson_interval
from .vqa import CLOSED_SCORING, closed_predictions, question_cluster

logger = logging.getLogger(__name__)

DEFAULT_LABELS = ("Case A", "Case B")
CHANGE_INVERSES = {label: INVERSE_CHANGE[label] for label in CHANGE_OPTIONS}  # the options of a change question
COMPARATIVE_INVERSES = {"larger": "smaller", "smaller": "larger", "more numerous": "fewer", "fewer": "more numerous"}
SELF_INVERSE = ("both cases", "neither case")
_CHANGE_QUESTION = re.compile(r"^How has the (.+) changed from the prior to the current study\?$")


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _uncap(text: str) -> str:
    return text[:1].lower() + text[1:]


def _inverse_text(option: str, labels: Sequence[str], dimension: str | None) -> str | None:
    """The wording of `option`'s inverse under swapped images, or None when it has none."""
    text, (la, lb) = option.strip(), labels
    low = text.lower()
    if dimension == "change":
        return CHANGE_INVERSES.get(low)
    if low in SELF_INVERSE or low.endswith(" in both") or re.fullmatch(r"the same \w+", low):
        return text
    for first, second in ((la, lb), (lb, la)):
        if low == f"{first} only".lower():
            return f"{second} only"
    quoted = "|".join(map(re.escape, (la, lb)))
    comparative = re.fullmatch(rf"(larger|smaller|more numerous|fewer) in ({quoted})", text, re.I)
    if comparative:
        return f"{_cap(COMPARATIVE_INVERSES[comparative[1].lower()])} in {comparative[2]}"
    categorical = re.fullmatch(rf"(.+?) in ({quoted}), (.+) in ({quoted})", text)
    if categorical and categorical[2] != categorical[4]:
        u, first, v, second = categorical.groups()
        return f"{_cap(v)} in {first}, {_uncap(u)} in {second}"
    return None  # "Absent in Case B", or a wording no rule knows


def inverse_option(
    option: str, options: Sequence[str], labels: Sequence[str] | None = None, dimension: str | None = None
) -> str | None:
    """The option among `options` that answers the question once its two images are swapped, when
    `option` answered it before (itself for a symmetric answer); None when no option is the inverse.
    `labels`: the row's case labels (default "Case A", "Case B"); `dimension` "change" reads the
    options as interval-change labels."""
    wanted = _inverse_text(option, tuple(labels or DEFAULT_LABELS), dimension)
    if wanted is None:
        return None
    if wanted in options:
        return wanted
    # capitalisation may differ (a value that starts with a capital, an option typed by hand)
    return next((o for o in options if o.strip().casefold() == wanted.casefold()), None)


def _row_inverse(row: dict, option: str) -> str | None:
    return inverse_option(option, list(row["options"]), row.get("labels"), row.get("dimension"))


def _answer_text(row: dict) -> str:
    return row["options"][LETTERS.index(row["answer"])]


def _true_inverse(row: dict) -> str | None:
    """The option that answers `row` once its images are swapped (None when none does)."""
    return _row_inverse(row, _answer_text(row))


def _flip_labels(text: str, labels: Sequence[str]) -> str:
    la, lb = labels
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, (la, lb))) + r")\b")
    return pattern.sub(lambda m: lb if m.group() == la else la, text)


def _swapped_open_answer(row: dict, labels: Sequence[str]):
    """The reference open answer once the images are swapped: the case labels exchanged, a change
    row's sentence written for the inverse change (None unless the row has the template's question
    wording and its change `attribute`, as a column or in `meta`)."""
    answer = row.get("open_answer")
    if not isinstance(answer, str):
        return answer
    if row.get("dimension") != "change":
        return _flip_labels(answer, labels)
    noun = _CHANGE_QUESTION.match(row["question"])
    label = CHANGE_INVERSES.get(_answer_text(row).lower())
    attribute = row.get("attribute") or (row.get("meta") or {}).get("attribute")  # a mined VQASample's meta
    if noun is None or label is None or attribute is None:
        return None
    return change_sentence(noun[1], label, str(attribute))


def swapped_row(row: dict) -> dict | None:
    """`row` with its two studies exchanged (question and options unchanged) and `answer` the letter
    of the true answer's inverse; None when no option is that inverse. Other columns are copied, a
    change row's `label` is inverted, the reference open answer is rewritten to match, and
    `swapped_of` names the original (study_a, study_b, answer); swapping back removes it."""
    options = list(row["options"])
    labels = tuple(row.get("labels") or DEFAULT_LABELS)
    inverse = _true_inverse(row)
    if inverse is None:
        return None
    swapped = {
        **row,
        "study_a": row["study_b"],
        "study_b": row["study_a"],
        "answer": LETTERS[options.index(inverse)],
        "open_answer": _swapped_open_answer(row, labels),
        "swapped_of": {"study_a": row["study_a"], "study_b": row["study_b"], "answer": row["answer"]},
    }
    if "open_answer" not in row:
        del swapped["open_answer"]
    if row.get("dimension") == "change" and row.get("label") in CHANGE_INVERSES:
        swapped["label"] = CHANGE_INVERSES[row["label"]]
    back = row.get("swapped_of")
    if back == {key: swapped[key] for key in ("study_a", "study_b", "answer")}:
        del swapped["swapped_of"]  # swapped back: the original row again
    return swapped


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
    true_inverse, chosen_inverse = _row_inverse(row, truth), _row_inverse(row, first)
    consistent = chosen_inverse is not None and chosen_inverse == second
    return {
        "consistent": consistent,
        "asymmetric": true_inverse != truth,
        "order_dependent": consistent and second != first,
        "correct": first == truth,
        "correct_swapped": second == true_inverse,
    }


def swap_consistency(
    rows: Sequence[dict],
    predicted: Sequence[str | None],
    predicted_swapped: Sequence[str | None],
    studies: dict | None = None,
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
    (the order-dependent rows' patients), for comparing two systems (`swap_comparison`)."""
    if not len(rows) == len(predicted) == len(predicted_swapped):
        raise ValueError(f"{len(rows)} rows, {len(predicted)} predictions, {len(predicted_swapped)} swapped ones")
    verdicts: dict[int, dict] = {}
    for i, (row, chosen, chosen_swapped) in enumerate(zip(rows, predicted, predicted_swapped, strict=True)):
        if chosen is not None and chosen_swapped is not None and _true_inverse(row) is not None:
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
    model, processor, rows: Sequence[dict], studies: dict, progress: bool = False, scoring: str = CLOSED_SCORING[0]
) -> dict:
    """Swap consistency of a VLM under one `scoring`: it answers every row whose true answer has an
    inverse among its options in both image orders (`closed_predictions`), and the letters are judged
    by `swap_consistency`. Also returns `scoring` and the per-row letters, aligned with `rows`
    (`predicted`, `predicted_swapped`; None for a row without a swapped twin)."""
    rows = list(rows)
    twins = [swapped_row(row) for row in rows]
    eligible = [i for i, twin in enumerate(twins) if twin is not None]
    logger.info("swap consistency: %d of %d questions have a swapped twin", len(eligible), len(rows))
    predicted: list[str | None] = [None] * len(rows)
    predicted_swapped: list[str | None] = [None] * len(rows)
    if eligible:
        scorings = (scoring,)
        first = closed_predictions(model, processor, [rows[i] for i in eligible], studies, progress, scorings)
        second = closed_predictions(model, processor, [twins[i] for i in eligible], studies, progress, scorings)
        for i, letter, swapped_letter in zip(eligible, first[scoring], second[scoring], strict=True):
            predicted[i], predicted_swapped[i] = letter, swapped_letter
    return {
        **swap_consistency(rows, predicted, predicted_swapped, studies),
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
