"""Attribute values read from an entity's text: size, number, side, location, grade, margins,
composition, morphology, internal characteristics, associated findings, distribution and
aetiology, and explicit change cues ("increased", "new", "resolved", ...). Shared by report
similarity, comparative VQA and longitudinal labelling so all read a report the same way.

The descriptive dimensions follow the MedReCo paper's comparison aspects (Appendix S1.4, prompt S4:
presence, location, size, morphology, margins, internal characteristics, associated findings,
potential aetiology) and its follow-up attributes (Table S8: anatomical location, spatial
distribution, internal composition, ...). Each value is a canonical word from a fixed vocabulary
below; set-valued dimensions are frozensets (`comparable()` turns them into sorted tuples)."""

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
LOBES = ("right upper lobe", "right middle lobe", "right lower lobe", "left upper lobe", "left lower lobe")
_LOBE = re.compile(r"\b(right|left)\s+(upper|middle|lower)\s+lobe\b", re.I)
GRADE_ORDER = {"trace": 0, "minimal": 0, "small": 1, "mild": 1, "moderate": 2, "large": 3, "severe": 3, "marked": 3}
_GRADE = re.compile(r"\b(" + "|".join(GRADE_ORDER) + r")(?:ly)?\b", re.I)
MARGINS = ("smooth", "lobulated", "spiculated", "irregular", "well-defined", "ill-defined")
# Internal composition (the paper's follow-up attribute; what the finding is made of). It was
# called `density` before; `Attributes.density` still reads it.
COMPOSITIONS = ("solid", "part-solid", "ground-glass", "calcified", "cystic", "fatty")
DENSITIES = COMPOSITIONS  # the old name
_MARGIN = re.compile(r"\b(" + "|".join(MARGINS) + r")\b(?!\s+(?:in\s+)?shape)", re.I)
_COMPOSITION = re.compile(r"(?<![\w-])(" + "|".join(sorted(COMPOSITIONS, key=len, reverse=True)) + r")(?![\w-])", re.I)


def _vocabulary(patterns: dict[str, str]) -> re.Pattern:
    """One alternation with a named group per canonical value (names: the value's index)."""
    return re.compile(
        r"(?<![\w-])(?:" + "|".join(f"(?P<v{i}>{p})" for i, p in enumerate(patterns.values())) + r")(?![\w-])", re.I
    )


