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

# Zero-shot prompts per progression class (BioViL-T, TILA: several phrasings per class, their
# scores averaged), in the wording of follow-up reports; `{}` is the finding's short term. Written
# once from general radiology usage before any model was scored with them, never tuned.
PROGRESSION_PROMPT_TEMPLATES = {
    "improving": (
        "Improved {}.",
        "Decreased {} compared with the prior study.",
        "Interval improvement of the {}.",
        "The {} has decreased.",
        "Resolving {}.",
    ),
    "stable": (
        "Stable {}.",
        "Unchanged {} compared with the prior study.",
        "No interval change in the {}.",
        "The {} is unchanged.",
        "Persistent {}, similar to the prior study.",
    ),
    "worsening": (
        "Worsening {}.",
        "Increased {} compared with the prior study.",
        "Interval worsening of the {}.",
        "The {} has increased.",
        "New or enlarging {}.",
    ),
}


def progression_prompts(term: str) -> dict[str, list[str]]:
    """The zero-shot prompts of each progression class for one finding (`term`: its short name)."""
    return {
        label: [template.format(term) for template in templates]
        for label, templates in PROGRESSION_PROMPT_TEMPLATES.items()
    }


__all__ = [
    "CHANGE_ATTRIBUTES",
    "CHANGE_LABELS",
    "INVERSE_CHANGE",
    "PROGRESSION_OF_CHANGE",
    "PROGRESSION_PROMPT_TEMPLATES",
    "progression_prompts",
]
