"""The template backend's closed questions about one finding in two reports, one per comparison
dimension the two statements support (MedReCo Appendix S1.4): presence, and, when both reports show
the finding, location, size or grade, number, and the descriptive dimensions (margins, internal
composition, morphology, internal characteristics, associated findings, distribution, aetiology).
Each question has four lettered options and a reference answer for its open-ended twin; the values
compared are the statements' attributes, read when the statements were made."""

from __future__ import annotations

import numpy as np

from ..reports.attributes import (
    AETIOLOGY_TERMS,
    ASSOCIATED_TERMS,
    COMPOSITIONS,
    DISTRIBUTION_TERMS,
    INTERNAL_TERMS,
    LOBES,
    MARGINS,
    MORPHOLOGY_TERMS,
    Attributes,
    location_phrases,
)
from ..reports.ontology import Entity
from ..reports.statement import EntityStatement, MentionStatus

LETTERS = "ABCD"
# a question: (dimension, question, options, answer letter, open answer)
Question = tuple[str, str, list[str], str, str]


def entity_noun(entity: Entity) -> str:
    """How a question names the entity: its first plain synonym ("nodule", "cardiomegaly"), else its term."""
    plain = [p for p in entity.synonyms if not p.startswith("re:")]
    return plain[0] if plain else entity.term.split("_")[0]


def presence_subject(entity: Entity) -> str:
    """What a presence question asks about: a finding itself, or an abnormality of a structure (every
    case shows the kidney; a structure is "positive" when the report calls it abnormal)."""
    return f"an abnormality of the {entity_noun(entity)}" if entity.level == "anatomy" else entity_noun(entity)


def four_options(answer: str, pool: list[str], rng: np.random.Generator) -> tuple[list[str], str]:
    """The answer and up to three distractors drawn from `pool`, shuffled; returns (options, letter)."""
    distractors = [o for o in dict.fromkeys(pool) if o != answer]
    chosen = (
        [str(o) for o in rng.choice(distractors, size=min(3, len(distractors)), replace=False)] if distractors else []
    )
    options = [answer, *chosen]
    order = rng.permutation(len(options))
    options = [options[i] for i in order]
    return options, LETTERS[options.index(answer)]


# The paper's comparison aspects (Appendix S1.4, prompt S4) beyond presence, location, size and
# number: dimension -> (the `Attributes` field compared, question, reference answer).
DESCRIPTIVE_DIMENSIONS = {
    "margins": (
        "margins",
        "How do the margins of the {noun} compare?",
        "The {noun} has {u} margins in {la} and {v} margins in {lb}.",
    ),
    "composition": (
        "composition",
        "How does the internal composition of the {noun} compare?",
        "The {noun} is {u} in {la} and {v} in {lb}.",
    ),
    "morphology": (
        "morphology",
        "How does the shape of the {noun} compare between the two cases?",
        "The {noun} is {u} in {la} and {v} in {lb}.",
    ),
    "internal characteristics": (
        "internal",
        "How do the internal characteristics of the {noun} compare?",
        "The {noun} shows {u} in {la} and {v} in {lb}.",
    ),
    "associated findings": (
        "associated",
        "Which associated findings accompany the {noun} in each case?",
        "The {noun} is accompanied by {u} in {la} and by {v} in {lb}.",
    ),
    "distribution": (
        "distribution",
        "How does the distribution of the {noun} compare?",
        "The {noun} is {u} in {la} and {v} in {lb}.",
    ),
    "aetiology": (
        "aetiology",
        "What is the likely aetiology of the {noun} in each case?",
        "The {noun} is likely {u} in {la} and {v} in {lb}.",
    ),
}
# how an attribute value reads in an option or answer (others read as they are)
DISPLAY = {
    "irregular": "irregularly shaped",
    "homogeneous": "homogeneous content",
    "heterogeneous": "heterogeneous content",
}
_TEXTURES = ("homogeneous", "heterogeneous")
# Distractor values per dimension, narrowed per modality family so that options stay plausible
# (no acoustic shadowing for a chest radiograph, no ground glass in the liver).
_CHEST, _OTHER = ("CXR", "CT"), ("BRAIN", "US")
DIMENSION_VALUES: dict[str, dict[str, tuple[str, ...]]] = {
    "margins": {"*": MARGINS},
    "composition": {"*": COMPOSITIONS, **dict.fromkeys(_OTHER, ("solid", "cystic", "calcified", "fatty"))},
    "morphology": {"*": tuple(MORPHOLOGY_TERMS)},
    "internal characteristics": {
        "*": tuple(INTERNAL_TERMS),
        "CXR": ("homogeneous", "heterogeneous", "cavitation", "calcification", "air bronchograms"),
        **dict.fromkeys(_OTHER, tuple(t for t in INTERNAL_TERMS if t != "air bronchograms")),
    },
    "associated findings": {
        "*": tuple(ASSOCIATED_TERMS),
        **dict.fromkeys(_CHEST, ("volume loss", "air-fluid level", "halo", "satellite nodules", "oedema")),
        "BRAIN": ("oedema", "mass effect", "midline shift"),
        "US": ("posterior acoustic shadowing", "posterior acoustic enhancement", "oedema"),
    },
    "distribution": {"*": tuple(DISTRIBUTION_TERMS)},
    "aetiology": {"*": tuple(AETIOLOGY_TERMS)},
}
LOCATION_ANSWERS = {
    "side": "The {noun} is on the {u} side in {la} and on the {v} side in {lb}.",
    "lobe": "The {noun} lies in the {u} in {la} and in the {v} in {lb}.",
    "zone": "The {noun} lies in the {u} in {la} and in the {v} in {lb}.",
    "depth": "The {noun} is {u} in {la} and {v} in {lb}.",
}


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _phrase(value) -> str | None:
    """An attribute value as an option reads it: sets joined (texture first), display names used."""
    if not value:
        return None
    if isinstance(value, str):
        return DISPLAY.get(value, value)
    ordered = [t for t in _TEXTURES if t in value] + sorted(t for t in value if t not in _TEXTURES)
    return " and ".join(DISPLAY.get(t, t) for t in ordered)