# canonical value -> the wordings that say it
MORPHOLOGY_TERMS = {
    "round": r"round|rounded|spherical",
    "oval": r"oval|ovoid",
    "irregular": r"irregularly[ -]shaped|irregular in shape|irregular shape",
    "tubular": r"tubular",
    "wedge-shaped": r"wedge[ -]shaped",
    "nodular": r"nodular(?! opacit)",
    "linear": r"linear|plate[ -]like|band[ -]like|discoid",
}
INTERNAL_TERMS = {
    "homogeneous": r"homogeneous(?:ly)?",
    "heterogeneous": r"heterogeneous(?:ly)?|inhomogeneous(?:ly)?",
    "cavitation": r"cavitation|cavitary|cavitating|cavity|cavities",
    "calcification": r"calcifications?|calcific(?: foci| focus)?",
    "necrosis": r"necrosis|necrotic",
    "fat": r"fat|fat[ -]containing|macroscopic fat",
    "air bronchograms": r"air[ -]bronchograms?",
    "septations": r"septations?|septated",
    "internal vascularity": r"(?:internal|intralesional|central) (?:vascularity|(?:blood )?flow)|hypervascular",
}
ASSOCIATED_TERMS = {
    "oedema": r"(?:surrounding|perilesional|peritumou?ral|perifocal|vasogenic|adjacent) (?:o)?edema",
    "mass effect": r"mass effect",
    "volume loss": r"volume loss|loss of volume",
    "air-fluid level": r"air[ -]fluid levels?",
    "posterior acoustic shadowing": r"(?:posterior )?acoustic shadowing",
    "posterior acoustic enhancement": r"(?:posterior )?acoustic enhancement",
    "halo": r"(?:surrounding )?halo",
    "satellite nodules": r"satellite (?:nodules?|lesions?)",
    "midline shift": r"midline shift",
}
AETIOLOGY_TERMS = {
    "infectious": r"infectious|infective|infection|infected|septic|abscess",
    "neoplastic": r"malignan\w*|neoplas\w*|metasta\w*|tumou?rs?|carcinomas?|lymphomas?|cancer",
    "inflammatory": r"inflammatory|inflammation|reactive",
    "granulomatous": r"granulomas?|granulomatous",
    "post-surgical": r"post-?surgical|post-?operative|surgical|resection",
    "traumatic": r"traumatic|post-?traumatic|trauma|contusion",
    "ischaemic": r"isch(?:a)?emic|isch(?:a)?emia|infarcts?|infarction",
    "degenerative": r"degenerative|degeneration",
    "benign": r"benign",
}
DISTRIBUTION_TERMS = {
    "focal": r"focal",
    "multifocal": r"multifocal|scattered",
    "patchy": r"patchy",
    "segmental": r"segmental",
    "lobar": r"lobar",
    "diffuse": r"diffuse|diffusely",
}
# Location finer than the side (lobes are read by `_LOBE`): zones, depth, segments.
LOCATION_TERMS = {
    "upper zone": r"upper zones?|apical|apices|apex",
    "mid zone": r"mid(?:dle)?[ -]zones?",
    "lower zone": r"lower zones?|basal|bases|base|basilar",
    # not "central necrosis", "peripheral enhancement": those describe the inside of the finding
    "central": r"central(?! (?:cavitation|necrosis|vascularity|flow|calcification|enhancement))|perihilar|parahilar",
    "peripheral": r"peripheral(?! (?:rim|enhancement|calcification|vascularity|flow))|subpleural",
    "lingula": r"lingula|lingular",
}
_MORPHOLOGY, _INTERNAL, _ASSOCIATED, _AETIOLOGY, _DISTRIBUTION, _LOCATION = map(
    _vocabulary,
    (MORPHOLOGY_TERMS, INTERNAL_TERMS, ASSOCIATED_TERMS, AETIOLOGY_TERMS, DISTRIBUTION_TERMS, LOCATION_TERMS),
)
# a value is not stated when a negation stands before it in its clause ("without mass effect")
_NEGATED = re.compile(r"\b(?:no|not|without|negative for|absence of|free of)\b(?:\s+[\w-]+){0,3}\s*$", re.I)
# Checked in this order: "stable" wording wins over descriptive words such as "enlarged heart".
CHANGE_CUES = {
    "stable": r"unchanged|stable|no (?:significant |interval )?change|not significantly changed|similar",
    "new": r"\bnew\b|newly",
    "resolved": r"resolved|resolution|no longer (?:seen|present|visible)",
    "increased": r"increas\w*|interval enlargement|worse\w*|progress\w*|larger",
    "decreased": r"decreas\w*|smaller|improv\w*|regress\w*|reduc\w*",
}
_CUES = {label: re.compile(pattern, re.I) for label, pattern in CHANGE_CUES.items()}


def _stated(pattern: re.Pattern, vocabulary: dict[str, str], text: str) -> list[str]:
    """The canonical values `text` states, in order of appearance, negated mentions left out."""
    values = list(vocabulary)
    found = []
    for match in pattern.finditer(text):
        clause = re.split(r"[,;:.]", text[: match.start()])[-1]
        if _NEGATED.search(clause):
            continue
        value = values[int(match.lastgroup[1:])]
        if value not in found:
            found.append(value)
    return found


@dataclass(frozen=True)
class Attributes:
    """The attribute values a text states (None or empty where it states none). Frozen: a statement's
    attributes are read once and shared by every reader; `dataclasses.replace` makes a changed copy."""

    size_mm: float | None = None
    number: int | None = None
    side: str | None = None
    # lobes ("right lower lobe"), zones ("lower zone"), depth ("central", "peripheral"), "lingula"
    location: frozenset[str] = field(default_factory=frozenset)
    grade: int | None = None
    margins: str | None = None
    composition: str | None = None
    morphology: str | None = None
    internal: frozenset[str] = field(default_factory=frozenset)
    associated: frozenset[str] = field(default_factory=frozenset)
    distribution: str | None = None
    aetiology: str | None = None
    change_cue: str | None = None

    @property
    def lobes(self) -> frozenset[str]:
        """The lobes among the location terms."""
        return frozenset(term for term in self.location if term.endswith(" lobe"))

    @property
    def density(self) -> str | None:
        """The old name of `composition`."""
        return self.composition

    def comparable(self) -> dict:
        """The attributes that describe the finding itself (not its change), as values whose repr
        and order do not depend on string hashing: sets become sorted tuples (a frozenset's repr
        follows PYTHONHASHSEED, which made statement grouping, and so training, differ per run)."""
        return {
            k: tuple(sorted(v)) if isinstance(v, frozenset) else v
            for k, v in vars(self).items()
            if k != "change_cue" and v not in (None, frozenset())
        }


def location_kind(term: str) -> str:
    """Which granularity a location term belongs to: lobe, zone, depth or segment."""
    if term.endswith(" lobe") or term == "lingula":
        return "lobe"
    if term.endswith(" zone"):
        return "zone"
    return "depth" if term in ("central", "peripheral") else "segment"


