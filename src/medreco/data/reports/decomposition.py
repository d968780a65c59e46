"""Report decomposition: a report -> one statement per entity (mention status + the text about it).

The default backend is offline and rule-based: section parsing (findings and impression),
sentence splitting, entity matching by synonyms (longest match wins; the more specific entity wins
a tie), and NegEx-style negation and uncertainty scopes within each clause. Abnormal findings
also inform the statement of the anatomy they sit in."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import Enum

from ...errors import MedReCoError, UnknownEntityError
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
    entity_id: str
    status: MentionStatus = MentionStatus.NOT_MENTIONED
    sentences: list[str] = field(default_factory=list)

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


# ------------------------------------------------------------------------------- rule-based

SECTION_HEADER = re.compile(
    r"^\s*(examination|exam|indication|history|clinical information|technique|comparison|findings|impressions?|"
    r"conclusions?|recommendations?)\s*:",
    re.IGNORECASE | re.MULTILINE,
)
READ_SECTIONS = ("findings", "impression", "impressions", "conclusion", "conclusions")
SENTENCE_END = re.compile(r"(?<=[.!?;])\s+(?=[A-Z0-9_(])|\n\s*\n|\n\s*(?=\d+[.)]\s)|\n(?=[A-Z])")
CLAUSE_BREAK = re.compile(
    r"\b(?:but|however|although|though|except|whereas|which|while)\b|;|:|(?<=,)\s*(?=there (?:is|are)\b)", re.I
)

# Phrases that look like negation or uncertainty but are neither (NegEx "pseudo-triggers").
PSEUDO = [
    r"no (?:significant |interval |appreciable )?change",
    r"not significantly changed",
    r"without (?:significant |interval )?change",
    r"no (?:significant )?(?:increase|decrease)",
    r"not only",
    r"no longer seen",
]
UNCERTAIN_PRE = [
    r"possible",
    r"possibly",
    r"probable",
    r"probably",
    r"questionable",
    r"suspicious for",
    r"concerning for",
    r"may (?:represent|reflect|be)",
    r"could (?:represent|reflect|be)",
    r"might (?:represent|be)",
    r"cannot (?:be )?(?:excluded?|ruled out)",
    r"can ?not (?:exclude|rule out)",
    r"differential (?:diagnosis )?includes",
    r"suggestive of",
    r"suggests?",
    r"likely",
    r"compatible with",
    r"versus",
    r"vs\.?",
    r"equivocal",
    r"subtle",
]
UNCERTAIN_POST = [
    r"(?:cannot|can ?not) (?:be )?(?:excluded|ruled out)",
    r"is not excluded",
    r"(?:is|are) (?:possible|suspected|questioned)",
    r"may be present",
    r"not (?:entirely )?excluded",
]
NEGATIVE_PRE = [
    r"no",
    r"not",
    r"without",
    r"negative for",
    r"free of",
    r"absence of",
    r"no (?:evidence|sign|signs) of",
    r"resolution of",
    r"resolved",
    r"rules? out",
    r"ruled out",
    r"neither",
    r"nor",
]
NEGATIVE_POST = [
    r"(?:has|have) resolved",
    r"resolved",
    r"(?:is|are|was|were) (?:not|no longer) (?:seen|present|identified|visualized|appreciated|evident|enlarged)",
    r"(?:is|are) absent",
    r"(?:is|are) (?:normal|unremarkable|clear)",
    r"within normal limits",
    r"(?:is|are) not enlarged",
    r"(?:has|have) normal",
    r"normal in (?:size|caliber|calibre)",
    r"not seen",
]


def _compile(patterns: list[str], anchored_end: bool = False) -> re.Pattern:
    body = "|".join(f"(?:{p})" for p in sorted(patterns, key=len, reverse=True))
    return re.compile(rf"\b(?:{body})\b", re.I)


_PSEUDO = _compile(PSEUDO)
_UNCERTAIN_PRE, _UNCERTAIN_POST = _compile(UNCERTAIN_PRE), _compile(UNCERTAIN_POST)
_NEGATIVE_PRE, _NEGATIVE_POST = _compile(NEGATIVE_PRE), _compile(NEGATIVE_POST)
_LEVEL_PRIORITY = {"abnormal": 0, "disease": 1, "anatomy": 2}


def split_sections(report: str) -> dict[str, str]:
    """Sections by header ("FINDINGS:", "Impressions:" ...); text before any header is "preamble"."""
    matches = list(SECTION_HEADER.finditer(report))
    if not matches:
        return {"body": report.strip()}
    sections = {"preamble": report[: matches[0].start()].strip()}
    for match, following in zip(matches, [*matches[1:], None]):
        name = match.group(1).lower()
        text = report[match.end() : following.start() if following else len(report)].strip()
        sections[name] = (sections.get(name, "") + " " + text).strip()
    return sections


def split_sentences(text: str) -> list[str]:
    parts = SENTENCE_END.split(text.strip())
    return [" ".join(p.split()) for p in parts if p and p.strip(" .")]


def _phrase_pattern(phrase: str) -> str:
    if phrase.startswith("re:"):
        return phrase[3:]
    return r"\s+".join(re.escape(word) for word in phrase.lower().split())


class RuleBasedDecomposer(ReportDecomposer):
    """Offline decomposition with synonyms and NegEx-style scopes; no model, no network.

    `window` bounds how many words before a mention a pre-trigger may stand (NegEx uses 5-6)."""

    def __init__(self, ontology: Ontology | None = None, window: int = 6):
        super().__init__(ontology)
        self.window = window
        self._patterns: dict[tuple[str, ...], list[tuple[re.Pattern, Entity]]] = {}

    def _matchers(self, entities: list[Entity]) -> list[tuple[re.Pattern, Entity]]:
        key = tuple(e.id for e in entities)
        if key not in self._patterns:
            self._patterns[key] = [
                (re.compile(rf"(?<![\w-])(?:{_phrase_pattern(p)})(?![\w-])", re.I), e)
                for e in entities
                for p in e.phrasings()
            ]
        return self._patterns[key]

    def find_mentions(self, sentence: str, entities: list[Entity]) -> list[tuple[int, int, Entity]]:
        """Entity mentions in a sentence: longest first, then the more specific entity; no overlaps."""
        candidates = []
        for pattern, entity in self._matchers(entities):
            for match in pattern.finditer(sentence):
                candidates.append((match.start(), match.end(), entity))
        candidates.sort(key=lambda c: (-(c[1] - c[0]), _LEVEL_PRIORITY[c[2].level], c[0]))
        taken: list[tuple[int, int, Entity]] = []
        for start, end, entity in candidates:
            if all(end <= s or start >= e for s, e, _ in taken):
                taken.append((start, end, entity))
        return sorted(taken, key=lambda c: c[0])

    def mention_status(self, sentence: str, start: int, end: int) -> MentionStatus:
        """NegEx within the mention's clause: uncertainty first (its cues often contain negation words)."""
        masked = _PSEUDO.sub(lambda m: " " * len(m.group()), sentence)
        clause_start = max([m.end() for m in CLAUSE_BREAK.finditer(masked, 0, start)], default=0)
        following = CLAUSE_BREAK.search(masked, end)
        clause_end = following.start() if following else len(masked)
        before_words = masked[clause_start:start].split()
        before = " ".join(before_words[-self.window :])
        after = masked[end:clause_end]
        if _UNCERTAIN_PRE.search(before) or _UNCERTAIN_POST.search(after):
            return MentionStatus.UNCERTAIN
        if _NEGATIVE_PRE.search(before) or _NEGATIVE_POST.search(after):
            return MentionStatus.NEGATIVE
        return MentionStatus.POSITIVE

    def decompose(self, report: str, modality: str, entities: list[Entity] | None = None) -> ReportDecomposition:
        if not report or not report.strip():
            raise EmptyReportError("the report is empty")
        family = self.ontology.family_of(modality)
        family_entities = self.ontology.entities(family)
        entities = list(entities) if entities is not None else family_entities
        # spans are resolved against the whole family (so "effusion" inside "pericardial effusion"
        # is not read as a pleural effusion), then only the requested entities are reported
        matching = list({e.id: e for e in [*family_entities, *entities]}.values())
        sections = split_sections(report)
        read = [sections[name] for name in READ_SECTIONS if name in sections] or [sections.get("body", "")]
        statements = {e.id: EntityStatement(e.id) for e in entities}
        by_id = {e.id: e for e in entities}
        found: dict[str, list[MentionStatus]] = {}
        for sentence in (s for text in read for s in split_sentences(text)):
            for start, end, entity in self.find_mentions(sentence, matching):
                status = self.mention_status(sentence, start, end)
                targets = [entity.id]
                anatomy = self.ontology.anatomy_of(entity) if entity.level == "abnormal" else None
                if anatomy is not None:
                    targets.append(anatomy.id)
                for target in (t for t in targets if t in by_id):
                    found.setdefault(target, []).append(status)
                    if sentence not in statements[target].sentences:
                        statements[target].sentences.append(sentence)
        for entity_id, statuses in found.items():
            statements[entity_id].status = aggregate_status(statuses)
        return ReportDecomposition(family, sections, statements)


