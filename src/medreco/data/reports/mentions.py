"""Entity mentions in a sentence, as rule-based decomposition finds them: the vocabulary's phrasings,
descriptions ("the spleen is enlarged") and measurements ("CBD 9 mm") matched, longest first (the
more specific entity wins a tie), with names a coordination shortens ("no pericardial effusion or
[thickening]"). Each mention says how to read it: as worded, by its size, or inverted."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import NamedTuple

from .ontology import (
    Entity,
    Measurement,
    description_patterns,
    measured_sizes,
    measurement_pattern,
    phrase_pattern,
)
from .statement import MentionStatus

INVERTED = "inverted"  # a normal state ("the portal vein is patent") says the finding is absent
PREDICATE = "predicate"  # a state said of its subject ("the spleen is [enlarged]"): read as worded
_LEVEL_PRIORITY = {"abnormal": 0, "disease": 1, "anatomy": 2}
# A size the report itself calls normal, whatever the usual limit ("CBD 8 mm, within expected limits
# post cholecystectomy", "common duct 8 mm, normal for age").
_SIZE_CALLED_NORMAL = re.compile(
    r"\s*(?:mm|cm|%)?[^;.]{0,25}?\b(?:(?:is|are|which is|and)\s+)?(?:within (?:the )?(?:normal|expected|accepted)|"
    r"normal (?:for|after|post|given)|(?:upper|top|high)[- ](?:limit of )?normal|physiological|"
    r"(?:as )?expected (?:for|after|post|given))",
    re.I,
)


def outermost(mentions) -> list[tuple[int, int, Entity]]:
    """Mentions as marks in a text: one per span, none inside another (a name within a description)."""
    spans = {(m[0], m[1]): m for m in mentions}
    return [m for (s, e), m in spans.items() if not any(o != (s, e) and o[0] <= s and e <= o[1] for o in spans)]


@dataclass(frozen=True)
class _Matcher:
    """One entity's phrasings as a pattern; `starts`: the first three letters of their first words
    (American and British spellings), so a sentence without any of them is not searched at all."""

    pattern: re.Pattern
    entity: Entity
    context: re.Pattern | None
    starts: frozenset[str] | None
    measurement: Measurement | None = None  # a size pattern: its match is the finding only above the limit
    normal: bool = False  # a normal state: what it says of the subject, it says the other way of the finding


@dataclass(frozen=True)
class MatcherSet:
    """A set of entities' matchers, indexed by the word starts that can begin a match: a sentence
    is searched only with the matchers one of its words could begin (and those always searched)."""

    matchers: tuple[_Matcher, ...]
    always: tuple[int, ...]
    by_start: dict[str, tuple[int, ...]]

    def relevant(self, sentence: str) -> list[_Matcher]:
        """The matchers worth running on a sentence, in their original order."""
        indices = set(self.always)
        for start in _sentence_starts(sentence):
            indices.update(self.by_start.get(start, ()))
        return [self.matchers[i] for i in sorted(indices)]


@functools.lru_cache(maxsize=16)
def compiled_matchers(entities: tuple[Entity, ...]) -> MatcherSet:
    """The matchers of a set of entities, compiled once per process (a family's vocabulary compiles
    in seconds; decomposers are made per worker, per test, per call)."""
    matchers = []
    for entity in entities:
        context = re.compile(entity.context, re.I) if entity.context else None
        for phrasings, needs in ((entity.phrasings(), None), (entity.contextual, context)):
            # plain phrasings grouped by how their first word starts, so a sentence runs only the
            # phrasings its words could begin; patterns are always run
            groups: dict[frozenset[str] | None, list[str]] = {}
            for phrasing in phrasings:
                starts = None if phrasing.startswith("re:") else _word_starts([phrasing])
                groups.setdefault(starts, []).append(phrasing)
            for starts, group in groups.items():
                if group:
                    body = "|".join(f"(?:{phrase_pattern(p)})" for p in group)
                    pattern = re.compile(rf"(?<![\w-])(?:{body})(?![\w-])", re.I)
                    matchers.append(_Matcher(pattern, entity, needs, starts))
        # described and measured findings: a sentence is searched only when it could name a subject
        for description in entity.descriptions:
            for normal in (False, True):
                if patterns := description_patterns(description, normal):
                    body = "|".join(f"(?:{p})" for p in patterns)
                    pattern = re.compile(rf"(?<![\w-])(?:{body})(?![\w-])", re.I)
                    starts = _subject_starts(description.subjects)
                    matchers.append(_Matcher(pattern, entity, None, starts, normal=normal))
        for measurement in entity.measurements:
            pattern = re.compile(rf"(?<![\w-]){measurement_pattern(measurement)}", re.I)
            needs = re.compile(measurement.context, re.I) if measurement.context else None
            matchers.append(_Matcher(pattern, entity, needs, _subject_starts(measurement.subjects), measurement))
    by_start: dict[str, list[int]] = {}
    for index, matcher in enumerate(matchers):
        for start in matcher.starts or ():
            by_start.setdefault(start, []).append(index)
    always = tuple(i for i, matcher in enumerate(matchers) if matcher.starts is None)
    return MatcherSet(tuple(matchers), always, {k: tuple(v) for k, v in by_start.items()})


def _american(word: str) -> str:
    """A word's start as the vocabulary spells it ("haemorrhage" -> "hemorrhage", "oedema" -> "edema")."""
    return re.sub(r"^o(?=edem|esophag)", "", re.sub(r"^ha(?=em)", "h", word))


