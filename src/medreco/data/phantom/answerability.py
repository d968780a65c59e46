"""What the synthetic images show: for every modality, vocabulary entity and question dimension,
whether an image answers the question or only the report does, and why not.

The renderer draws each finding's presence, location, size (or grade) and number, and a lung
nodule's margins and density; the reports also state descriptive attributes (morphology, internal
characteristics, associated findings, distribution, aetiology) and mention entities (fillers such
as "No pneumothorax", the cavity or air bronchograms named inside a sentence) that no image varies.
A question about those is answered by the report alone. The cohort writes this table as
`answerability.json` beside its manifest; mining copies it into each question
(`image_answerable`, `answerability_reason`), and the evaluation scores the two kinds apart.
A real archive has no such file: nothing is known there, and the metrics say so.

File format (`ANSWERABILITY_FORMAT`): {"format": 1, "modalities": {modality: {entity_id:
{dimension: reason}}}}, with "" for a dimension an image shows; an entity or dimension absent from
its modality's table is report-only with the reason `NOT_DRAWN`. Dimensions are those of
`mining.questions` plus `change:<attribute>` for interval-change questions."""

from __future__ import annotations

from ..reports.ontology import Ontology
from .families import FAMILIES
from .findings import finding_types_for

ANSWERABILITY_FILE = "answerability.json"
ANSWERABILITY_FORMAT = 1
NOT_DRAWN = "the phantom draws no such finding; only reports mention it"
DESCRIPTIVE = "the phantom does not draw this attribute; only the report states it"
# what every finding's rendering varies with, and what a lung nodule's adds
DRAWN_DIMENSIONS = ("presence", "location", "size", "number")
DRAWN_EXTRA = {"lung_nodule": ("margins", "composition")}
QUESTION_DIMENSIONS = (
    "presence",
    "location",
    "size",
    "number",
    "margins",
    "composition",
    "morphology",
    "internal characteristics",
    "associated findings",
    "distribution",
    "aetiology",
)
# an interval change's attribute -> the dimension whose drawing shows it; "overall" (stable) is shown
# when the finding's presence and size are; a "composition" change may be a cavitation (not drawn)
CHANGE_ATTRIBUTES = {
    "presence": ("presence",),
    "size": ("size",),
    "severity": ("size",),
    "number": ("number",),
    "location": ("location",),
    "margins": ("margins",),
    "distribution": ("distribution",),
    "morphology": ("morphology",),
    "overall": ("presence", "size"),
}
CHANGE_REPORT_ONLY = {
    ("lung_nodule", "composition"): "the change may be a cavitation, which the phantom does not draw",
    ("consolidation", "composition"): "the change may be a cavitation, which the phantom does not draw",
}


def drawn_dimensions(key: str) -> tuple[str, ...]:
    """The question dimensions a finding type's rendering varies with."""
    return DRAWN_DIMENSIONS + DRAWN_EXTRA.get(key, ())


def _finding_table(key: str) -> dict[str, str]:
    drawn = drawn_dimensions(key)
    table = {d: "" if d in drawn else DESCRIPTIVE for d in QUESTION_DIMENSIONS}
    for attribute, needs in CHANGE_ATTRIBUTES.items():
        table[f"change:{attribute}"] = "" if all(d in drawn for d in needs) else DESCRIPTIVE
    table["change:composition"] = CHANGE_REPORT_ONLY.get((key, "composition")) or table["composition"]
    return table


def _merged(tables: list[dict[str, str]]) -> dict[str, str]:
    """An anatomical structure's table: a dimension is shown when every finding of the structure shows it."""
    return {d: next((t[d] for t in tables if t[d]), "") for d in tables[0]}


def answerability_table(modalities, ontology: Ontology | None = None) -> dict:
    """The `answerability.json` content for a cohort of `modalities`: each finding type's vocabulary
    entity, and the anatomical structure it lies in, with the dimensions its images show."""
    ontology = ontology or Ontology.load()
    result: dict = {"format": ANSWERABILITY_FORMAT, "not_listed": NOT_DRAWN, "modalities": {}}
    for modality in modalities:
        if modality in FAMILIES:
            types = [t for t in FAMILIES[modality].types if modality in t.modalities]
        else:
            types = finding_types_for(modality)
        entities: dict[str, dict[str, str]] = {}
        structures: dict[str, list[dict[str, str]]] = {}
        for finding_type in types:
            entity = ontology.find(finding_type.entity, modality)
            table = _finding_table(finding_type.key)
            entities[entity.id] = table
            structure = ontology.anatomy_of(entity) or ontology.find(finding_type.anatomy, modality)
            if structure.level == "anatomy":
                structures.setdefault(structure.id, []).append(table)
        entities.update({structure: _merged(tables) for structure, tables in structures.items()})
        result["modalities"][modality] = dict(sorted(entities.items()))
    return result


__all__ = [
    "ANSWERABILITY_FILE",
    "ANSWERABILITY_FORMAT",
    "NOT_DRAWN",
    "answerability_table",
    "drawn_dimensions",
]
