"""A closed question's swapped twin: the same question about its two images in the other order.

Swapping the images keeps a question's text and options; the correct answer becomes the inverse of
the original one ("Case A only" <-> "Case B only", "Larger in Case B" <-> "Smaller in Case B",
"Smooth in Case A, spiculated in Case B" <-> "Spiculated in Case A, smooth in Case B", a change
"new" <-> "resolved", "increased" <-> "decreased"); symmetric answers ("Both cases", "Similar in
both", "Round in both", "The same side", "stable") are their own inverse, and "Absent in Case B" has
none. Stage 2 can train on twins (`Stage2Config.swapped_twin_share`) and the evaluation asks them
(`evaluation.swap`)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..reports.change import INVERSE_CHANGE
from .questions import LETTERS
from .vqa import CHANGE_OPTIONS, change_sentence

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


def row_inverse(row: dict, option: str) -> str | None:
    """The option that answers `row` with its images swapped when `option` answered it before."""
    return inverse_option(option, list(row["options"]), row.get("labels"), row.get("dimension"))


def _answer_text(row: dict) -> str:
    return row["options"][LETTERS.index(row["answer"])]


def true_inverse(row: dict) -> str | None:
    """The option that answers `row` once its images are swapped (None when none does)."""
    return row_inverse(row, _answer_text(row))


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
    inverse = true_inverse(row)
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


__all__ = ["CHANGE_INVERSES", "DEFAULT_LABELS", "inverse_option", "row_inverse", "swapped_row", "true_inverse"]
