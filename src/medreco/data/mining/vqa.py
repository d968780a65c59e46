"""Comparative visual question answering from two reports (MedReCo section 4.4, Appendix S1.4).

For a pair of studies and an entity, the template backend writes one closed-ended 4-option
question per comparison dimension the two statements support (the paper's presence, location,
size, morphology, margins, internal characteristics, associated findings and potential aetiology,
plus number, internal composition, distribution, and interval change for same-patient pairs) and a
matching open-ended question-answer. Filters follow Table S4: image dependency (the answer must change when either
image's finding changes), language prior (drop questions a text-only model answers from the
wording alone, trained on one half and tested on the other with shuffled options), bias
(shuffled options, swapped image order), duplicates."""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import math
import random
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace

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
    location_phrases,
    read_attributes,
)
from ..reports.decomposition import EntityStatement, MentionStatus
from ..reports.llm import (
    PROMPT_IMAGE_DEPENDENCY,
    PROMPT_OPEN_ENDED,
    PROMPT_VQA,
    CachedChat,
    ChatBackend,
    LLMError,
    json_payload,
)
from ..reports.ontology import Entity
from .longitudinal import consistent_change_label

logger = logging.getLogger(__name__)
LETTERS = "ABCD"


def closed_prompt(question: str, options: list[str]) -> str:
    """The question with lettered options, as the model reads it."""
    lines = [question, *(f"{LETTERS[i]}. {option}" for i, option in enumerate(options))]
    return "\n".join(lines) + "\nAnswer with the letter and the option."


def closed_answer(options: list[str], answer: str) -> str:
    """The answer to a closed question as the model says it: the letter and the option."""
    return f"{answer}. {options[LETTERS.index(answer)]}"


@dataclass
class VQASample:
    """One closed-ended question (with `options` and `answer` letter) and its open-ended twin."""

    study_a: str
    study_b: str
    entity_id: str
    dimension: str
    question: str
    options: list[str]
    answer: str
    open_question: str
    open_answer: str
    labels: tuple[str, str] = ("Case A", "Case B")
    meta: dict = field(default_factory=dict)

    @property
    def answer_text(self) -> str:
        return self.options[LETTERS.index(self.answer)]

    def to_dict(self) -> dict:
        return asdict(self)


def _noun(entity: Entity) -> str:
    """How a question names the entity: its first plain synonym ("nodule", "cardiomegaly"), else its term."""
    plain = [p for p in entity.synonyms if not p.startswith("re:")]
    return plain[0] if plain else entity.term.split("_")[0]


def _shown(entity: Entity) -> str:
    """What a presence question asks about: a finding itself, or an abnormality of a structure (every
    case shows the kidney; a structure is "positive" when the report calls it abnormal)."""
    return f"an abnormality of the {_noun(entity)}" if entity.level == "anatomy" else _noun(entity)


def _four(answer: str, pool: list[str], rng: np.random.Generator) -> tuple[list[str], str]:
    distractors = [o for o in dict.fromkeys(pool) if o != answer]
    chosen = (
        [str(o) for o in rng.choice(distractors, size=min(3, len(distractors)), replace=False)] if distractors else []
    )
    options = [answer, *chosen]
    order = rng.permutation(len(options))
    options = [options[i] for i in order]
    return options, LETTERS[options.index(answer)]


