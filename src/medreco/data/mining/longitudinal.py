"""Interval-change labels for same-patient prior/current studies, per finding (MedReCo section 4.4;
TAMM's bidirectional consistency check).

A label is read from the two reports' statements about the finding: their mention statuses and
attribute values (size, number, grade, margins, density), and, when attributes are missing, the
current report's own change wording. It is kept only if labelling the pair in reverse order gives
the inverse label."""

from __future__ import annotations

from dataclasses import dataclass

from ..reports.attributes import Attributes, read_attributes
from ..reports.decomposition import EntityStatement, MentionStatus

CHANGE_LABELS = ("new", "resolved", "increased", "decreased", "stable", "qualitatively changed", "unable to compare")
INVERSE = {
    "new": "resolved",
    "resolved": "new",
    "increased": "decreased",
    "decreased": "increased",
    "stable": "stable",
    "qualitatively changed": "qualitatively changed",
    "unable to compare": "unable to compare",
}
SIZE_CHANGE = 1.2  # relative change in size that counts as increased/decreased


@dataclass
class ChangeLabel:
    label: str
    attribute: str  # presence, size, number, severity, margins, density, overall


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
    for name in ("margins", "density"):
        a, b = getattr(earlier, name), getattr(later, name)
        if a is not None and b is not None and a != b:
            return ChangeLabel("qualitatively changed", name)
    # no measurable difference: the later report's wording decides, read in the right direction
    cue = later.change_cue if later_is_current else earlier.change_cue
    if cue in ("increased", "decreased") and (later.comparable() or earlier.comparable()):
        label = cue if later_is_current else INVERSE[cue]
        return ChangeLabel(label, "overall")
    return ChangeLabel("stable", "overall")


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
    return _compare_attributes(read_attributes(earlier.text), read_attributes(later.text), later_is_current)


def consistent_change_label(prior: EntityStatement, current: EntityStatement) -> ChangeLabel | None:
    """The prior->current label if it passes the bidirectional check, else None."""
    forward = change_label(prior, current, later_is_current=True)
    backward = change_label(current, prior, later_is_current=False)
    if forward is None or backward is None or forward.label == "unable to compare":
        return None
    return forward if INVERSE[forward.label] == backward.label else None


__all__ = ["CHANGE_LABELS", "INVERSE", "ChangeLabel", "change_label", "consistent_change_label"]