def _word_starts(phrases: list[str]) -> frozenset[str] | None:
    """The first three letters of each phrase's first word (shorter words whole), or None when a
    phrase starts with something else (a number, a symbol): those are always searched."""
    starts = set()
    for phrase in phrases:
        word = re.match(r"[a-z]*", re.split(r"[\s-]+", phrase.lower().strip())[0]).group()
        if not word:
            return None
        starts.update({word[:3], _american(word)[:3]})
    return frozenset(starts)


def _subject_starts(subjects: tuple[str, ...]) -> frozenset[str] | None:
    """The word starts of a description's subjects (None, always searched, when one is a pattern)."""
    return None if any(s.startswith("re:") for s in subjects) else _word_starts(list(subjects))


def _sentence_starts(sentence: str) -> frozenset[str]:
    """The first one, two and three letters of every word of a sentence, in both spellings."""
    words = set(re.findall(r"[a-z]+", sentence.lower()))
    words |= {_american(w) for w in words}
    return frozenset(w[:n] for w in words for n in (1, 2, 3))


class Mention(NamedTuple):
    """An entity found in a sentence, and how to read it."""

    start: int
    end: int
    entity: Entity
    # the status its size gives, INVERTED (a normal state of the finding's subject), PREDICATE (a
    # stated abnormal state), or None: as the words around it say
    how: MentionStatus | str | None
    described: bool  # described ("the spleen is enlarged") rather than named
    subject: int  # where its subject starts when a state is said of it ("[the spleen] is enlarged"), else start


def how_read(readings: dict[tuple[int, int], Mention] | None, span: tuple[int, int]) -> MentionStatus | str | None:
    """How the mention at `span` reads (see `Mention.how`)."""
    mention = (readings or {}).get(span)
    return mention.how if mention is not None else None


# Coordination that shares a modifier or a head between two names: "pericardial effusion or
# [thickening]" (pericardial thickening), "the [cardiac] and mediastinal silhouettes" (the cardiac
# silhouette). The word after or before a name's conjunction, and the conjunction itself.
_SHARED_MODIFIER = re.compile(r"\s*(?:,\s*|/|\s(?:and/or|or|and|nor)\s+)([a-z]{4,})\b", re.I)
_SHARED_HEAD = re.compile(r"\b([a-z]{4,})(?:\s*,\s*|\s*/\s*|\s+(?:and/or|or|and)\s+)$", re.I)
_NOT_A_MODIFIER = {"with", "without", "there", "which", "that", "this", "these", "those", "both", "either", "neither"}


