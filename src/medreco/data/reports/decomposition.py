"""Report decomposition: a report -> one statement per entity (mention status + the text about it).

The default backend is offline and rule-based: section parsing (findings and impression, `sections`),
sentence splitting, entity matching by synonyms (`mentions`: longest match wins; the more specific
entity wins a tie), and NegEx-style negation and uncertainty scopes within each clause (`scopes`,
with the trigger words of `lexicon`). Abnormal findings also inform the statement of the anatomy they
sit in; a structure reads as its line in a structured report ("Liver: normal.") says."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ...errors import UnknownEntityError
from .mentions import (
    INVERTED,
    PREDICATE,
    MatcherSet,
    Mention,
    compiled_matchers,
    elided_mentions,
    how_read,
    matched_mentions,
    outermost,
)
from .ontology import MODALITY_REGION, Entity, Ontology
from .scopes import EXCEPTION, Scope, abnormal_words, opens_with_negation, scope_of, scope_status
from .sections import (
    LINE_HEADING,
    READ_SECTIONS,
    examination_title,
    line_heading,
    split_sections,
    split_sentences,
    unheaded_findings,
    unheaded_findings_beside_an_impression,
)
from .statement import (
    EmptyReportError,
    EntityStatement,
    MentionStatus,
    ReportDecomposer,
    ReportDecomposition,
    aggregate_status,
)

_INVERSE = {MentionStatus.POSITIVE: MentionStatus.NEGATIVE, MentionStatus.NEGATIVE: MentionStatus.POSITIVE}
# A structure named as the reference of a comparison says nothing abnormal of it.
_COMPARATOR = re.compile(
    r"\b(?:than|relative to|compared (?:to|with))\s+(?:that of\s+|those of\s+)?(?:the\s+)?(?:adjacent\s+|normal\s+)?$",
    re.I,
)
# A structure named to say where something else is ("fatty sparing adjacent to the gallbladder fossa",
# "a mass separate from the left ovary") or that it was not well seen ("poor visualisation of the
# portal vein walls") is a landmark: the sentence says nothing of its state.
_LANDMARK = re.compile(
    r"\b(?:adjacent to|separate from|next to|distinct from|(?:poor|limited|reduced) visuali[sz]ation of)\s+"
    r"(?P<gap>(?:[\w-]+\s+){0,4})$",
    re.I,
)
# Two findings joined by a hyphen, as translated reports write them ("pericardial effusion-thickening",
# "lytic-destructive lesion"): read as "effusion/thickening", a list, as long as the original.
_HYPHENATED_LIST = re.compile(
    r"\b(effusion|thickening|consolidation|atelectasis|lytic)-(thickening|effusion|atelectasis|consolidation|destructive)\b",
    re.I,
)
_OTHERWISE = re.compile(r"\b(?:otherwise|remaining|remainder of|rest of)\b", re.I)
# "Lungs clear apart from basal scarring": the organ is normal but for what is named after it.
_EXCEPT_TRAILING = re.compile(rf"^[\w\s-]{{0,30}}?\b{EXCEPTION}\b", re.I)
# "Apart from a small nodule, the lungs are clear": the organ is normal but for what was named.
_EXCEPT_LEADING = re.compile(rf"^\s*{EXCEPTION}\b[^,;]*,", re.I)


class RuleBasedDecomposer(ReportDecomposer):
    """Offline decomposition with synonyms and NegEx-style scopes; no model, no network.

    `window` bounds how many words before a mention a pre-trigger may stand (NegEx uses 5-6); other
    entities' mentions in between do not count, so a negation reaches along a list ("no
    consolidation, pleural effusion or pneumothorax"). The trigger nearest the mention decides."""

    def __init__(self, ontology: Ontology | None = None, window: int = 6):
        super().__init__(ontology)
        self.window = window

    def find_mentions(
        self, sentence: str, entities: list[Entity] | MatcherSet, heading: str = ""
    ) -> list[tuple[int, int, Entity]]:
        """Entity mentions in a sentence: longest first, then phrasings that need their context (the
        organ named in the sentence, or in the `heading` of a structured report's line such as
        "Liver:"), then the more specific entity; no overlaps."""
        return [mention[:3] for mention in self._mentions(sentence, entities, heading)]

    @staticmethod
    def _mentions(
        sentence: str, entities: list[Entity] | MatcherSet, heading: str = "", region: str = ""
    ) -> list[Mention]:
        """`find_mentions`, each with how to read it and whether it is a description. `region`: the body
        region the report is about (`MODALITY_REGION`), a context for every sentence."""
        matcher_set = entities if isinstance(entities, MatcherSet) else compiled_matchers(tuple(entities))
        taken = matched_mentions(sentence, matcher_set, heading, region)
        return sorted([*taken, *elided_mentions(sentence, taken, matcher_set, region)], key=lambda m: m.start)

    def mention_status(
        self,
        sentence: str,
        start: int,
        end: int,
        mentions: list[tuple[int, int, Entity]] = (),
        entity: Entity | None = None,
        readings: dict[tuple[int, int], Mention] | None = None,
    ) -> MentionStatus:
        """NegEx within the mention's clause. `mentions`: every mention in the sentence (other entities
        do not use up the trigger window); `entity`: the one at (start, end), so that a plainly
        mentioned anatomical structure reads as normal; `readings`: the mentions with a reading of their
        own (span -> mention: the status a size gives, a normal state, a stated state)."""
        # other mentions are marks in the text; a stated state is no mark: its words say how the subject is
        # ("the spleen is [not enlarged]", "are [normal in size]")
        readings = readings or {}
        marks = outermost([m for m in mentions if how_read(readings, m[:2]) not in (INVERTED, PREDICATE)])
        scope = scope_of(sentence, start, end, marks, self.window)
        status = scope_status(scope, start, end, marks, entity, readings.get((start, end)), self.window)
        if status is MentionStatus.POSITIVE and entity is not None and entity.level == "anatomy":
            return self._structure_status(sentence, scope, start, mentions, entity, readings)
        return status

    def _structure_status(
        self, sentence: str, scope: Scope, start: int, mentions, structure: Entity, readings
    ) -> MentionStatus:
        """The status of a structure its clause mentions without a trigger: normal unless the clause says
        how it is abnormal or reports a finding in it; nothing when it is only a comparison's reference
        or a landmark."""
        if _COMPARATOR.search(sentence[:start]):  # "the liver lower in attenuation than the spleen"
            return MentionStatus.NEGATIVE
        landmark = _LANDMARK.search(sentence[:start])
        if landmark and not abnormal_words(landmark.group("gap")):  # not "adjacent to the thickened GB"
            return MentionStatus.NOT_MENTIONED
        masked, clause_start, clause_end, _ = scope
        clause = list(masked[clause_start:clause_end])
        for other_start, other_end, other in mentions:  # a negated finding's words say nothing here
            if other is not structure and clause_start <= other_start and other_end <= clause_end:
                clause[other_start - clause_start : other_end - clause_start] = " " * (other_end - other_start)
        if abnormal_words("".join(clause)):
            return MentionStatus.POSITIVE
        # "an intimal flap in the descending aorta": the structure is as its finding is
        in_clause = [m for m in mentions if clause_start <= m[0] and m[1] <= clause_end]
        named = {other.id for _, _, other in in_clause if other.level == "anatomy"}
        # ... not as another structure named with its finding ("lungs clear, mediastinum widened")
        findings = [
            self._read(sentence, other_start, other_end, mentions, other, readings)
            for other_start, other_end, other in in_clause
            if other.level != "anatomy" and self._about(other, structure, named)
        ]
        for found in (MentionStatus.POSITIVE, MentionStatus.UNCERTAIN):
            if found in findings:
                return found
        return MentionStatus.NEGATIVE

    def _about(self, finding: Entity, structure: Entity, named: set[str]) -> bool:
        """Whether a finding in a structure's clause is about it: its own, one of no structure, or one of a
        structure the clause does not name ("volume loss in the right hippocampus" is the brain's)."""
        anatomy = self.ontology.anatomy_of(finding)
        return anatomy is None or anatomy.id == structure.id or anatomy.id not in named

    def _read(self, sentence: str, start: int, end: int, mentions, entity: Entity, readings) -> MentionStatus:
        """A mention's status, read as `readings` says: a size's status, inverted, or as worded."""
        how = how_read(readings, (start, end))
        if isinstance(how, MentionStatus):
            return how
        status = self.mention_status(sentence, start, end, mentions, entity, readings)
        return _INVERSE.get(status, status) if how == INVERTED else status

    def decompose(self, report: str, modality: str, entities: list[Entity] | None = None) -> ReportDecomposition:
        if not report or not report.strip():
            raise EmptyReportError("the report is empty")
        family = self.ontology.family_of(modality)
        family_entities = self.ontology.entities(family)
        entities = list(entities) if entities is not None else family_entities
        # spans are resolved against the whole family (so "effusion" inside "pericardial effusion"
        # is not read as a pleural effusion), then only the requested entities are reported
        matching = list({e.id: e for e in [*family_entities, *entities]}.values())
        matchers = compiled_matchers(tuple(matching))
        sections = split_sections(report)
        region = MODALITY_REGION.get(modality, "")
        read = [sections[name] for name in READ_SECTIONS if name in sections] or [unheaded_findings(sections)]
        if "findings" not in sections and "impression" in sections:
            read.insert(0, unheaded_findings_beside_an_impression(sections))
        said = _Said({e.id: [] for e in entities}, self.ontology.anatomy_of)
        # the examination's name is every sentence's context ("RENAL ULTRASOUND ... No calculi.")
        title = examination_title(sections)
        for text in read:
            heading = ""
            for written in split_sentences(text):
                sentence = _HYPHENATED_LIST.sub(r"\1/\2", written)  # read as a list; the statement keeps the text
                heading = line_heading(sentence) or heading
                context = f"{heading} {title}".strip()
                for (start, end, entity), status in self._sentence_statuses(sentence, matchers, context, region):
                    said.add(sentence, written, start, end, entity, status)
        return ReportDecomposition(family, sections, said.statements())

    def _sentence_statuses(
        self, sentence: str, matchers: MatcherSet, context: str, region: str
    ) -> list[tuple[tuple[int, int, Entity], MentionStatus]]:
        """The mentions of a sentence with their statuses, each mention read alone, then read against
        the others: a name restated in parentheses, a finding named again with a hedge, the structure
        that heads a structured line."""
        read_mentions = self._mentions(sentence, matchers, context, region)
        mentions = [mention[:3] for mention in read_mentions]
        readings = {(m.start, m.end): m for m in read_mentions if m.how is not None}
        statuses = [self._read(sentence, start, end, mentions, entity, readings) for start, end, entity in mentions]
        # a finding both described and named: the name decides ("renal pelvic dilatation
        # represents an extrarenal pelvis rather than hydronephrosis")
        named = {m.entity.id for m in read_mentions if not m.described}
        kept = [i for i, m in enumerate(read_mentions) if not (m.described and m.entity.id in named)]
        mentions, statuses = [mentions[i] for i in kept], [statuses[i] for i in kept]
        statuses = _restated_in_parentheses(sentence, mentions, statuses)
        statuses = _structures_in_context(
            sentence, mentions, _hedged_evidence(sentence, mentions, statuses), self.ontology.anatomy_of
        )
        return list(zip(mentions, statuses))