def _values(dimension: str, family: str) -> tuple[str, ...]:
    table = DIMENSION_VALUES[dimension]
    return tuple(_phrase(v) for v in table.get(family, table["*"]))


def _location_values(kind: str, u: str, v: str) -> tuple[str, ...]:
    """Plausible other locations at the granularity compared (the other lobes, the other side ...)."""
    if kind == "side":
        return ("right", "left", "bilateral")
    if kind == "lobe":
        return (*LOBES, "lingula")
    flipped = {"right": "left", "left": "right"}
    return tuple(
        " ".join(flipped.get(word, word) if i == 0 else word for i, word in enumerate(phrase.split()))
        for phrase in (u, v)
    )


def _categorical(
    u: str, v: str, vocabulary, la: str, lb: str, rng: np.random.Generator, same: str | None = None
) -> tuple[list[str], str, str]:
    """Four options comparing a value in two cases ("Smooth in Case A, spiculated in Case B",
    "Round in both", or `same`), the distractors made of the two values and plausible others from
    `vocabulary`; returns (options, answer letter, answer)."""
    answer = (same or f"{_cap(u)} in both") if u == v else f"{_cap(u)} in {la}, {v} in {lb}"
    others = [w for w in dict.fromkeys(vocabulary) if w not in (u, v)]
    extra = [others[int(i)] for i in rng.permutation(len(others))[: 3 - len({u, v})]]
    values = list(dict.fromkeys([u, v, *extra]))
    pool = [answer, *(f"{_cap(p)} in {la}, {q} in {lb}" for p in values for q in values if p != q)]
    pool += [same] if same else [f"{_cap(p)} in both" for p in values]
    options, letter = four_options(answer, pool, rng)
    return options, letter, answer


def _presence(a: EntityStatement, b: EntityStatement, labels) -> str | None:
    if {a.status, b.status} - {MentionStatus.POSITIVE, MentionStatus.NEGATIVE}:
        return None
    first, second = a.status is MentionStatus.POSITIVE, b.status is MentionStatus.POSITIVE
    return {
        (True, True): "Both cases",
        (False, False): "Neither case",
        (True, False): f"{labels[0]} only",
        (False, True): f"{labels[1]} only",
    }[(first, second)]


def closed_questions(
    a: EntityStatement,
    b: EntityStatement,
    entity: Entity,
    rng: np.random.Generator,
    labels: tuple[str, str] = ("Case A", "Case B"),
) -> list[Question]:
    """The questions two statements about `entity` support, in a fixed order (`rng` draws the options):
    presence, and, when both reports show the finding, location, size or number, and the
    descriptive dimensions."""
    questions = _presence_questions(a, b, entity, rng, labels)
    if a.status is MentionStatus.POSITIVE and b.status is MentionStatus.POSITIVE:
        x, y = a.attributes, b.attributes
        questions += _location_questions(x, y, entity, rng, labels)
        questions += _size_questions(x, y, entity, rng, labels)
        questions += _descriptive_questions(x, y, entity, rng, labels)
    return questions


