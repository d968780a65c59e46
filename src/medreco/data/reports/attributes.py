"""Attribute values read from an entity's text: size, number, side, lobe, grade, margins, density,
and explicit change cues ("increased", "new", "resolved", ...). Shared by report similarity and
longitudinal labelling so both read a report the same way."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "several": 3, "multiple": 3, "innumerable": 10}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*-?\s*(mm|cm)\b", re.I)
_COUNT = re.compile(
    r"\b(\d+|one|two|three|four|five|several|multiple|innumerable)\s+(?:\w+\s+){0,2}(?:nodules|nodes|lesions|masses|opacities)\b",
    re.I,
)
_SIDE = re.compile(r"\b(bilateral|both|right|left)\b", re.I)
_LOBE = re.compile(r"\b(right|left)\s+(upper|middle|lower)\s+lobe\b", re.I)
GRADE_ORDER = {"trace": 0, "minimal": 0, "small": 1, "mild": 1, "moderate": 2, "large": 3, "severe": 3, "marked": 3}
_GRADE = re.compile(r"\b(" + "|".join(GRADE_ORDER) + r")(?:ly)?\b", re.I)
MARGINS = ("smooth", "lobulated", "spiculated", "irregular", "well-defined", "ill-defined")
DENSITIES = ("solid", "part-solid", "ground-glass", "calcified", "cystic")
_MARGIN = re.compile(r"\b(" + "|".join(MARGINS) + r")\b", re.I)
_DENSITY = re.compile(r"(?<![\w-])(" + "|".join(sorted(DENSITIES, key=len, reverse=True)) + r")(?![\w-])", re.I)
# Checked in this order: "stable" wording wins over descriptive words such as "enlarged heart".
CHANGE_CUES = {
    "stable": r"unchanged|stable|no (?:significant |interval )?change|not significantly changed|similar",
    "new": r"\bnew\b|newly",
    "resolved": r"resolved|resolution|no longer (?:seen|present|visible)",
    "increased": r"increas\w*|interval enlargement|worse\w*|progress\w*|larger",
    "decreased": r"decreas\w*|smaller|improv\w*|regress\w*|reduc\w*",
}
_CUES = {label: re.compile(pattern, re.I) for label, pattern in CHANGE_CUES.items()}


@dataclass
class Attributes:
    size_mm: float | None = None
    number: int | None = None
    side: str | None = None
    lobes: frozenset[str] = field(default_factory=frozenset)
    grade: int | None = None
    margins: str | None = None
    density: str | None = None
    change_cue: str | None = None

    def comparable(self) -> dict:
        """The attributes that describe the finding itself (not its change), as values whose repr
        and order do not depend on string hashing: sets become sorted tuples (a frozenset's repr
        follows PYTHONHASHSEED, which made statement grouping, and so training, differ per run)."""
        return {
            k: tuple(sorted(v)) if isinstance(v, frozenset) else v
            for k, v in vars(self).items()
            if k != "change_cue" and v not in (None, frozenset())
        }


def read_attributes(text: str) -> Attributes:
    """Attribute values of the current state described by `text` (values after "from ..." are
    the prior state and are ignored)."""
    current = re.split(
        r"\bfrom\b|\bpreviously\b|\bprior study showed\b|\bwhere the prior\b", text, maxsplit=1, flags=re.I
    )[0]
    attributes = Attributes()
    sizes = [float(v) * (10.0 if unit.lower() == "cm" else 1.0) for v, unit in _SIZE.findall(current)]
    if sizes:
        attributes.size_mm = max(sizes)
    if match := _COUNT.search(current):
        word = match.group(1).lower()
        attributes.number = int(word) if word.isdigit() else _NUMBER_WORDS[word]
    sides = {s.lower() for s in _SIDE.findall(current)}
    if "bilateral" in sides or "both" in sides or {"right", "left"} <= sides:
        attributes.side = "bilateral"
    elif sides:
        attributes.side = sides.pop()
    attributes.lobes = frozenset(f"{a.lower()} {b.lower()} lobe" for a, b in _LOBE.findall(current))
    grades = [GRADE_ORDER[g.lower()] for g in _GRADE.findall(current)]
    if grades:
        attributes.grade = max(grades)
    if match := _MARGIN.search(current):
        attributes.margins = match.group(1).lower()
    if match := _DENSITY.search(current):
        attributes.density = match.group(1).lower()
    for label, pattern in _CUES.items():
        if pattern.search(text):
            attributes.change_cue = label
            break
    return attributes


__all__ = ["CHANGE_CUES", "GRADE_ORDER", "Attributes", "read_attributes"]
