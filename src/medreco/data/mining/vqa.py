"""Comparative visual question answering from two reports (MedReCo section 4.4, Appendix S1.4).

For a pair of studies and an entity, the template backend writes one closed-ended 4-option
question per comparison dimension the two statements support (the paper's presence, location,
size, morphology, margins, internal characteristics, associated findings and potential aetiology,
plus number, internal composition and distribution: `questions.closed_questions`), the interval
change for same-patient pairs (here), and a matching open-ended question-answer. Filters follow
Table S4: image dependency (the answer must change when either image's finding changes), language
prior (drop questions a text-only model answers from the wording alone, trained on one half and
tested on the other with shuffled options), bias (shuffled options, swapped image order), duplicates."""

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
from ..reports.statement import EntityStatement, MentionStatus
from .longitudinal import consistent_change_label
from .questions import LETTERS, Question, closed_questions, entity_noun, four_options, presence_subject

logger = logging.getLogger(__name__)
ANSWERABILITY_COLUMNS = ("image_answerable", "answerability_reason")  # `answerability.py`, when recorded


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
    options, letter = four_options(label, list(CHANGE_OPTIONS), rng)
    question = f"How has the {noun} changed from the prior to the current study?"
    return question, options, letter, change_sentence(noun, label, attribute)


def change_questions(
    prior: EntityStatement, current: EntityStatement, entity: Entity, rng: np.random.Generator
) -> list[Question]:
    """The interval-change question about a finding in a same-patient pair, when its change label
    passes the bidirectional check (`longitudinal.consistent_change_label`)."""
    change = consistent_change_label(prior, current)
    if change is None:
        return []
    return [("change", *change_question(entity_noun(entity), change.label, change.attribute, rng))]


def longitudinal_questions(rows: list[dict], ontology, seed: int = 0) -> list[dict]:
    """Closed questions from the mined longitudinal table (prior, current, entity_id, label,
    attribute): the follow-up test set of MedReCo section 4.4, in the VQA table's columns (the
    prior is `study_a`, labelled "Prior"), with `label` and `attribute` kept for stratified scores."""
    questions = []
    for row in rows:
        rng = np.random.default_rng(
            int(
                hashlib.sha256(f"{seed}:{row['prior']}:{row['current']}:{row['entity_id']}".encode()).hexdigest()[:8],
                16,
            )
        )
        noun = entity_noun(ontology[row["entity_id"]])
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
                **{key: row[key] for key in ANSWERABILITY_COLUMNS if key in row},
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
        questions = closed_questions(a, b, entity, rng, labels)
        change = None
        if longitudinal:
            questions += change_questions(a, b, entity, rng)
            change = consistent_change_label(a, b)
        for dimension, question, options, answer, open_answer in questions:
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
                        dimension, presence_subject(entity) if dimension == "presence" else entity_noun(entity), labels
                    ),
                    open_answer=open_answer,
                    labels=labels,
                    meta={"attribute": change.attribute} if dimension == "change" and change else {},
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
        if sample.dimension == "change":
            questions = change_questions(x, y, entity, rng)
        else:
            questions = closed_questions(x, y, entity, rng, sample.labels)
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

    def option_scores(self, question: str, options: list[str]) -> list[float]:
        """Per option, the log of its smoothed share of right answers under this question form (a
        softmax over them is the text prior over the options)."""
        form = self._form(question)
        return [
            math.log(
                (self.correct[(form, o.lower())] + self.smoothing) / (self.seen[(form, o.lower())] + 2 * self.smoothing)
            )
            for o in options
        ]

    def predict(self, question: str, options: list[str]) -> str:
        return LETTERS[int(np.argmax(self.option_scores(question, options)))]


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
    "QUALITATIVE_CHANGES",
    "LETTERS",
    "MajorityAnswerer",
    "TextOnlyAnswerer",
    "VQAFilterReport",
    "VQASample",
    "change_question",
    "change_questions",
    "change_sentence",
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