@dataclass
class _Said:
    """What a report says of each requested entity, gathered mention by mention: the statuses and the
    sentences, and which structures it calls normal, abnormal, or normal but for what was named."""

    sentences: dict[str, list[str]]  # entity id -> the sentences about it, for the requested entities
    anatomy_of: Callable[[Entity], Entity | None]  # the structure a finding sits in
    statuses: dict[str, list[MentionStatus]] = field(default_factory=dict)
    said_normal: set[str] = field(default_factory=set)  # structures the report itself calls normal
    said_otherwise: set[str] = field(default_factory=set)  # ... or abnormal / possibly abnormal
    # "the lungs are otherwise clear": normal but for what was named
    otherwise_normal: set[str] = field(default_factory=set)

    def add(self, sentence: str, written: str, start: int, end: int, entity: Entity, status: MentionStatus) -> None:
        """One mention's status (`sentence` as read, `written` as the report has it), for its entity and,
        for an abnormal finding, for the structure it sits in."""
        if status is MentionStatus.NOT_MENTIONED:
            return
        if (
            entity.level == "anatomy"
            and status is MentionStatus.NEGATIVE
            and (
                _OTHERWISE.search(sentence[max(0, start - 40) : end + 40])
                or _EXCEPT_TRAILING.match(sentence[end:])
                or ((leading := _EXCEPT_LEADING.match(sentence)) and start >= leading.end())
            )
        ):
            self.otherwise_normal.add(entity.id)
        anatomy = self.anatomy_of(entity) if entity.level == "abnormal" else None
        targets = [entity.id] + ([anatomy.id] if anatomy is not None else [])
        if entity.level == "anatomy":
            (self.said_normal if status is MentionStatus.NEGATIVE else self.said_otherwise).add(entity.id)
        for target in (t for t in targets if t in self.sentences):
            self.statuses.setdefault(target, []).append(status)
            if written not in self.sentences[target]:
                self.sentences[target].append(written)

    def statements(self) -> dict[str, EntityStatement]:
        """One statement per requested entity, its status aggregated over its mentions."""
        verdicts = {}
        for entity_id, statuses in self.statuses.items():
            status = aggregate_status(statuses)
            # "Mediastinum: normal. Hila: prominent, possibly adenopathy": a possibility in a structure
            # does not overrule the report calling it normal; a finding seen there does
            called_normal = entity_id in self.said_normal and entity_id not in self.said_otherwise
            if entity_id in self.otherwise_normal or (called_normal and status is MentionStatus.UNCERTAIN):
                status = MentionStatus.NEGATIVE
            verdicts[entity_id] = status
        return {
            entity_id: EntityStatement(entity_id, verdicts.get(entity_id, MentionStatus.NOT_MENTIONED), sentences)
            for entity_id, sentences in self.sentences.items()
        }


