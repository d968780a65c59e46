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
from .ontology import Entity, Ontology, phrase_pattern


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
# Where a trigger's scope ends: the clause (NegEx "termination terms" among these).
CLAUSE_BREAK = re.compile(
    r"\b(?:but|however|although|though|yet|except|whereas|which|while|given|otherwise|consistent with|compatible with|"
    r"in keeping with|apart from|aside from|other than|there (?:is|are|has been|have been))\b|;|"
    r"(?<=,)\s*(?=there (?:is|are)\b)|,\s*with\b",
    re.I,
)
# ", and" followed by a new description (not the next item of a negated list) also ends a scope.
_AND_CLAUSE = re.compile(r",\s*and\b", re.I)

# Phrases that look like negation or uncertainty but are neither (NegEx "pseudo-triggers").
PSEUDO = [
    r"no (?:significant |interval |appreciable |substantial |further )*(?:change|changes)",
    r"not significantly changed",
    r"without (?:significant |interval )?change",
    r"no (?:significant |interval |further |substantial )*(?:increase|decrease|enlargement|progression|growth)",
    r"not only",
    r"not unexpected",
    r"improved but not resolved",
    r"has not (?:resolved|changed|improved)",
    r"not (?:entirely |completely |fully )resolved",
]
UNCERTAIN_PRE = [
    r"possible",
    r"possibly",
    r"probable",
    r"probably",
    r"presumably",
    r"presumed",
    r"questionable",
    r"question of",
    r"suspicious for",
    r"suspected",
    r"suspicion (?:of|for)",
    r"concerning for",
    r"concern for",
    r"worrisome for",
    r"raising (?:the )?(?:concern|question|possibility) (?:for|of)",
    r"(?:may|could|might|can) (?:\w+ly )?(?:represent|reflect|be|indicate|relate|correspond)",
    r"(?:cannot|can ?not) (?:be )?(?:excluded?|ruled out)",
    r"can ?not (?:exclude|rule out)",
    r"(?:is |are )?not (?:entirely |completely |definitely )?(?:excluded|ruled out)",
    r"differential(?: diagnos[ie]s| considerations?)?(?: would)?(?: includes?| include| is)?",
    r"(?:diagnostic )?(?:considerations?|possibilities) (?:would )?(?:includes?|are)",
    r"ddx",
    r"to suggest",
    r"suggestive of",
    r"suggests?",
    r"suggesting",
    r"to indicate",
    r"indicative of",
    r"likely",
    r"unlikely",
    r"versus",
    r"vs\.?",
    r"equivocal",
    r"borderline",
    r"cannot be (?:differentiated|distinguished) from",
    r"evaluate for",
    r"(?:can be |is |are )?seen (?:with|in)",
    r"attributable to",
    r"thought to (?:represent|be)",
    r"consider",
    r"r/o",
]
UNCERTAIN_POST = [
    r"(?:cannot|can ?not) (?:be )?(?:entirely |completely )?(?:excluded|ruled out)",
    r"(?:is|are) not (?:entirely |completely )?(?:excluded|ruled out)",
    r"(?:is|are) (?:possible|suspected|questioned|questionable|not excluded)",
    r"(?:is|are) (?:possibly|probably|questionably|perhaps|likely) (?!due|secondary|related|from|caused)\w+",
    r"(?:is|are) (?:likely|probable)(?! (?:due|secondary|related|from|caused|because))",
    r"may be present",
    r"not (?:entirely )?excluded",
    r"(?:is|are) (?:a )?consideration",
    r"(?:is|are) in the differential",
]
# Alternatives offered right after a mention ("pneumonia versus atelectasis"); unlike the post-triggers
# above they do not reach back along a list ("opacity, atelectasis versus consolidation").
UNCERTAIN_NEXT = [r"versus", r"vs\.?", r"or (?:less likely|more likely)"]
# A cue introducing a possibility: after a negation ("no X to suggest Y"), the possibility is denied.
_SUGGESTION = re.compile(r"^(?:to suggest|suggestive of|suggests?|suggesting|to indicate|indicative of)$", re.I)
NEGATIVE_PRE = [
    r"no",
    r"not",
    r"without",
    r"negative for",
    r"free of",
    r"clear of",
    r"absence of",
    r"absent",
    r"no (?:evidence|sign|signs|findings|definite|convincing|suspicious|acute|focal|new|residual) (?:of|to suggest)",
    r"resolution of",
    r"resolved",
    r"rules? out",
    r"ruled out",
    r"neither",
    r"nor",
    r"denies",
    r"denied",
    r"rather than",
    r"instead of",
    r"removal of",
    r"interval removal of",
]
# Negation that holds only right before the mention ("normal heart size", "clear lungs").
NEGATIVE_ADJACENT = [
    r"normal",
    r"normal[- ]sized?",
    r"normal[- ]caliber",
    r"unremarkable",
    r"clear",
    r"intact",
    r"patent",
    r"preserved",
]
NEGATIVE_POST = [
    r"(?:has|have) (?:since |now |completely |nearly )?resolved",
    r"resolved",
    r"(?:is|are|was|were|has|have) (?:been )?(?:now |again |currently )?(?:not|no longer) (?:\w+ )?"
    r"(?:seen|present|identified|visuali[sz]ed|appreciated|evident|enlarged|dilated|demonstrated|detected|noted|appreciable|visible|apparent|recurred|thickened)",
    r"(?:is|are|was|were) (?:now |again |currently |completely )?absent",
    r"(?:is|are|appears?|remains?) (?:otherwise |again |still |now )?(?:normal|unremarkable|clear|negative|natural|"
    r"within normal limits|free)",
    r"(?:is|are) (?:\w+ )?(?:normal|appropriate) for (?:the patient's )?age",
    r"(?:is|are|was|were) not (?!excluded|ruled|only|entirely|completely)\w+",
    r"(?:otherwise )?(?:normal|unremarkable|clear|natural)\b",
    r"within normal limits",
    r"(?:is|are) not (?:enlarged|dilated|thickened|distended)",
    r"(?:has|have) normal",
    r"(?:top[- ])?normal in (?:size|caliber|calibre|appearance|attenuation|echogenicity|signal|thickness)",
    r"not seen",
    r"(?:has|have) (?:been )?removed",
    r"no longer (?:seen|present|identified|visuali[sz]ed|demonstrated|evident|visible|appreciated)",
    r"(?:has|have) not recurred",
    r":\s*(?:none|absent|negative|normal|unremarkable|no|not (?:seen|identified|present))",  # "Ascites: none."
]
# An anatomical structure is abnormal only when the text says how; mentioned plainly it is normal.
ABNORMAL_CUE = re.compile(
    r"\b(?:abnormal\w*|enlarge\w*|thicken\w*|dilat\w+|distend\w+|distension|heterogene\w+|coarse\w*|echogenic|"
    r"hyperechoic|hypoechoic|irregular\w*|nodular\w*|atroph\w+|shrunken|displaced|deformed|deformity|"
    r"hyperinflat\w+|hyperexpan\w+|opaci\w+|edematous|oedematous|inflam\w+|hypoattenuat\w+|hypodens\w+|"
    r"hyperdens\w+|hyperintens\w+|hypointens\w+|lesions?|mass(?:es)?|cysts?|stones?|calcul\w+|fluid|collections?|"
    r"prominen\w+|increased|decreased|elevated|effaced|compressed|collaps\w+|infiltrat\w+|hemorrhag\w+|"
    r"haemorrhag\w+|blood|infarct\w*|narrow\w*|tortuous|ectatic|calcifi\w+|thrombos\w+|thrombus|occlu\w+|"
    r"obstruct\w+|scar\w*|hypervascular|small|shift\w*|herniat\w+|wall thickening)\b",
    re.I,
)


