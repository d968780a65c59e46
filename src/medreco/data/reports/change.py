"""The interval-change labels of a same-patient (prior, current) pair, per finding (MedReCo section 4.4
and Table S8), and the inverse of each: the label of the pair read in the other order. One vocabulary
for the miner that reads changes from reports and the synthetic cohort that draws them."""

CHANGE_LABELS = ("new", "resolved", "increased", "decreased", "stable", "qualitatively changed", "unable to compare")
INVERSE_CHANGE = {
    "new": "resolved",
    "resolved": "new",
    "increased": "decreased",
    "decreased": "increased",
    "stable": "stable",
    "qualitatively changed": "qualitatively changed",
    "unable to compare": "unable to compare",
}
# the `attribute` column's values, in the order they are checked after presence
CHANGE_ATTRIBUTES = (
    "presence",
    "size",
    "number",
    "severity",
    "margins",
    "composition",
    "distribution",
    "location",
    "morphology",
    "overall",
)

# The progression class (BioViL-T's and TILA's improving / stable / worsening) of a change in a
# finding; a qualitative change has no direction and is left out, like "unable to compare".
PROGRESSION_OF_CHANGE = {
    "new": "worsening",
    "increased": "worsening",
    "stable": "stable",
    "decreased": "improving",
    "resolved": "improving",
}

__all__ = ["CHANGE_ATTRIBUTES", "CHANGE_LABELS", "INVERSE_CHANGE", "PROGRESSION_OF_CHANGE"]