def _structures_in_context(
    sentence: str,
    mentions: list[tuple[int, int, Entity]],
    statuses: list[MentionStatus],
    anatomy_of: Callable[[Entity], Entity | None],
) -> list[MentionStatus]:
    """A structure heading a structured line ("Aorta: ascending aorta 4.6 cm, aneurysmal.") is
    abnormal when the line reports a finding (present or possible) or says how it is abnormal, and
    normal when the line calls it normal or reports only absences ("Lungs: No nodules."). A heading
    naming several structures ("Lungs/airways:") gives each only the line's findings of its own."""
    heading = LINE_HEADING.match(sentence)
    statuses = list(statuses)
    for i, (start, end, entity) in enumerate(mentions):
        if heading is None or entity.level != "anatomy" or start > heading.end(1):
            continue
        shared = any(m[2].level == "anatomy" and m[2] is not entity and m[1] <= heading.end(1) for m in mentions)
        if end < heading.end(1) and not shared:
            continue  # a structure's modifier in a heading of one structure ("Left kidney:")
        line = sentence[heading.end() :]
        others = [status for j, status in enumerate(statuses) if j != i]
        if shared and not opens_with_negation(line):
            own = [
                status
                for (_, _, other), status in zip(mentions, statuses)
                if other.level != "anatomy" and (found := anatomy_of(other)) is not None and found.id == entity.id
            ]
            placed = {
                found.id
                for (_, _, other) in mentions
                if other.level != "anatomy" and (found := anatomy_of(other)) is not None
            }
            first = min(m[0] for m in mentions if m[2].level == "anatomy" and m[1] <= heading.end(1))
            if own:
                statuses[i] = aggregate_status(own)
            elif not (MentionStatus.POSITIVE in others or MentionStatus.UNCERTAIN in others):
                statuses[i] = MentionStatus.NEGATIVE  # "Lungs/airways: clear."
            elif placed & {m[2].id for m in mentions if m[1] <= heading.end(1)} or start != first:
                statuses[i] = MentionStatus.NOT_MENTIONED  # the line is about the other structure
            else:
                # findings of no structure ("Gallbladder and bile ducts: gallstones") are the first one's
                statuses[i] = (
                    MentionStatus.UNCERTAIN if MentionStatus.POSITIVE not in others else MentionStatus.POSITIVE
                )
            continue
        if opens_with_negation(line):
            statuses[i] = MentionStatus.NEGATIVE
        elif MentionStatus.POSITIVE in others or abnormal_words(
            _blank_negated(sentence, heading.end(), mentions, statuses)
        ):
            statuses[i] = MentionStatus.POSITIVE
        elif MentionStatus.UNCERTAIN in others:
            statuses[i] = MentionStatus.UNCERTAIN
        else:
            statuses[i] = MentionStatus.NEGATIVE
    return statuses


