"""The words rule-based decomposition reads a report by, kept as data in `resources/lexicon.json`
and read once per process: section headings, the phrases that end a trigger's scope, NegEx-style
negation and uncertainty triggers, and the cues that say a structure is abnormal. Each entry is a
regular expression; `sections` and the rule engine compile them."""

from __future__ import annotations

import json
import re
from importlib import resources

LEXICON_FILE = "lexicon.json"


def _read() -> dict:
    packaged = resources.files("medreco.data.reports.resources")
    return json.loads(packaged.joinpath(LEXICON_FILE).read_text(encoding="utf-8"))


def _patterns(group: dict) -> tuple[str, ...]:
    """A group's patterns in their order; an entry is a pattern or {"pattern": ..., "note": ...}."""
    return tuple(entry if isinstance(entry, str) else entry["pattern"] for entry in group["patterns"])


_LEXICON = _read()
# section -> the headings that name it ("Opinion", "Conclusion" name the impression)
SECTION_HEADINGS: dict[str, tuple[str, ...]] = {
    name: tuple(words) for name, words in _LEXICON["section_headings"]["sections"].items()
}
STANDALONE_HEADINGS = _patterns(_LEXICON["standalone_headings"])  # headings also without a colon
EXCEPTIONS = _patterns(_LEXICON["exceptions"])  # "apart from", "except for"
CLAUSE_BREAKS = _patterns(_LEXICON["clause_breaks"])
PSEUDO = _patterns(_LEXICON["pseudo"])
UNCERTAIN_PRE = _patterns(_LEXICON["uncertain_pre"])
UNCERTAIN_POST = _patterns(_LEXICON["uncertain_post"])
UNCERTAIN_NEXT = _patterns(_LEXICON["uncertain_next"])
NEGATIVE_PRE = _patterns(_LEXICON["negative_pre"])
NEGATIVE_ADJACENT = _patterns(_LEXICON["negative_adjacent"])
STRUCTURE_NEGATIVE_ADJACENT = _patterns(_LEXICON["structure_negative_adjacent"])
NEGATIVE_POST = _patterns(_LEXICON["negative_post"])
NEGATIVE_NEXT = _patterns(_LEXICON["negative_next"])
ABNORMAL_CUES = _patterns(_LEXICON["abnormal_cues"])


def alternation(patterns: tuple[str, ...]) -> str:
    """Patterns as one non-capturing group of alternatives, in their order."""
    return "(?:" + "|".join(patterns) + ")"


def trigger_pattern(patterns: tuple[str, ...]) -> re.Pattern:
    """Triggers as one case-insensitive pattern that matches whole words only, the longest first."""
    body = "|".join(f"(?:{p})" for p in sorted(patterns, key=len, reverse=True))
    return re.compile(rf"(?<![\w/-])(?:{body})(?![\w-])", re.I)


__all__ = [
    "ABNORMAL_CUES",
    "CLAUSE_BREAKS",
    "EXCEPTIONS",
    "LEXICON_FILE",
    "NEGATIVE_ADJACENT",
    "NEGATIVE_NEXT",
    "NEGATIVE_POST",
    "NEGATIVE_PRE",
    "PSEUDO",
    "SECTION_HEADINGS",
    "STANDALONE_HEADINGS",
    "STRUCTURE_NEGATIVE_ADJACENT",
    "UNCERTAIN_NEXT",
    "UNCERTAIN_POST",
    "UNCERTAIN_PRE",
    "alternation",
    "trigger_pattern",
]