def location_phrases(x: Attributes, y: Attributes) -> tuple[str, str, str] | None:
    """The two findings' locations at the finest granularity both texts state, as phrases, and
    the granularity ("lobe", "zone", "depth" or "side"); None when they share none. Findings on
    one side compared with bilateral ones are a distribution question, not a location one."""
    for kind in ("lobe", "zone", "depth"):
        u = sorted(t for t in x.location if location_kind(t) == kind)
        v = sorted(t for t in y.location if location_kind(t) == kind)
        if u and v:
            if kind == "lobe":
                return " and ".join(u), " and ".join(v), kind
            return (
                " ".join(filter(None, (x.side, " and ".join(u)))),
                " ".join(filter(None, (y.side, " and ".join(v)))),
                kind,
            )
    if x.side and y.side:
        return x.side, y.side, "side"
    return None


_PRIOR_STATE = re.compile(r"\bfrom\b|\bpreviously\b|\bprior study showed\b|\bwhere the prior\b", re.I)


def read_attributes(text: str) -> Attributes:
    """Attribute values of the current state described by `text` (values after "from ..." are
    the prior state and are ignored)."""
    return _read(_PRIOR_STATE.split(text, maxsplit=1)[0], text)


def read_stated_prior(text: str) -> Attributes:
    """Attribute values `text` gives the prior state ("now part-solid where the prior study
    showed solid composition", "previously focal"): what follows the first prior-state cue."""
    parts = _PRIOR_STATE.split(text, maxsplit=1)
    return _read(parts[1] if len(parts) > 1 else "", "")


NOTHING_STATED = Attributes()


def read_states(text: str) -> tuple[Attributes, Attributes]:
    """`read_attributes(text)` and `read_stated_prior(text)` from one reading of the text."""
    if not text:
        return NOTHING_STATED, NOTHING_STATED
    parts = _PRIOR_STATE.split(text, maxsplit=1)
    return _read(parts[0], text), (_read(parts[1], "") if len(parts) > 1 else NOTHING_STATED)


def _read(current: str, text: str) -> Attributes:
    values: dict = {}
    sizes = [float(v) * (10.0 if unit.lower() == "cm" else 1.0) for v, unit in _SIZE.findall(current)]
    if sizes:
        values["size_mm"] = max(sizes)
    if match := _COUNT.search(current):
        word = match.group(1).lower()
        values["number"] = int(word) if word.isdigit() else _NUMBER_WORDS[word]
    sides = {s.lower() for s in _SIDE.findall(current)}
    if "bilateral" in sides or "both" in sides or {"right", "left"} <= sides:
        values["side"] = "bilateral"
    elif sides:
        values["side"] = sides.pop()
    lobes = {f"{a.lower()} {b.lower()} lobe" for a, b in _LOBE.findall(current)}
    values["location"] = frozenset(lobes | set(_stated(_LOCATION, LOCATION_TERMS, current)))
    grades = [GRADE_ORDER[g.lower()] for g in _GRADE.findall(current)]
    if grades:
        values["grade"] = max(grades)
    if match := _MARGIN.search(current):
        values["margins"] = match.group(1).lower()
    if match := _COMPOSITION.search(current):
        values["composition"] = match.group(1).lower()
    for name, pattern, vocabulary in (
        ("morphology", _MORPHOLOGY, MORPHOLOGY_TERMS),
        ("distribution", _DISTRIBUTION, DISTRIBUTION_TERMS),
        ("aetiology", _AETIOLOGY, AETIOLOGY_TERMS),
    ):
        stated = _stated(pattern, vocabulary, current)
        values[name] = stated[0] if stated else None
    values["internal"] = frozenset(_stated(_INTERNAL, INTERNAL_TERMS, current))
    values["associated"] = frozenset(_stated(_ASSOCIATED, ASSOCIATED_TERMS, current))
    values["change_cue"] = next((label for label, pattern in _CUES.items() if pattern.search(text)), None)
    return Attributes(**values)


__all__ = [
    "AETIOLOGY_TERMS",
    "ASSOCIATED_TERMS",
    "CHANGE_CUES",
    "COMPOSITIONS",
    "DISTRIBUTION_TERMS",
    "GRADE_ORDER",
    "INTERNAL_TERMS",
    "LOBES",
    "LOCATION_TERMS",
    "MARGINS",
    "MORPHOLOGY_TERMS",
    "NOTHING_STATED",
    "Attributes",
    "location_kind",
    "location_phrases",
    "read_attributes",
    "read_stated_prior",
    "read_states",
]