def matched_mentions(sentence: str, matcher_set: MatcherSet, heading: str = "", region: str = "") -> list[Mention]:
    """The mentions the vocabulary's phrasings, descriptions and measurements match in a sentence:
    longest first, then phrasings that need their context (the sentence, the `heading`, the report's
    `region`), then the more specific entity; no overlaps."""
    candidates: list[tuple[Mention, bool]] = []  # each with whether its phrasing needs no context
    covered = []
    for matcher in matcher_set.relevant(sentence):
        context = matcher.context
        if context is not None and not (
            context.search(sentence) or (heading and context.search(heading)) or (region and context.search(region))
        ):
            continue
        has_state = "state" in matcher.pattern.groupindex
        described = has_state or matcher.measurement is not None
        for match in matcher.pattern.finditer(sentence):
            how: MentionStatus | str | None = INVERTED if matcher.normal else None
            if how is None and has_state and match.group("state"):
                how = PREDICATE
            if matcher.measurement is not None:
                verdict = matcher.measurement.verdict(measured_sizes(match.group("size"), match.group("unit")))
                if verdict is None:
                    continue  # between the limits: the size alone says nothing
                if verdict and _SIZE_CALLED_NORMAL.match(sentence, match.end("size")):
                    verdict = False  # "CBD 8 mm, within expected limits after cholecystectomy"
                how = MentionStatus.POSITIVE if verdict else MentionStatus.NEGATIVE
            if has_state and match.group("state"):
                start, end = match.span("state")
                # the subject is the state's: no second mention of the finding at it ("CBD [not dilated]")
                covered.append((match.start(), start, matcher.entity))
            else:
                start, end = match.span()
            if end > start:
                mention = Mention(start, end, matcher.entity, how, described, min(start, match.start()))
                candidates.append((mention, context is None))
    candidates = [
        (m, free)
        for m, free in candidates
        if not any(m.entity is e and m.start < e_end and s < m.end for s, e_end, e in covered)
    ]
    candidates.sort(
        key=lambda c: (
            -(c[0].end - c[0].start),
            c[0].how is None,
            c[1],
            _LEVEL_PRIORITY[c[0].entity.level],
            c[0].start,
        )
    )
    taken: list[Mention] = []
    for mention in (m for m, _ in candidates if not m.described):
        if all(mention.end <= t.start or mention.start >= t.end for t in taken):
            taken.append(mention)
    # a name that is also a measured subject is read by its size ("CTR 0.44", "spleen 11.5 cm")
    for mention in (m for m, _ in candidates if isinstance(m.how, MentionStatus)):
        taken = [
            mention if (t.start, t.end, t.entity) == (mention.start, mention.end, mention.entity) else t for t in taken
        ]
    # Descriptions come after names: they may hold other entities' names ("enlargement of the [spleen]")
    # and share their span with another description ("the liver and spleen are [enlarged]"),
    # but never cut into a name.
    for mention in (m for m, _ in candidates if m.described):
        overlapping = [t for t in taken if not (mention.end <= t.start or mention.start >= t.end)]
        if all(
            t.entity is not mention.entity
            and (
                (mention.start <= t.start and t.end <= mention.end and not t.described)
                or (t.described and (t.start, t.end) == (mention.start, mention.end))
            )
            for t in overlapping
        ):
            taken.append(mention)
    return sorted(taken, key=lambda m: m.start)


def elided_mentions(sentence: str, taken: list[Mention], matchers: MatcherSet, region: str) -> list[Mention]:
    """Names a coordination shortens: the word that shares a named finding's modifier or head is a
    mention of the entity the full phrase names ("No pericardial effusion or thickening")."""

    def free(start: int, end: int) -> bool:
        return all(end <= t.start or start >= t.end for t in [*taken, *found])

    def names(phrase: str) -> Entity | None:
        whole = [m for m in matched_mentions(phrase, matchers, "", region) if not m.described]
        return whole[0].entity if len(whole) == 1 and (whole[0].start, whole[0].end) == (0, len(phrase)) else None

    found: list[Mention] = []
    for mention in [t for t in taken if not t.described]:
        words = sentence[mention.start : mention.end].split()
        if len(words) < 2:
            continue
        after = _SHARED_MODIFIER.match(sentence, mention.end)
        if after and after.group(1).lower() not in _NOT_A_MODIFIER and free(*after.span(1)):
            entity = names(" ".join([*words[:-1], after.group(1)]))
            if entity is not None and entity is not mention.entity:
                found.append(Mention(*after.span(1), entity, None, False, after.start(1)))
        before = _SHARED_HEAD.search(sentence[: mention.start])
        if before and before.group(1).lower() not in _NOT_A_MODIFIER and free(*before.span(1)):
            entity = names(" ".join([before.group(1), *words[1:]]))
            if entity is not None and entity is not mention.entity:
                found.append(Mention(*before.span(1), entity, None, False, before.start(1)))
    return found


__all__ = [
    "INVERTED",
    "PREDICATE",
    "MatcherSet",
    "Mention",
    "compiled_matchers",
    "elided_mentions",
    "how_read",
    "matched_mentions",
    "outermost",
]
