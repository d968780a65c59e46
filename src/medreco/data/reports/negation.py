"""Report variants that differ from the original in one finding (CLIP-clinic, sections 3 and 4.1).

A report decomposed into entity statements says, for each entity, which sentences carry it and
whether the finding is present. That is enough to rewrite a report about one entity without a
language model: drop the entity's sentences (the *omitted* variant, CXR-Align's r^r) and put a
sentence denying it at the start, middle or end (the *negated* variant, r^n). The denial is worded
as the archive itself words it: the most frequent negative statement of that entity among the
reports the phrasebook was built from (training reports), so a model cannot spot the variant by an
unusual phrasing; an entity the archive never denies is never the one rewritten.

The same phrasebook flips single statements for the statement-level hard negatives: a positive or
uncertain statement becomes its denial, a negative one a positive statement of the same entity
drawn from the phrasebook (CLIP-clinic's "a report with a single positive entity" for normal
studies, at the statement level)."""

from __future__ import annotations

import random
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .ontology import Ontology

ABNORMAL_STATUSES = ("positive", "uncertain")  # what a denial contradicts
TEMPORAL = re.compile(r"\b(?:new|now|prior|previous(?:ly)?|again|unchanged|resolved|interval)\b", re.IGNORECASE)


def _sentence_text(statement: Mapping) -> str:
    return " ".join(statement.get("sentences", [])).strip()


def _as_sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else f"{text}."


@dataclass
class NegationPhrasebook:
    """How an archive's reports deny and assert each entity: entity id -> its most frequent
    negative statement (`denials`), and -> its distinct positive statements (`assertions`), from
    decomposed statements (`{entity: {"status", "sentences"}}` per report); the vocabulary's
    `anatomy` entities (structures, not findings: never denied, and a sentence shared
    with one still changes a single finding)."""

    denials: dict[str, str] = field(default_factory=dict)
    assertions: dict[str, list[str]] = field(default_factory=dict)
    anatomy: frozenset[str] = frozenset()

    @classmethod
    def from_statements(
        cls, statements: Iterable[Mapping[str, Mapping]], ontology: Ontology | None = None
    ) -> NegationPhrasebook:
        """The phrasebook of some reports' statements, over `ontology` (default: the packaged vocabulary)."""
        entities = (ontology or Ontology.load()).entities()
        denied: dict[str, Counter] = defaultdict(Counter)
        asserted: dict[str, set[str]] = defaultdict(set)
        for report_statements in statements:
            for entity, statement in report_statements.items():
                text = _sentence_text(statement)
                if not text:
                    continue
                if statement["status"] == "negative":
                    denied[entity][text] += 1
                elif statement["status"] == "positive":
                    asserted[entity].add(text)
        # the most frequent wording that reads without a prior ("No new effusion." needs one); ties go
        # to the alphabetically first, so the book is reproducible
        denials = {
            e: min(c.items(), key=lambda item: (bool(TEMPORAL.search(item[0])), -item[1], item[0]))[0]
            for e, c in denied.items()
        }
        anatomy = frozenset(entity.id for entity in entities if entity.level == "anatomy")
        return cls(denials, {e: sorted(t) for e, t in asserted.items()}, anatomy)

    def denial(self, entity: str) -> str | None:
        """A sentence saying the entity is absent, in the archive's words (None: it never says it)."""
        return _as_sentence(self.denials[entity]) if entity in self.denials else None

    def flipped(self, entity: str, statement: Mapping, rng: random.Random) -> str | None:
        """The statement with its finding's presence reversed, or None when the phrasebook has no
        way to say it in the archive's words)."""
        if statement["status"] in ABNORMAL_STATUSES:
            return self.denial(entity)
        if statement["status"] == "negative" and self.assertions.get(entity):
            return _as_sentence(rng.choice(self.assertions[entity]))
        return None


def _own_sentences(statements: Mapping[str, Mapping], entity: str, anatomy: frozenset[str]) -> list[str] | None:
    """The entity's sentences, or None when one of them also carries another finding (removing it
    would change two findings, not one; the structure a finding sits in does not count)."""
    own = [s.strip() for s in statements[entity].get("sentences", []) if s.strip()]
    if not own:
        return None
    others = {
        s.strip() for e, st in statements.items() if e != entity and e not in anatomy for s in st.get("sentences", [])
    }
    return None if others & set(own) else own


def without_sentences(report: str, sentences: Iterable[str]) -> str | None:
    """The report with every occurrence of `sentences` removed (whitespace tidied), or None when one
    of them is not in it."""
    text = report
    for sentence in sentences:
        if sentence not in text:
            return None
        text = text.replace(sentence, " ")
    return re.sub(r"[ \t]+", " ", re.sub(r" *\n *", "\n", text)).strip()


@dataclass(frozen=True)
class ReportVariants:
    """A report rewritten about one `entity`: `omitted` (its sentences removed) and `negated`
    (removed, and a denial inserted)."""

    entity: str
    omitted: str
    negated: str


def report_variants(
    report: str,
    statements: Mapping[str, Mapping],
    phrasebook: NegationPhrasebook,
    rng: random.Random,
    entities: Iterable[str] | None = None,
) -> ReportVariants | None:
    """CXR-Align's two variants of a report about one of its positive findings, chosen with `rng`
    among `entities` (default: every finding the report asserts whose sentences carry no other
    finding and that the phrasebook can deny); None when the report asserts no such finding (a normal study)."""
    allowed = None if entities is None else set(entities)
    anatomy = phrasebook.anatomy
    candidates = [
        e
        for e in sorted(statements)
        if statements[e]["status"] == "positive"
        and e not in anatomy
        and e in phrasebook.denials
        and (allowed is None or e in allowed)
        and _own_sentences(statements, e, anatomy)
    ]
    if not candidates:
        return None
    entity = rng.choice(candidates)
    omitted = without_sentences(report, _own_sentences(statements, entity, anatomy))
    if omitted is None:
        return None
    # between sentences, the report's layout (section headings, line breaks) kept
    boundaries = [0, *(m.end() for m in re.finditer(r"(?<=[.!?])\s+", omitted)), len(omitted)]
    cut = rng.choice(sorted({boundaries[0], boundaries[len(boundaries) // 2], boundaries[-1]}))
    denial = phrasebook.denial(entity)
    head, tail = omitted[:cut].rstrip(), omitted[cut:].lstrip()
    negated = " ".join(part for part in (head, denial, tail) if part)
    return ReportVariants(entity, omitted, negated)


__all__ = ["NegationPhrasebook", "ReportVariants", "report_variants", "without_sentences"]