def _presence_questions(
    a: EntityStatement, b: EntityStatement, entity: Entity, rng: np.random.Generator, labels: tuple[str, str]
) -> list[Question]:
    """Which case shows the finding, when both reports say whether it is there."""
    presence = _presence(a, b, labels)
    if presence is None:
        return []
    la, lb = labels
    options, letter = four_options(presence, ["Both cases", "Neither case", f"{la} only", f"{lb} only"], rng)
    shown = presence_subject(entity)
    text = {
        "Both cases": f"Both {la} and {lb} show {shown}.",
        "Neither case": f"Neither case shows {shown}.",
        f"{la} only": f"Only {la} shows {shown}.",
        f"{lb} only": f"Only {lb} shows {shown}.",
    }[presence]
    return [("presence", f"Which case shows {shown}?", options, letter, text)]


def _location_questions(
    x: Attributes, y: Attributes, entity: Entity, rng: np.random.Generator, labels: tuple[str, str]
) -> list[Question]:
    """Where the finding is in each case, at the finest granularity both texts state."""
    where = location_phrases(x, y)
    if where is None:
        return []
    u, v, kind = where
    noun, (la, lb) = entity_noun(entity), labels
    options, letter, _ = _categorical(u, v, _location_values(kind, u, v), la, lb, rng, f"The same {kind}")
    question = f"How does the {'side' if kind == 'side' else 'location'} of the {noun} compare between the two cases?"
    return [("location", question, options, letter, LOCATION_ANSWERS[kind].format(noun=noun, u=u, v=v, la=la, lb=lb))]


def _size_questions(
    x: Attributes, y: Attributes, entity: Entity, rng: np.random.Generator, labels: tuple[str, str]
) -> list[Question]:
    """How the finding's size (by its measure, else its grade) and number compare."""
    noun, (la, lb) = entity_noun(entity), labels
    questions: list[Question] = []
    for name, dimension, more, less in (
        ("size_mm", "size", "larger", "smaller"),
        ("grade", "size", "larger", "smaller"),
        ("number", "number", "more numerous", "fewer"),
    ):
        u, v = getattr(x, name), getattr(y, name)
        if u is None or v is None or dimension in {d for d, *_ in questions}:
            continue
        tolerance = 0.2 * max(u, v) if name == "size_mm" else 0
        answer = (
            "Similar in both"
            if abs(u - v) <= tolerance
            else (f"{more.capitalize()} in {lb}" if v > u else f"{less.capitalize()} in {lb}")
        )
        pool = ["Similar in both", f"{more.capitalize()} in {lb}", f"{less.capitalize()} in {lb}", f"Absent in {lb}"]
        options, letter = four_options(answer, pool, rng)
        question = f"How does the {dimension} of the {noun} in {lb} compare with {la}?"
        questions.append((dimension, question, options, letter, f"The {noun} is {answer[0].lower() + answer[1:]}."))
    return questions


def _descriptive_questions(
    x: Attributes, y: Attributes, entity: Entity, rng: np.random.Generator, labels: tuple[str, str]
) -> list[Question]:
    """One question per descriptive dimension both texts state a value of."""
    noun, (la, lb) = entity_noun(entity), labels
    questions: list[Question] = []
    for dimension, (name, question, reference) in DESCRIPTIVE_DIMENSIONS.items():
        u, v = _phrase(getattr(x, name)), _phrase(getattr(y, name))
        if not u or not v:
            continue
        options, letter, _ = _categorical(u, v, _values(dimension, entity.family), la, lb, rng)
        answer = reference.format(noun=noun, u=u, v=v, la=la, lb=lb)
        questions.append((dimension, question.format(noun=noun), options, letter, answer))
    return questions


__all__ = [
    "DESCRIPTIVE_DIMENSIONS",
    "DIMENSION_VALUES",
    "DISPLAY",
    "LETTERS",
    "LOCATION_ANSWERS",
    "Question",
    "closed_questions",
    "entity_noun",
    "four_options",
    "presence_subject",
]
