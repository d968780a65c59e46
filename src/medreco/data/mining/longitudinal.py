"""Interval-change labels for same-patient prior/current studies, per finding (MedReCo section 4.4;
TAMM's bidirectional consistency check).

A label is read from the two reports' statements about the finding: their mention statuses and
attribute values, and, when attributes are missing, the current report's own change wording. It is
kept only if labelling the pair in reverse order gives the inverse label.

The label is one of the paper's interval-change labels (section 4.4); the `attribute` column says
which follow-up attribute changed (Table S8): presence (new, resolved), size, number, severity
(increased, decreased), and, for qualitative changes, margins, composition (internal composition:
solid -> part-solid, or new internal features such as cavitation), distribution (focal -> patchy,
one side -> both), location (another lobe, zone or side) and morphology (round -> irregular)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from ..reports.attributes import Attributes, location_phrases
from ..reports.change import INVERSE_CHANGE, PROGRESSION_OF_CHANGE
from ..reports.statement import EntityStatement, MentionStatus

SIZE_CHANGE = 1.2  # relative change in size that counts as increased/decreased


@dataclass
class ChangeLabel:
    label: str
    attribute: str  # one of CHANGE_ATTRIBUTES


def _compare_attributes(earlier: Attributes, later: Attributes, later_is_current: bool) -> ChangeLabel:
    for name, attribute in (("size_mm", "size"), ("number", "number"), ("grade", "severity")):
        a, b = getattr(earlier, name), getattr(later, name)
        if a is not None and b is not None and a != b:
            ratio = b / a if a else float("inf")
            threshold = SIZE_CHANGE if name == "size_mm" else 1.0
            if ratio >= threshold and b > a:
                return ChangeLabel("increased", attribute)
            if ratio <= 1 / threshold and b < a:
                return ChangeLabel("decreased", attribute)
    qualitative = _qualitative_change(earlier, later)
    if qualitative is not None:
        return ChangeLabel("qualitatively changed", qualitative)
    # no measurable difference: the later report's wording decides, read in the right direction
    cue = later.change_cue if later_is_current else earlier.change_cue
    if cue in ("increased", "decreased") and (later.comparable() or earlier.comparable()):
        label = cue if later_is_current else INVERSE_CHANGE[cue]
        return ChangeLabel(label, "overall")
    return ChangeLabel("stable", "overall")


def _qualitative_change(earlier: Attributes, later: Attributes) -> str | None:
    """The first follow-up attribute whose stated value differs in both texts (symmetric: the
    reversed pair gives the same answer), else None. Values a text does not state never count."""
    if earlier.margins and later.margins and earlier.margins != later.margins:
        return "margins"
    if earlier.composition and later.composition and earlier.composition != later.composition:
        return "composition"
    if earlier.internal and later.internal and earlier.internal != later.internal:
        return "composition"  # internal composition: e.g. cavitation appears
    if earlier.distribution and later.distribution and earlier.distribution != later.distribution:
        return "distribution"
    sides = {earlier.side, later.side}
    if None not in sides and len(sides) == 2 and "bilateral" in sides:
        return "distribution"  # one side <-> both sides
    where = location_phrases(earlier, later)
    if where is not None and where[0] != where[1]:
        return "location"
    if earlier.morphology and later.morphology and earlier.morphology != later.morphology:
        return "morphology"
    return None


def change_label(earlier: EntityStatement, later: EntityStatement, later_is_current: bool = True) -> ChangeLabel | None:
    """The change from `earlier` to `later` (None when the finding is absent in both).
    `later_is_current` says which report is chronologically the newer one, whose change wording
    ("increased since the prior") is relative to the other."""
    statuses = {earlier.status, later.status}
    if MentionStatus.UNCERTAIN in statuses or MentionStatus.NOT_MENTIONED in statuses:
        return ChangeLabel("unable to compare", "overall")
    present_before = earlier.status is MentionStatus.POSITIVE
    present_after = later.status is MentionStatus.POSITIVE
    if not present_before and not present_after:
        return None
    if present_after and not present_before:
        return ChangeLabel("new", "presence")
    if present_before and not present_after:
        return ChangeLabel("resolved", "presence")
    before, after = earlier.attributes, later.attributes
    # a qualitative value only the newer report gives the prior study ("now part-solid where the prior
    # study showed solid composition", the older report not saying) fills the older one's gap
    if later_is_current:
        before = _filled(before, later.prior_attributes)
    else:
        after = _filled(after, earlier.prior_attributes)
    return _compare_attributes(before, after, later_is_current)


def _filled(older: Attributes, stated: Attributes) -> Attributes:
    """`older` with the qualitative values it does not state taken from `stated`, what the newer
    report says of the prior study (a copy: a statement's own attributes are never changed)."""
    gaps = {
        name: getattr(stated, name)
        for name in ("margins", "composition", "distribution", "morphology")
        if getattr(older, name) is None and getattr(stated, name) is not None
    }
    return replace(older, **gaps) if gaps else older


def consistent_change_label(prior: EntityStatement, current: EntityStatement) -> ChangeLabel | None:
    """The prior->current label if it passes the bidirectional check, else None."""
    forward = change_label(prior, current, later_is_current=True)
    backward = change_label(current, prior, later_is_current=False)
    if forward is None or backward is None or forward.label == "unable to compare":
        return None
    return forward if INVERSE_CHANGE[forward.label] == backward.label else None


@dataclass(frozen=True)
class ProgressionPair:
    """One finding's progression between a patient's prior and current study (a `longitudinal` row
    whose change has a direction): `progression` is improving, stable or worsening;
    `image_answerable` is None where nothing is known of what the images show (real archives)."""

    prior: str
    current: str
    patient_id: str
    entity_id: str
    progression: str
    image_answerable: bool | None = None


def progression_pairs(rows: Iterable[dict], levels: Iterable[str] = ("abnormal", "disease")) -> list[ProgressionPair]:
    """The rows of a `longitudinal` table that a progression classifier learns from: findings of
    the given entity levels (the id's second part: `ct/abnormal/...`), with a directional change
    (`PROGRESSION_OF_CHANGE`), each (prior, current, finding) once."""
    levels = set(levels)
    pairs: dict[tuple[str, str, str], ProgressionPair] = {}
    for row in rows:
        progression = PROGRESSION_OF_CHANGE.get(row["label"])
        parts = row["entity_id"].split("/")
        if progression is None or len(parts) < 2 or parts[1] not in levels:
            continue
        answerable = row.get("image_answerable")
        pairs.setdefault(
            (row["prior"], row["current"], row["entity_id"]),
            ProgressionPair(row["prior"], row["current"], row["patient_id"], row["entity_id"], progression, answerable),
        )
    return list(pairs.values())


INVERSE_TREND = {"improving": "worsening", "stable": "stable", "worsening": "improving"}


@dataclass(frozen=True)
class StudyTrend:
    """TAMM's supervision for one pair of adjacent studies: the patient's overall `trend`
    (improving / stable / worsening) and its rationale, the clinical evidence in the reports'
    words: `rationale` the later report's sentences about the findings behind the trend (what the
    current study shows), `counter_rationale` the earlier report's sentences about them (what the
    prior showed: the text the pair read backwards is conditioned on)."""

    prior: str
    current: str
    patient_id: str
    trend: str
    findings: tuple[str, ...]
    rationale: str
    counter_rationale: str

    def reversed(self) -> StudyTrend:
        """The pair read backwards: the inverse trend, the two rationales exchanged."""
        return replace(
            self,
            prior=self.current,
            current=self.prior,
            trend=INVERSE_TREND[self.trend],
            rationale=self.counter_rationale,
            counter_rationale=self.rationale,
        )


def pair_trend(progressions: Iterable[str]) -> str | None:
    """A pair's overall trend from its findings' progressions: worsening when some finding worsens and
    none improves, improving when the reverse, stable when every finding is stable, None (left out,
    as TAMM leaves out what its consistency check cannot settle) when findings move both ways. The
    findings' labels passed the bidirectional check, so the trend of the reversed pair is the inverse."""
    seen = set(progressions)
    if not seen or {"improving", "worsening"} <= seen:
        return None
    return "worsening" if "worsening" in seen else "improving" if "improving" in seen else "stable"


def study_trends(
    rows: Iterable[dict],
    statements: Callable[[str], Mapping[str, Mapping]],
    levels: Iterable[str] = ("abnormal", "disease"),
) -> list[StudyTrend]:
    """One `StudyTrend` per (prior, current) pair of a `longitudinal` table whose findings (of
    `levels`) settle a trend; `statements(study_id)` gives a study's mined statements (the
    rationales' sentences)."""
    by_pair: dict[tuple[str, str], list[ProgressionPair]] = {}
    for pair in progression_pairs(rows, levels):
        by_pair.setdefault((pair.prior, pair.current), []).append(pair)
    trends = []
    for (prior, current), pairs in sorted(by_pair.items()):
        trend = pair_trend(p.progression for p in pairs)
        if trend is None:
            continue
        evidence = sorted(p.entity_id for p in pairs if trend == "stable" or p.progression == trend)
        rationale, counter = (_sentences(statements(study), evidence) for study in (current, prior))
        trends.append(StudyTrend(prior, current, pairs[0].patient_id, trend, tuple(evidence), rationale, counter))
    return trends


def _sentences(statements: Mapping[str, Mapping], entities: Iterable[str]) -> str:
    return " ".join(s for e in entities for s in statements.get(e, {}).get("sentences", [])).strip()


__all__ = [
    "ChangeLabel",
    "INVERSE_TREND",
    "ProgressionPair",
    "StudyTrend",
    "change_label",
    "consistent_change_label",
    "pair_trend",
    "progression_pairs",
    "study_trends",
]
