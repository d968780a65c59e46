"""Reading reports: the entity vocabulary (ontology), decomposition of a report into entity
statements (rules or an LLM), and the attributes a statement gives (grade, side, size)."""

from .decomposition import QuestionEntityFinder, RuleBasedDecomposer
from .ontology import Entity, Ontology, entity_prompts
from .statement import MentionStatus, ReportDecomposition

__all__ = [
    "Entity",
    "MentionStatus",
    "Ontology",
    "QuestionEntityFinder",
    "ReportDecomposition",
    "RuleBasedDecomposer",
    "entity_prompts",
]
