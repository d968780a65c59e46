"""What a decomposed report says: one statement per entity (its mention status, the sentences about
it and the attribute values they state), and the interface every decomposition backend implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import Enum

from ...errors import MedReCoError
from .attributes import Attributes, read_states
from .ontology import Entity, Ontology


class MentionStatus(str, Enum):
    POSITIVE = "positive"
    NEGATIVE = "negative"
    UNCERTAIN = "uncertain"
    NOT_MENTIONED = "not mentioned"


class EmptyReportError(MedReCoError, ValueError):
    """A report with no text to decompose."""


@dataclass
class EntityStatement:
    """One entity's statement. `attributes` (the current state's values) and `prior_attributes` (what
    the text says of the prior study: "increased from 12 mm") are read from the sentences once, when
    the statement is made, so comparing statements never reads a text again; the sentences are not
    changed afterwards."""

    entity_id: str
    status: MentionStatus = MentionStatus.NOT_MENTIONED
    sentences: list[str] = field(default_factory=list)
    attributes: Attributes = field(init=False, repr=False, compare=False)
    prior_attributes: Attributes = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        self.attributes, self.prior_attributes = read_states(self.text)

    @property
    def text(self) -> str:
        """The entity-specific text (empty when not mentioned)."""
        return " ".join(self.sentences)


@dataclass
class ReportDecomposition:
    family: str
    sections: dict[str, str]
    statements: dict[str, EntityStatement]

    def status(self, entity_id: str) -> MentionStatus:
        statement = self.statements.get(entity_id)
        return statement.status if statement else MentionStatus.NOT_MENTIONED

    def mentioned(self) -> dict[str, EntityStatement]:
        return {k: v for k, v in self.statements.items() if v.status is not MentionStatus.NOT_MENTIONED}


class ReportDecomposer(ABC):
    """One interface, several backends (rule-based offline; LLM-based)."""

    def __init__(self, ontology: Ontology | None = None):
        self.ontology = ontology or Ontology.load()

    @abstractmethod
    def decompose(self, report: str, modality: str, entities: list[Entity] | None = None) -> ReportDecomposition:
        """Statements for `entities` (default: every entity of the modality's family)."""


def aggregate_status(statuses: list[MentionStatus]) -> MentionStatus:
    """A report's verdict on an entity: positive if any mention is, else uncertain, else negative."""
    for status in (MentionStatus.POSITIVE, MentionStatus.UNCERTAIN, MentionStatus.NEGATIVE):
        if status in statuses:
            return status
    return MentionStatus.NOT_MENTIONED


__all__ = [
    "EmptyReportError",
    "EntityStatement",
    "MentionStatus",
    "ReportDecomposer",
    "ReportDecomposition",
    "aggregate_status",
]