def _restated_in_parentheses(
    sentence: str, mentions: list[tuple[int, int, Entity]], statuses: list[MentionStatus]
) -> list[MentionStatus]:
    """A name of the same entity in parentheses right after another restates it ("treatment-related
    change (pseudoprogression)") and shares its status, which the parenthesis would otherwise cut off."""
    statuses = list(statuses)
    for i in range(1, len(mentions)):
        (_, previous_end, previous), (start, end, entity) = mentions[i - 1], mentions[i]
        if (
            entity is previous
            and re.fullmatch(r"\s*\(\s*", sentence[previous_end:start])
            and re.match(r"\s*\)", sentence[end:])
        ):
            statuses[i] = statuses[i - 1]
    return statuses


def _blank_negated(sentence: str, offset: int, mentions, statuses: list[MentionStatus]) -> str:
    """`sentence[offset:]` with the negated mentions blanked (their words say nothing of the organ)."""
    text = list(sentence)
    for (start, end, _), status in zip(mentions, statuses):
        if status is MentionStatus.NEGATIVE:
            text[start:end] = " " * (end - start)
    return "".join(text)[offset:]


# Between a finding and a hedged naming of it, words that make the naming an alternative, not the finding's name.
_ALTERNATIVES = re.compile(r";|\b(?:differential|ddx|includ\w*|considerations?|versus|vs|alternatives?)\b", re.I)


# A later mention inside a location or a cause ("ulceration of the plaque surface", "secondary to the
# ascites") is not a hedged naming of the finding.
_LOCATED_IN = re.compile(r"\b(?:of|in|at|on|within|along|around|to)\s+(?:the|its|this|that)\s+$", re.I)


def _hedged_evidence(sentence: str, mentions, statuses: list[MentionStatus]) -> list[MentionStatus]:
    """A finding described and then named with a hedge in the same clause ("filling defects ...
    suspicious for PE", "a lesion, likely a hemangioma") is uncertain, not seen for sure."""
    statuses = list(statuses)
    for i, (_, end, entity) in enumerate(mentions):
        if statuses[i] is not MentionStatus.POSITIVE:
            continue
        for (later_start, _, other), status in zip(mentions[i + 1 :], statuses[i + 1 :]):
            between = sentence[end:later_start]
            if _LOCATED_IN.search(between):
                continue
            if other.id == entity.id and status is MentionStatus.UNCERTAIN and not _ALTERNATIVES.search(between):
                statuses[i] = MentionStatus.UNCERTAIN
                break
    return statuses


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
    "QuestionEntityFinder",
    "RuleBasedDecomposer",
]