# ------------------------------------------------------------ descriptive comparison dimensions
# The paper's comparison aspects (Appendix S1.4, prompt S4) beyond presence, location, size and
# number: dimension -> (attribute read by `read_attributes`, question, reference answer).
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
    options, letter = _four(answer, pool, rng)
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
    labels=("Case A", "Case B"),
    longitudinal: bool = False,
) -> list[tuple[str, str, list[str], str, str]]:
    """(dimension, question, options, answer letter, open answer) for each dimension the texts support."""
    noun, out = _noun(entity), []
    la, lb = labels
    presence = _presence(a, b, labels)
    if presence is not None:
        pool = ["Both cases", "Neither case", f"{la} only", f"{lb} only"]
        options, letter = _four(presence, pool, rng)
        shown = _shown(entity)
        text = {
            "Both cases": f"Both {la} and {lb} show {shown}.",
            "Neither case": f"Neither case shows {shown}.",
            f"{la} only": f"Only {la} shows {shown}.",
            f"{lb} only": f"Only {lb} shows {shown}.",
        }[presence]
        out.append(("presence", f"Which case shows {shown}?", options, letter, text))
    if a.status is MentionStatus.POSITIVE and b.status is MentionStatus.POSITIVE:
        x, y = read_attributes(a.text), read_attributes(b.text)
        where = location_phrases(x, y)
        if where is not None:
            u, v, kind = where
            options, letter, _ = _categorical(u, v, _location_values(kind, u, v), la, lb, rng, f"The same {kind}")
            out.append(
                (
                    "location",
                    f"How does the {'side' if kind == 'side' else 'location'} of the {noun} compare between the "
                    "two cases?",
                    options,
                    letter,
                    LOCATION_ANSWERS[kind].format(noun=noun, u=u, v=v, la=la, lb=lb),
                )
            )
        for name, dimension, more, less in (
            ("size_mm", "size", "larger", "smaller"),
            ("grade", "size", "larger", "smaller"),
            ("number", "number", "more numerous", "fewer"),
        ):
            u, v = getattr(x, name), getattr(y, name)
            if u is None or v is None or dimension in {d for d, *_ in out}:
                continue
            tolerance = 0.2 * max(u, v) if name == "size_mm" else 0
            answer = (
                "Similar in both"
                if abs(u - v) <= tolerance
                else (f"{more.capitalize()} in {lb}" if v > u else f"{less.capitalize()} in {lb}")
            )
            pool = [
                "Similar in both",
                f"{more.capitalize()} in {lb}",
                f"{less.capitalize()} in {lb}",
                f"Absent in {lb}",
            ]
            options, letter = _four(answer, pool, rng)
            out.append(
                (
                    dimension,
                    f"How does the {dimension} of the {noun} in {lb} compare with {la}?",
                    options,
                    letter,
                    f"The {noun} is {answer[0].lower() + answer[1:]}.",
                )
            )
        for dimension, (name, question, reference) in DESCRIPTIVE_DIMENSIONS.items():
            u, v = _phrase(getattr(x, name)), _phrase(getattr(y, name))
            if not u or not v:
                continue
            values = _values(dimension, entity.family)
            options, letter, _ = _categorical(u, v, values, la, lb, rng)
            out.append(
                (
                    dimension,
                    question.format(noun=noun),
                    options,
                    letter,
                    reference.format(noun=noun, u=u, v=v, la=la, lb=lb),
                )
            )
    if longitudinal:
        change = consistent_change_label(a, b)
        if change is not None:
            out.append(("change", *change_question(noun, change.label, change.attribute, rng)))
    return out


CHANGE_OPTIONS = ("new", "resolved", "increased", "decreased", "stable", "qualitatively changed")
# the reference answer of a qualitative change, per follow-up attribute (longitudinal.CHANGE_ATTRIBUTES)
QUALITATIVE_CHANGES = {
    "margins": "The margins of the {noun} have changed.",
    "composition": "The internal composition of the {noun} has changed.",
    "distribution": "The distribution of the {noun} has changed.",
    "location": "The {noun} has changed in location.",
    "morphology": "The shape of the {noun} has changed.",
}


def change_sentence(noun: str, label: str, attribute: str) -> str:
    """The reference answer for an interval change ("The nodule has increased in size.")."""
    if label == "new":
        return f"The {noun} is new."
    if label == "stable":
        return f"The {noun} is stable."
    if label == "qualitatively changed":
        return QUALITATIVE_CHANGES.get(attribute, "The {noun} has changed in character.").format(noun=noun)
    detail = f" in {attribute}" if attribute not in ("presence", "overall") else ""
    return f"The {noun} has {label}{detail}."


def change_question(noun: str, label: str, attribute: str, rng: np.random.Generator) -> tuple:
    """(question, four options, answer letter, open answer) asking how a finding changed."""
    options, letter = _four(label, list(CHANGE_OPTIONS), rng)
    question = f"How has the {noun} changed from the prior to the current study?"
    return question, options, letter, change_sentence(noun, label, attribute)