def _compile(patterns: list[str]) -> re.Pattern:
    body = "|".join(f"(?:{p})" for p in sorted(patterns, key=len, reverse=True))
    return re.compile(rf"(?<![\w/-])(?:{body})(?![\w-])", re.I)


_PSEUDO = _compile(PSEUDO)
_UNCERTAIN_PRE, _UNCERTAIN_POST = _compile(UNCERTAIN_PRE), _compile(UNCERTAIN_POST)
_UNCERTAIN_NEXT = _compile(UNCERTAIN_NEXT)
_NEGATIVE_PRE, _NEGATIVE_POST = _compile(NEGATIVE_PRE), _compile(NEGATIVE_POST)
_NEGATIVE_ADJACENT = _compile(NEGATIVE_ADJACENT)
_LEVEL_PRIORITY = {"abnormal": 0, "disease": 1, "anatomy": 2}
_OTHER_MENTION = "\u00a7"  # stands for another entity's mention inside a trigger's window
_LIST_WORDS = {_OTHER_MENTION, "", "or", "and", "nor"}
# After a mention, a comma opening a new description ends its post-triggers' reach
# ("a granuloma in the right upper lobe, the lung is otherwise normal").
_NEW_DESCRIPTION = re.compile(r",\s+(?=(?:the|a|an|there|with|otherwise|and the|but)\b)", re.I)


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