def sentence_status(sentence: str) -> MentionStatus:
    """The status a sentence gives whatever it mentions (for text already about one entity, such as
    an LLM's extraction that paraphrases the entity's name)."""
    masked = _PSEUDO.sub(lambda m: " " * len(m.group()), sentence)
    if _UNCERTAIN_PRE.search(masked) or _UNCERTAIN_POST.search(masked):
        return MentionStatus.UNCERTAIN
    if _NEGATIVE_PRE.search(masked) or _NEGATIVE_POST.search(masked):
        return MentionStatus.NEGATIVE
    return MentionStatus.POSITIVE


def aggregate_status(statuses: list[MentionStatus]) -> MentionStatus:
    """A report's verdict on an entity: positive if any mention is, else uncertain, else negative."""
    for status in (MentionStatus.POSITIVE, MentionStatus.UNCERTAIN, MentionStatus.NEGATIVE):
        if status in statuses:
            return status
    return MentionStatus.NOT_MENTIONED


class QuestionEntityFinder:
    """The entity a question is about, for a VLM with entity tokens: a name the user gives,
    resolved in the ontology (id, name, term or synonym), else the first finding the question
    names (matched as report sentences are; longest mention first)."""

    def __init__(self, ontology: Ontology | None = None):
        self.ontology = ontology or Ontology.load()
        self.decomposer = RuleBasedDecomposer(self.ontology)

    def find(self, question: str, modality: str, entity: str | None = None) -> str | None:
        """The entity id, or None when the question names no entity of `modality`."""
        if entity is not None:
            try:
                return self.ontology.find(entity, modality).id
            except KeyError as error:
                message = f"unknown entity {entity!r} for {modality} (see `medreco entities`)"
                raise UnknownEntityError(message) from error
        mentions = self.decomposer.find_mentions(question, self.ontology.entities(modality))
        return mentions[0][2].id if mentions else None


__all__ = [
    "EmptyReportError",
    "EntityStatement",
    "MentionStatus",
    "QuestionEntityFinder",
    "ReportDecomposer",
    "ReportDecomposition",
    "RuleBasedDecomposer",
    "aggregate_status",
    "sentence_status",
    "split_sections",
    "split_sentences",
]