def longitudinal_questions(rows: list[dict], ontology, seed: int = 0) -> list[dict]:
    """Closed questions from the mined longitudinal table (prior, current, entity_id, label,
    attribute): the follow-up benchmark of MedReCo section 4.4, in the VQA table's columns (the
    prior is `study_a`, labelled "Prior"), with `label` and `attribute` kept for stratified scores."""
    questions = []
    for row in rows:
        rng = np.random.default_rng(
            int(
                hashlib.sha256(f"{seed}:{row['prior']}:{row['current']}:{row['entity_id']}".encode()).hexdigest()[:8],
                16,
            )
        )
        noun = _noun(ontology[row["entity_id"]])
        question, options, letter, open_answer = change_question(noun, row["label"], row["attribute"], rng)
        questions.append(
            {
                "study_a": row["prior"],
                "study_b": row["current"],
                "entity_id": row["entity_id"],
                "dimension": "change",
                "question": question,
                "options": options,
                "answer": letter,
                "open_question": f"Compare the {noun} between Prior and Current.",
                "open_answer": open_answer,
                "labels": ["Prior", "Current"],
                "split": row["split"],
                "label": row["label"],
                "attribute": row["attribute"],
            }
        )
    return questions


# One open question per comparison dimension: a pair's questions about one entity never share a
# wording while their reference answers differ.
OPEN_QUESTIONS = {
    "presence": "Describe whether {la} and {lb} show {noun}.",
    "location": "Where is the {noun} in {la} and in {lb}?",
    "size": "Compare the size of the {noun} in {lb} with {la}.",
    "number": "Compare the number of {noun} in {lb} with {la}.",
    "margins": "Describe the margins of the {noun} in {la} and in {lb}.",
    "composition": "Describe the internal composition of the {noun} in {la} and in {lb}.",
    "morphology": "Describe the shape of the {noun} in {la} and in {lb}.",
    "internal characteristics": "Describe the internal characteristics of the {noun} in {la} and in {lb}.",
    "associated findings": "Describe the findings accompanying the {noun} in {la} and in {lb}.",
    "distribution": "Describe the distribution of the {noun} in {la} and in {lb}.",
    "aetiology": "What is the likely aetiology of the {noun} in {la} and in {lb}?",
    "change": "Describe how the {noun} has changed from the prior to the current study.",
}


def open_question(dimension: str, noun: str, labels: tuple[str, str] = ("Case A", "Case B")) -> str:
    """The open-ended question about one comparison dimension of a finding."""
    template = OPEN_QUESTIONS.get(dimension, "Compare the " + dimension + " of the {noun} between {la} and {lb}.")
    return template.format(noun=noun, la=labels[0], lb=labels[1])


def generate_vqa(
    statements_a: dict[str, EntityStatement],
    statements_b: dict[str, EntityStatement],
    entities: list[Entity],
    study_a: str,
    study_b: str,
    seed: int = 0,
    longitudinal: bool = False,
) -> list[VQASample]:
    """Closed- and open-ended questions about every entity two reports let us compare."""
    rng = np.random.default_rng(int(hashlib.sha256(f"{seed}:{study_a}:{study_b}".encode()).hexdigest()[:8], 16))
    labels = ("Prior", "Current") if longitudinal else ("Case A", "Case B")
    samples = []
    for entity in entities:
        a, b = statements_a.get(entity.id), statements_b.get(entity.id)
        if a is None or b is None:
            continue
        for dimension, question, options, answer, open_answer in closed_questions(
            a, b, entity, rng, labels, longitudinal
        ):
            samples.append(
                VQASample(
                    study_a,
                    study_b,
                    entity.id,
                    dimension,
                    question,
                    options,
                    answer,
                    open_question=open_question(
                        dimension, _shown(entity) if dimension == "presence" else _noun(entity), labels
                    ),
                    open_answer=open_answer,
                    labels=labels,
                )
            )
    return samples


