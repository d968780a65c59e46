"""Reading reports: the entity vocabulary (ontology), decomposition of a report into entity
statements (rules or an LLM), and the attributes a statement gives (grade, side, size)."""

from typing import TYPE_CHECKING

from ...lazy import lazy_exports

if TYPE_CHECKING:
    from .decomposition import QuestionEntityFinder, RuleBasedDecomposer
    from .ontology import Entity, Ontology, entity_prompts
    from .statement import MentionStatus, ReportDecomposition

__getattr__, __dir__ = lazy_exports(__name__, __file__)

__all__ = [
    "Entity",
    "MentionStatus",
    "Ontology",
    "QuestionEntityFinder",
    "ReportDecomposition",
    "RuleBasedDecomposer",
    "entity_prompts",
]