def _triggers(pattern: re.Pattern, text: str, kind: str) -> list[tuple[int, int, str, str]]:
    return [(m.start(), m.end(), kind, m.group()) for m in pattern.finditer(text)]


class RuleBasedDecomposer(ReportDecomposer):
    """Offline decomposition with synonyms and NegEx-style scopes; no model, no network.

    `window` bounds how many words before a mention a pre-trigger may stand (NegEx uses 5-6); other
    entities' mentions in between do not count, so a negation reaches along a list ("no
    consolidation, pleural effusion or pneumothorax"). The trigger nearest the mention decides."""

    def __init__(self, ontology: Ontology | None = None, window: int = 6):
        super().__init__(ontology)
        self.window = window
        self._patterns: dict[tuple[str, ...], list[tuple[re.Pattern, Entity, re.Pattern | None]]] = {}

    def _matchers(self, entities: list[Entity]) -> list[tuple[re.Pattern, Entity, re.Pattern | None]]:
        key = tuple(e.id for e in entities)
        if key not in self._patterns:
            matchers = []
            for entity in entities:
                context = re.compile(entity.context, re.I) if entity.context else None
                for phrasings, needs in ((entity.phrasings(), None), (entity.contextual, context)):
                    if phrasings:
                        body = "|".join(f"(?:{phrase_pattern(p)})" for p in phrasings)
                        matchers.append((re.compile(rf"(?<![\w-])(?:{body})(?![\w-])", re.I), entity, needs))
            self._patterns[key] = matchers
        return self._patterns[key]

    def find_mentions(self, sentence: str, entities: list[Entity]) -> list[tuple[int, int, Entity]]:
        """Entity mentions in a sentence: longest first, then phrasings that need their context (the
        organ named in the sentence), then the more specific entity; no overlaps."""
        candidates = []
        for pattern, entity, context in self._matchers(entities):
            if context is not None and not context.search(sentence):
                continue
            for match in pattern.finditer(sentence):
                if match.end() > match.start():
                    candidates.append((match.start(), match.end(), entity, context is None))
        candidates.sort(key=lambda c: (-(c[1] - c[0]), c[3], _LEVEL_PRIORITY[c[2].level], c[0]))
        taken: list[tuple[int, int, Entity]] = []
        for start, end, entity, _ in candidates:
            if all(end <= s or start >= e for s, e, _ in taken):
                taken.append((start, end, entity))
        return sorted(taken, key=lambda c: c[0])

    def mention_status(
        self,
        sentence: str,
        start: int,
        end: int,
        mentions: list[tuple[int, int, Entity]] = (),
        entity: Entity | None = None,
    ) -> MentionStatus:
        """NegEx within the mention's clause. `mentions`: every mention in the sentence (other entities
        do not use up the trigger window); `entity`: the one at (start, end), so that a plainly
        mentioned anatomical structure reads as normal."""
        masked = _PSEUDO.sub(lambda m: " " * len(m.group()), sentence)
        clause_start = max([m.end() for m in CLAUSE_BREAK.finditer(masked, 0, start)], default=0)
        following = CLAUSE_BREAK.search(masked, end)
        clause_end = following.start() if following else len(masked)
        before = self._window_before(masked, clause_start, start, mentions)
        status = self._pre_status(before) or self._post_status(masked, end, clause_end, mentions)
        if status is MentionStatus.POSITIVE and entity is not None and entity.level == "anatomy":
            clause = list(masked[clause_start:clause_end])
            for other_start, other_end, other in mentions:  # a negated finding's words say nothing here
                if other is not entity and clause_start <= other_start and other_end <= clause_end:
                    clause[other_start - clause_start : other_end - clause_start] = " " * (other_end - other_start)
            if not ABNORMAL_CUE.search("".join(clause)):
                return MentionStatus.NEGATIVE
        return status

    def _window_before(self, masked: str, clause_start: int, start: int, mentions) -> str:
        """The words before a mention that a pre-trigger may stand in: back to the clause start, at most
        `window` words that are not other mentions, and not past ", and" that opens a new description."""
        text = masked[clause_start:start]
        for other_start, other_end, _ in sorted(mentions, key=lambda m: -m[0]):
            if clause_start <= other_start and other_end <= start:
                local = other_start - clause_start, other_end - clause_start
                text = text[: local[0]] + f" {_OTHER_MENTION} " + text[local[1] :]
        for match in reversed(list(_AND_CLAUSE.finditer(text))):
            following = [w for w in text[match.end() :].split() if w != _OTHER_MENTION]
            if len(following) >= 2:
                text = text[match.end() :]
                break
        words, kept = text.split(), 0
        for index in range(len(words) - 1, -1, -1):
            if words[index] != _OTHER_MENTION and words[index].strip(",") not in ("or", "and", "nor", ""):
                kept += 1
            if kept > self.window:
                return " ".join(words[index + 1 :])
        return " ".join(words)

    @staticmethod
    def _post_status(masked: str, end: int, clause_end: int, mentions) -> MentionStatus:
        """The status post-triggers give: those right after the mention, or after the rest of a list
        the mention starts ("effusion or pneumothorax is not seen")."""
        text = masked[end:clause_end]
        for other_start, other_end, other in sorted(mentions, key=lambda m: -m[0]):
            # locations ("in the right thyroid lobe") stay words: "the cyst in the liver is not seen"
            if end <= other_start and other_end <= clause_end and other.level != "anatomy":
                text = text[: other_start - end] + f" {_OTHER_MENTION} " + text[other_end - end :]
        text = _NEW_DESCRIPTION.split(text, maxsplit=1)[0]
        immediate = text.split(_OTHER_MENTION)[0]
        words = text.split()
        while words and (words[0] == _OTHER_MENTION or words[0].strip(",/") in ("", "or", "and", "nor")):
            words.pop(0)
        listed = " ".join(words).split(_OTHER_MENTION)[0]
        if any(
            pattern.search(immediate[:80]) for pattern in (_UNCERTAIN_POST, _UNCERTAIN_NEXT)
        ) or _UNCERTAIN_POST.search(listed[:80]):
            return MentionStatus.UNCERTAIN
        if _NEGATIVE_POST.search(immediate[:60]) or _NEGATIVE_POST.search(listed[:60]):
            return MentionStatus.NEGATIVE
        return MentionStatus.POSITIVE

    def _pre_status(self, before: str) -> MentionStatus | None:
        """The status the trigger nearest the mention gives, or None without one."""
        uncertain = _triggers(_UNCERTAIN_PRE, before, "uncertain")
        negative = [
            t
            for t in _triggers(_NEGATIVE_PRE, before, "negative")
            if all(t[1] <= u[0] or t[0] >= u[1] for u in uncertain)
        ]
        real = [m.start() for m in re.finditer(r"\S+", before) if m.group().strip(",/") not in _LIST_WORDS]
        adjacent_from = real[-2] if len(real) >= 2 else 0
        negative += [t for t in _triggers(_NEGATIVE_ADJACENT, before, "negative") if t[0] >= adjacent_from]
        triggers = sorted(uncertain + negative, key=lambda t: (t[1], t[1] - t[0]))
        if not triggers:
            return None
        nearest = triggers[-1]
        denied = any(t[2] == "negative" and t[1] <= nearest[0] for t in triggers)
        if nearest[2] == "uncertain" and _SUGGESTION.match(nearest[3]) and denied:
            return MentionStatus.NEGATIVE
        return MentionStatus.UNCERTAIN if nearest[2] == "uncertain" else MentionStatus.NEGATIVE

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
            mentions = self.find_mentions(sentence, matching)
            for start, end, entity in mentions:
                status = self.mention_status(sentence, start, end, mentions, entity)
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
    if any(pattern.search(masked) for pattern in (_UNCERTAIN_PRE, _UNCERTAIN_POST, _UNCERTAIN_NEXT)):
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