def sample_pairs(
    studies: Sequence[str], patient_of: Mapping[str, str], budget: int, seed: int | str = 0
) -> list[tuple[str, str]]:
    """Up to `budget` distinct unordered study pairs drawn at random, with every study in at most
    ceil(2 budget / studies) + 1 of them and every patient in at most ceil(2 budget / patients) + 1
    (a pair counts once for each side): no study or patient dominates the questions. Pairs are
    drawn from every combination (shuffled) for groups up to 2 million pairs, by rejection above."""
    studies = sorted(studies)
    count = len(studies)
    budget = min(budget, count * (count - 1) // 2)
    if budget <= 0:
        return []
    rng = random.Random(f"{seed}:{count}:{budget}")
    study_cap = math.ceil(2 * budget / count) + 1
    patient_cap = math.ceil(2 * budget / len({patient_of[s] for s in studies})) + 1
    study_used: Counter = Counter()
    patient_used: Counter = Counter()
    chosen: set[tuple[str, str]] = set()

    def take(a: str, b: str) -> None:
        pair = (a, b) if a < b else (b, a)
        patients = Counter([patient_of[a], patient_of[b]])
        if pair in chosen or study_used[a] >= study_cap or study_used[b] >= study_cap:
            return
        if any(patient_used[patient] + n > patient_cap for patient, n in patients.items()):
            return
        chosen.add(pair)
        study_used.update((a, b))
        patient_used.update(patients)

    if count * (count - 1) // 2 <= 2_000_000:
        candidates = list(itertools.combinations(studies, 2))
        rng.shuffle(candidates)
        for a, b in candidates:
            take(a, b)
            if len(chosen) == budget:
                break
    else:
        for _ in range(50 * budget):
            a, b = rng.sample(studies, 2)
            take(a, b)
            if len(chosen) == budget:
                break
    ordered = sorted(chosen)
    rng.shuffle(ordered)
    return ordered


def vqa_over_pairs(
    pairs, statements: dict[str, dict[str, EntityStatement]], entities_for, seed: int = 0
) -> list[VQASample]:
    """Questions for many study pairs: `pairs` yields (study_a, study_b, same_patient) and
    `entities_for(study_id)` gives the entities to ask about for a study's modality."""
    samples = []
    for study_a, study_b, same_patient in pairs:
        samples += generate_vqa(
            statements[study_a],
            statements[study_b],
            entities_for(study_a),
            study_a,
            study_b,
            seed,
            longitudinal=same_patient,
        )
    return samples


# ----------------------------------------------------------------------------------- filters


def _opposite(statement: EntityStatement) -> EntityStatement:
    if statement.status is MentionStatus.POSITIVE:
        return EntityStatement(statement.entity_id, MentionStatus.NEGATIVE, ["No finding."])
    return EntityStatement(
        statement.entity_id, MentionStatus.POSITIVE, ["Moderate finding on the left, 25 mm, spiculated solid."]
    )


def template_answer(sample: VQASample, entity: Entity):
    """The answer the template backend gives to `sample`'s question for any two statements."""
    rng = np.random.default_rng(0)

    def answer_for(x: EntityStatement, y: EntityStatement) -> str | None:
        questions = closed_questions(x, y, entity, rng, sample.labels, sample.dimension == "change")
        for dimension, _, options, letter, _ in questions:
            if dimension == sample.dimension:
                return options[LETTERS.index(letter)]
        return None

    return answer_for


def depends_on_both_images(sample: VQASample, a: EntityStatement, b: EntityStatement, answer_for) -> bool:
    """Image-dependency check: the correct answer changes when either case's finding is reversed
    (present <-> absent). `answer_for(a, b)` answers the sample's question (e.g. `template_answer`)."""
    original = sample.answer_text
    return answer_for(_opposite(a), b) != original and answer_for(a, _opposite(b)) != original


def shuffle_and_swap(sample: VQASample, rng: np.random.Generator) -> VQASample:
    """Bias mitigation: random option order, and (half the time) the two images swapped with the
    text and answer rewritten to match."""
    if rng.random() < 0.5 and sample.dimension not in ("change",):
        la, lb = sample.labels
        swap = {la: lb, lb: la}
        pattern = re.compile("|".join(map(re.escape, (la, lb))))

        def flip(text: str) -> str:
            return pattern.sub(lambda m: swap[m.group()], text)

        sample = replace(
            sample,
            study_a=sample.study_b,
            study_b=sample.study_a,
            question=flip(sample.question),
            options=[flip(o) for o in sample.options],
            open_answer=flip(sample.open_answer),
            meta={**sample.meta, "swapped": True},
        )
    answer_text = sample.answer_text
    order = rng.permutation(len(sample.options))
    options = [sample.options[i] for i in order]
    return replace(sample, options=options, answer=LETTERS[options.index(answer_text)])


def deduplicate(samples: list[VQASample]) -> list[VQASample]:
    """Drop repeated questions about the same pair and entity, and questions with repeated options."""
    seen, kept = set(), []
    for sample in samples:
        key = (frozenset((sample.study_a, sample.study_b)), sample.entity_id, sample.dimension)
        if key in seen or len(set(sample.options)) != len(sample.options):
            continue
        seen.add(key)
        kept.append(sample)
    return kept


class TextOnlyAnswerer:
    """A light text-only baseline for the language-prior filter (the paper fine-tuned an 8B LLM;
    this offline stand-in learns how often each option wording is right for each question form)."""

    def __init__(self, smoothing: float = 1.0):
        self.smoothing = smoothing
        self.correct: Counter = Counter()
        self.seen: Counter = Counter()

    @staticmethod
    def _form(question: str) -> str:
        return re.sub(r"\b(case a|case b|prior|current)\b", "", question.lower())

    def fit(self, samples: list[VQASample]) -> TextOnlyAnswerer:
        for sample in samples:
            form = self._form(sample.question)
            for index, option in enumerate(sample.options):
                self.seen[(form, option.lower())] += 1
                self.correct[(form, option.lower())] += LETTERS[index] == sample.answer
        return self

    def predict(self, question: str, options: list[str]) -> str:
        form = self._form(question)
        scores = [
            math.log(
                (self.correct[(form, o.lower())] + self.smoothing) / (self.seen[(form, o.lower())] + 2 * self.smoothing)
            )
            for o in options
        ]
        return LETTERS[int(np.argmax(scores))]


class MajorityAnswerer:
    """The majority-answer baseline: the option whose wording was most often the right answer in the
    training questions, whatever the question (ties: the first such option)."""

    def __init__(self):
        self.right: Counter = Counter()

    def fit(self, samples: list[VQASample]) -> MajorityAnswerer:
        for sample in samples:
            self.right[sample.options[LETTERS.index(sample.answer)].lower()] += 1
        return self

    def predict(self, question: str, options: list[str]) -> str:
        counts = [self.right[o.lower()] for o in options]
        return LETTERS[counts.index(max(counts))]


def language_prior_filter(
    samples: list[VQASample], seed: int = 0, attempts: int = 4, max_correct: int = 2
) -> tuple[list[VQASample], list[VQASample]]:
    """Split in halves; a text-only answerer trained on each half answers the other half's questions
    `attempts` times with shuffled options; questions answered correctly more than `max_correct`
    times are removed (paper: at least 3 of 4). Returns (kept, removed)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(samples))
    halves = [[samples[i] for i in order[: len(order) // 2]], [samples[i] for i in order[len(order) // 2 :]]]
    kept, removed = [], []
    for train, test in ((halves[0], halves[1]), (halves[1], halves[0])):
        model = TextOnlyAnswerer().fit(train)
        for sample in test:
            hits = 0
            for _ in range(attempts):
                shuffled = shuffle_and_swap(replace(sample, meta=dict(sample.meta)), rng)
                hits += model.predict(shuffled.question, shuffled.options) == shuffled.answer
            (removed if hits > max_correct else kept).append(sample)
    return kept, removed


@dataclass
class VQAFilterReport:
    generated: int
    after_image_dependency: int
    after_duplicates: int
    after_language_prior: int
    # the language-prior filter runs on these questions only (`prior_filtered`); the rest pass it
    reached_language_prior: int | None = None
    # the questions it removed, kept apart: a text-only baseline is fitted on the training split as it
    # was before the filter, never on what the filter left (that would weaken it by construction)
    removed_by_language_prior: list[VQASample] = field(default_factory=list, repr=False)

    @property
    def language_prior_removed_share(self) -> float:
        reached = self.after_duplicates if self.reached_language_prior is None else self.reached_language_prior
        return (self.after_duplicates - self.after_language_prior) / reached if reached else 0.0

    def removed(self) -> dict[str, dict[str, float]]:
        """What each filter removed: its count and its share of the questions that reached it."""
        prior_reached = self.after_duplicates if self.reached_language_prior is None else self.reached_language_prior
        steps = (
            ("image_dependency", self.generated, self.after_image_dependency, self.generated),
            ("duplicates", self.after_image_dependency, self.after_duplicates, self.after_image_dependency),
            ("language_prior", self.after_duplicates, self.after_language_prior, prior_reached),
        )
        return {
            name: {
                "removed": before - after,
                "share": round((before - after) / reached, 4) if reached else 0.0,
                "reached": reached,
            }
            for name, before, after, reached in steps
        }


def filter_vqa(
    samples: list[VQASample],
    statements: dict[str, dict[str, EntityStatement]],
    entities: dict[str, Entity],
    seed: int = 0,
    prior_filtered: Callable[[VQASample], bool] | None = None,
) -> tuple[list[VQASample], VQAFilterReport]:
    """All filters of Table S4 in order; `statements[study][entity_id]` gives the texts compared.

    `prior_filtered` says which questions the language-prior filter judges (default: all, as in the
    paper). Mining passes the training split's: a test question deleted because a text-only model
    answers it would make every text-only baseline lose by construction, and the test questions would
    shape the filter that chooses the training questions."""
    dependent = [
        s
        for s in samples
        if depends_on_both_images(
            s,
            statements[s.study_a][s.entity_id],
            statements[s.study_b][s.entity_id],
            template_answer(s, entities[s.entity_id]),
        )
    ]
    unique = deduplicate(dependent)
    judged = [s for s in unique if prior_filtered is None or prior_filtered(s)]
    kept, removed = language_prior_filter(judged, seed)
    if prior_filtered is not None:  # the unjudged questions pass, in the order they came
        removed_ids = {id(s) for s in removed}  # the filter hands back the objects it was given
        kept = [s for s in unique if id(s) not in removed_ids]
    rng = np.random.default_rng(seed)
    final = [shuffle_and_swap(s, rng) for s in kept]
    swapped_removed = [shuffle_and_swap(s, rng) for s in removed]
    report = VQAFilterReport(len(samples), len(dependent), len(unique), len(kept), len(judged), swapped_removed)
    return final, report


# ------------------------------------------------------------ questions written by an LLM (prompts S4-S6)
def llm_vqa(
    chat: ChatBackend | CachedChat,
    entity: Entity,
    a: EntityStatement,
    b: EntityStatement,
    study_a: str,
    study_b: str,
    context_a: str = "",
    context_b: str = "",
    format_retries: int = 2,
) -> list:
    """Comparative questions from the model (prompt S4), each turned open-ended (prompt S5).
    Items that fail validation (four options A-D, an answer among them) are dropped; a reply that
    is not JSON at all is asked for again, then raises `LLMError`."""
    prompt = PROMPT_VQA.format(
        anatomy=entity.anatomy or entity.term,
        abnormality=entity.term,
        text_a=a.text or "not mentioned",
        text_b=b.text or "not mentioned",
        context_a=context_a or "not described",
        context_b=context_b or "not described",
    )
    items = None
    for _ in range(format_retries + 1):
        try:
            items = json_payload(chat.complete([{"role": "user", "content": prompt}], 1200))
            break
        except (ValueError, json.JSONDecodeError):
            continue
    if items is None:
        raise LLMError(f"the model's comparative questions for {entity.id} were not JSON")
    samples = []
    for item in items if isinstance(items, list) else [items]:
        try:
            options = [str(item["options"][letter]) for letter in LETTERS]
            answer = str(item["answer"]).strip().upper()[:1]
            if answer not in LETTERS or len(set(options)) != 4:
                raise ValueError("answer or options invalid")
            converted = json_payload(
                chat.complete(
                    [
                        {
                            "role": "user",
                            "content": PROMPT_OPEN_ENDED.format(
                                question=item["question"],
                                options=json.dumps(item["options"]),
                                answer=answer,
                                reason=item.get("reason", ""),
                            ),
                        }
                    ],
                    400,
                )
            )
            converted = converted[0] if isinstance(converted, list) else converted
            samples.append(
                VQASample(
                    study_a,
                    study_b,
                    entity.id,
                    str(item.get("content_type", "")).lower() or "other",
                    str(item["question"]),
                    options,
                    answer,
                    str(converted["question"]),
                    str(converted["answer"]),
                    meta={"reason": item.get("reason", ""), "backend": "llm"},
                )
            )
        except (KeyError, TypeError, ValueError, json.JSONDecodeError, IndexError) as error:
            logger.info("dropping a malformed generated question (%s)", error)
    return samples


def needs_two_images(question: str, chat: ChatBackend | CachedChat) -> bool:
    """Prompt S6: the model's verdict on whether a question needs both images."""
    reply = chat.complete([{"role": "user", "content": PROMPT_IMAGE_DEPENDENCY.format(question=question)}], 4)
    return reply.strip().lower().startswith("yes")


__all__ = [
    "closed_answer",
    "closed_prompt",
    "llm_vqa",
    "needs_two_images",
    "CHANGE_OPTIONS",
    "DESCRIPTIVE_DIMENSIONS",
    "QUALITATIVE_CHANGES",
    "LETTERS",
    "MajorityAnswerer",
    "TextOnlyAnswerer",
    "VQAFilterReport",
    "VQASample",
    "change_question",
    "change_sentence",
    "closed_questions",
    "deduplicate",
    "depends_on_both_images",
    "filter_vqa",
    "generate_vqa",
    "language_prior_filter",
    "longitudinal_questions",
    "shuffle_and_swap",
    "template_answer",
    "vqa_over_pairs",
]
