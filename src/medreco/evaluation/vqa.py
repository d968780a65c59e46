"""Comparative VQA evaluation: closed-ended accuracy against a text-only baseline, the
longitudinal follow-up test set (accuracy by finding, attribute and change label, with a
confusion matrix) and open-ended answer scores.

Closed questions are answered without free-text parsing, so every question gets exactly one
answer. The model reads the two images and the question with its lettered options (the stage-2
prompt) and its choice is, by `scoring`:
- `"answer"` (the headline): the option whose whole trained answer ("B. Case B only", end of turn
  included) has the highest log-likelihood, the usual multiple-choice protocol for language models
  (lm-eval-harness);
- `"letter"`: the option letter with the highest next-token logit after the assistant turn opens.
  Pointing at an option by its letter ("symbol binding") is a skill small language models learn
  late, long after what the answer says; a 7B instruction-tuned model (the paper's) has it, the
  demo's language model trained from scratch in minutes does not, so the letter is reported, not
  the headline;
- `"answer_mean"`: as `"answer"`, by the mean log-likelihood per answer token (length-normalised:
  a long option is not penalised for its length)."""

from __future__ import annotations

import copy
import random
from collections import Counter, defaultdict
from collections.abc import Sequence
from types import SimpleNamespace

import torch
from tqdm.auto import tqdm

from ..data.mining.vqa import (
    CHANGE_OPTIONS,
    LETTERS,
    MajorityAnswerer,
    TextOnlyAnswerer,
    closed_answer,
    closed_prompt,
)
from ..data.reports.decomposition import QuestionEntityFinder
from ..modeling.modeling_vlm import CACHE_NAME
from ..processing import conversation
from .metrics import clustered_paired_test, mcnemar_test, text_scores, wilson_interval

CLOSED_SCORING = ("answer", "answer_mean", "letter")  # the first is the headline


def _model_inputs(inputs: dict, processor) -> dict:
    return {k: v for k, v in inputs.items() if k in processor.model_input_names}


def _on_device(inputs: dict, model) -> dict:
    """The processor's tensors on the model's (first) device."""
    return {k: v.to(model.device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


@torch.no_grad()
def option_scores(
    model,
    processor,
    images: Sequence,
    modality: str,
    question: str,
    options: Sequence[str],
    scorings: Sequence[str],
    entity: str | None = None,
) -> dict[str, list[float]]:
    """Each option's score under each of `scorings` (see the module doc; the highest is chosen):
    the summed (`answer`) or mean (`answer_mean`) log-likelihood of its answer, or the next-token
    logit of its letter (`letter`). With `"answer"` among them, one padded batch of the options'
    answers serves every scoring: the next-token logits before the first answer token are those of
    `"letter"`. `entity`: the question's entity id, for a VLM with entity tokens."""
    unknown = [s for s in scorings if s not in CLOSED_SCORING]
    if unknown:
        raise ValueError(f"unknown closed-question scoring {unknown[0]!r}; choose from {CLOSED_SCORING}")
    letters = LETTERS[: len(options)]
    letter_ids = [processor.tokenizer.encode(letter, add_special_tokens=False)[0] for letter in letters]
    prompt = closed_prompt(question, list(options))
    if not {"answer", "answer_mean"} & set(scorings):
        messages = conversation(prompt, modality, images=list(images), entity=entity)
        inputs = processor.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
        )
        inputs = _on_device(inputs, model)
        logits = model(**_model_inputs(inputs, processor)).logits[0, -1]
        return {"letter": logits[letter_ids].float().tolist()}
    # the batch holds every option's answer after the same two images: preprocess each once
    images = [processor.image_processor.preprocessed(i, modality) for i in images]
    conversations = [
        conversation(prompt, modality, closed_answer(list(options), letter), images=images, entity=entity)
        for letter in letters
    ]
    inputs = processor.apply_chat_template(conversations, tokenize=True, return_dict=True, return_tensors="pt")
    inputs = _on_device(inputs, model)
    logits = _option_logits(model, processor, inputs, len(images))[:, :-1].float()
    targets = inputs["labels"][:, 1:]
    trained = targets != -100
    token_scores = logits.log_softmax(-1).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    summed = (token_scores * trained).sum(-1)
    scores = {"answer": summed.tolist(), "answer_mean": (summed / trained.sum(-1).clamp(min=1)).tolist()}
    if "letter" in scorings:
        # every answer starts with its letter after the same prompt: the logits before it are shared
        before_answer = int(trained[0].nonzero()[0])
        scores["letter"] = logits[0, before_answer, letter_ids].tolist()
    return {scoring: scores[scoring] for scoring in scorings}


def choose_options(
    model,
    processor,
    images: Sequence,
    modality: str,
    question: str,
    options: Sequence[str],
    scorings: Sequence[str],
    entity: str | None = None,
) -> dict[str, str]:
    """The letter (A, B, ...) of the option the model chooses under each of `scorings`: the one
    with the highest `option_scores`."""
    scores = option_scores(model, processor, images, modality, question, options, scorings, entity)
    return {scoring: best_letter(values) for scoring, values in scores.items()}


def best_letter(scores: Sequence[float]) -> str:
    """The letter of the highest score (the first on ties)."""
    return LETTERS[max(range(len(scores)), key=lambda i: (scores[i], -i))]


def _option_logits(model, processor, inputs: dict, images_per_option: int) -> torch.Tensor:
    """`model(**inputs).logits` for a batch of one prompt's options, the shared prompt (images
    included) run once: its key-value cache serves every option's answer, so the vision encoder
    reads the two images once and the language model reads the prompt once, not once per option.
    Falls back to the plain batch when the rows share no prefix holding the images."""
    model_inputs = _model_inputs(inputs, processor)
    ids = inputs["input_ids"]
    differs = (ids != ids[:1]).any(0).nonzero()
    shared = int(differs[0]) if len(differs) else ids.shape[1] - 1
    image_positions = (ids[0] == processor.image_token_id).nonzero()
    if len(ids) == 1 or shared == 0 or (len(image_positions) and int(image_positions[-1]) >= shared):
        return model(**model_inputs).logits
    first = {k: v[:images_per_option] for k, v in model_inputs.items() if k in ("pixel_values", "modality_ids")}
    if "entity_ids" in model_inputs:
        first["entity_ids"] = model_inputs["entity_ids"][:images_per_option]
    prefix = model(
        input_ids=ids[:1, :shared], attention_mask=inputs["attention_mask"][:1, :shared], use_cache=True, **first
    )
    cache = prefix[CACHE_NAME]
    cache.batch_repeat_interleave(len(ids))
    rest = model(
        input_ids=ids[:, shared:], attention_mask=inputs["attention_mask"], use_cache=True, **{CACHE_NAME: cache}
    )
    return torch.cat([prefix.logits.expand(len(ids), -1, -1), rest.logits], dim=1)


def choose_option(
    model,
    processor,
    images: Sequence,
    modality: str,
    question: str,
    options: Sequence[str],
    scoring: str = CLOSED_SCORING[0],
    entity: str | None = None,
) -> str:
    """The letter (A, B, ...) of the option the model chooses under one `scoring`."""
    return choose_options(model, processor, images, modality, question, options, (scoring,), entity)[scoring]


def row_entities(processor, rows: Sequence[dict], studies: dict, question: str = "question") -> list[str | None]:
    """The entity each row's `question` is about, when the VLM reads entity tokens (None otherwise):
    the row's `entity_id` (mined rows), else the finding the question names (public evaluation sets' rows)."""
    if not getattr(processor, "entity_vocabulary", None):
        return [None] * len(rows)
    finder = QuestionEntityFinder()
    return [row.get("entity_id") or finder.find(row[question], studies[row["study_a"]].modality) for row in rows]


def closed_option_scores(
    model, processor, rows: Sequence[dict], studies: dict, progress: bool = False, scorings: Sequence[str] = ("letter",)
) -> dict[str, list[list[float]]]:
    """Each option's score (`option_scores`) under each scoring for each of the mined VQA rows
    (study_a, study_b, question, options); `studies` maps study ids to objects with `image` and `modality`."""
    model.eval()
    scored: dict[str, list[list[float]]] = {scoring: [] for scoring in scorings}
    entities = row_entities(processor, rows, studies)
    for row, entity in tqdm(
        zip(rows, entities, strict=True),
        total=len(rows),
        desc=f"closed VQA ({', '.join(scorings)})",
        unit="question",
        disable=not progress,
    ):
        a, b = studies[row["study_a"]], studies[row["study_b"]]
        values = option_scores(
            model, processor, [a.image, b.image], a.modality, row["question"], row["options"], scorings, entity
        )
        for scoring in scorings:
            scored[scoring].append(values[scoring])
    return scored


def closed_predictions(
    model, processor, rows: Sequence[dict], studies: dict, progress: bool = False, scorings: Sequence[str] = ("letter",)
) -> dict[str, list[str]]:
    """The letter each scoring chooses for each of the mined VQA rows (`closed_option_scores`)."""
    scored = closed_option_scores(model, processor, rows, studies, progress, scorings)
    return {scoring: [best_letter(values) for values in per_row] for scoring, per_row in scored.items()}


def preload_images(studies: dict, study_ids, image_processor, progress: bool = False) -> dict:
    """`studies` with the images of `study_ids` read and preprocessed once (copies of those study
    records whose `image` is a `PreprocessedImage` of `image_processor`; the others as they are):
    every later evaluation over them skips the readers and the preprocessing. Models whose
    processors preprocess differently need their own preload."""
    loaded = dict(studies)
    for study_id in tqdm(sorted(set(study_ids)), desc="reading test images", unit="study", disable=not progress):
        study = copy.copy(studies[study_id])
        study.image = image_processor.preprocessed(image_processor.load(study.image), study.modality)
        loaded[study_id] = study
    return loaded


def closed_accuracy(
    model,
    processor,
    rows: Sequence[dict],
    studies: dict,
    progress: bool = False,
    scoring: str = CLOSED_SCORING[0],
) -> dict:
    """Accuracy over mined VQA rows under one `scoring`, with each row's predicted letter."""
    predicted = closed_predictions(model, processor, rows, studies, progress, (scoring,))[scoring]
    hits = [p == row["answer"] for p, row in zip(predicted, rows, strict=True)]
    return {
        "accuracy": sum(hits) / len(hits) if hits else 0.0,
        "questions": len(hits),
        "correct": hits,
        "predicted": predicted,
    }


BASELINES = {"text_only": TextOnlyAnswerer, "majority": MajorityAnswerer}


def baseline_hits(name: str, train_rows: Sequence[dict], rows: Sequence[dict]) -> list[bool]:
    """Whether a baseline fitted on `train_rows` gets each of `rows` right: `text_only` (question
    wording and options, the language prior the VLM must beat) or `majority` (the most often right
    option wording). Fit them on the training split as it was before the language-prior filter
    (mined `vqa` + `vqa_removed` rows), never on the questions the filter left."""
    answerer = BASELINES[name]().fit(SimpleNamespace(**row) for row in train_rows)  # one pass, rows unkept
    return [answerer.predict(row["question"], row["options"]) == row["answer"] for row in rows]


def every_baseline_hits(train_rows: Sequence[dict], rows: Sequence[dict]) -> dict[str, list[bool]]:
    """`baseline_hits` of every baseline (`BASELINES`), by name."""
    return {name: baseline_hits(name, train_rows, rows) for name in BASELINES}


def text_only_baseline(train_rows: Sequence[dict], rows: Sequence[dict]) -> list[bool]:
    """`baseline_hits("text_only", ...)`."""
    return baseline_hits("text_only", train_rows, rows)


def accuracy_summary(hits: Sequence[bool]) -> dict:
    """Accuracy, count and 95% Wilson interval of a list of hits."""
    low, high = wilson_interval(sum(hits), len(hits))
    return {"accuracy": sum(hits) / len(hits) if hits else 0.0, "questions": len(hits), "ci95": [low, high]}


def evaluate_closed_vqa(
    model,
    processor,
    rows: Sequence[dict],
    train_rows: Sequence[dict],
    studies: dict,
    progress: bool = False,
    scorings: Sequence[str] = CLOSED_SCORING,
) -> dict:
    """The VLM's closed-ended accuracy under each of `scorings` (the first is the headline `vlm`,
    also split by question dimension and by entity) against the baselines fitted on `train_rows`
    (`baselines`: text-only and majority answer, each with the exact McNemar test and, when the
    studies know their patients, the patient-clustered comparison: difference, cluster-bootstrap
    interval, sign-flip p-value; a question is clustered by one of its patients, `question_cluster`).
    `text_only`, `mcnemar` and `clustered` repeat the text-only comparison; `hits` holds every
    system's hit per question, `predicted` the VLM's letters per scoring and `option_scores` each
    option's score behind them."""
    scored = closed_option_scores(model, processor, rows, studies, progress, scorings)
    predicted = {scoring: [best_letter(values) for values in per_row] for scoring, per_row in scored.items()}
    hits = {
        scoring: [letter == row["answer"] for letter, row in zip(letters, rows, strict=True)]
        for scoring, letters in predicted.items()
    }
    baselines = every_baseline_hits(train_rows, rows)
    text = baselines["text_only"]
    return {
        **closed_vqa_summary(hits[scorings[0]], rows, baselines, studies),
        "scoring": scorings[0],
        "by_scoring": {
            scoring: {**accuracy_summary(scored), "mcnemar": mcnemar_test(scored, text)}
            for scoring, scored in hits.items()
        },
        # per question: the headline VLM's and each baseline's hits, for comparisons with other systems
        "hits": {"vlm": hits[scorings[0]], **baselines},
        "predicted": predicted,
        "option_scores": scored,
    }


def question_cluster(row: dict, studies: dict) -> str | None:
    """The patient a question is clustered by: the first, in sorted order, of its two studies'
    patients (which study is Case A was drawn at random). None when the studies know no patient."""
    patients = [getattr(studies.get(row[key]), "patient_id", None) for key in ("study_a", "study_b")]
    return None if None in patients else min(patients)


def baseline_comparisons(
    hits: Sequence[bool], rows: Sequence[dict], baseline_results: dict[str, list[bool]], studies: dict
) -> dict[str, dict]:
    """Each baseline's accuracy on `rows`, with the exact McNemar test against `hits` and, when the
    studies know their patients, the patient-clustered comparison (`question_cluster`)."""
    patients = [question_cluster(row, studies) for row in rows]
    baselines = {}
    for name, baseline in baseline_results.items():
        baselines[name] = {**accuracy_summary(baseline), "mcnemar": mcnemar_test(hits, baseline)}
        if None not in patients:
            baselines[name]["clustered"] = clustered_paired_test(hits, baseline, patients)
    return baselines


def closed_vqa_summary(
    hits: Sequence[bool], rows: Sequence[dict], baseline_results: dict[str, list[bool]], studies: dict
) -> dict:
    """A system's closed-VQA hits on `rows` summarised: accuracy by dimension and entity, and the
    comparison with each baseline's hits on the same rows (see `evaluate_closed_vqa`)."""
    baselines = baseline_comparisons(hits, rows, baseline_results, studies)
    by = {"dimension": defaultdict(list), "entity": defaultdict(list)}
    for row, hit in zip(rows, hits, strict=True):
        by["dimension"][row.get("dimension", "all")].append(hit)
        by["entity"][row.get("entity_id", "unknown")].append(hit)
    text_only = baselines["text_only"]
    summary = {
        "vlm": accuracy_summary(hits),
        "baselines": baselines,
        "text_only": {k: v for k, v in text_only.items() if k not in ("mcnemar", "clustered")},
        "mcnemar": text_only["mcnemar"],
        **({"clustered": text_only["clustered"]} if "clustered" in text_only else {}),
    }
    for name, groups in by.items():
        summary[f"by_{name}"] = {key: accuracy_summary(group) for key, group in sorted(groups.items())}
    return summary


def evaluate_longitudinal(
    model,
    processor,
    rows: Sequence[dict],
    studies: dict,
    progress: bool = False,
    scoring: str = CLOSED_SCORING[0],
    train_rows: Sequence[dict] | None = None,
) -> dict:
    """Follow-up test rows (`medreco.data.mining.vqa.longitudinal_questions`): accuracy overall and by
    finding (entity), attribute and true change label, plus the confusion matrix of change labels
    (rows: true label, columns: the label of the option the model chose), under one `scoring`. With
    `train_rows` (the training split's follow-up questions), also the text-only and majority-answer
    baselines fitted on them, compared as in `evaluate_closed_vqa` (`baselines`)."""
    result = closed_accuracy(model, processor, rows, studies, progress, scoring)
    baselines = {}
    if train_rows is not None:
        baselines = baseline_comparisons(result["correct"], rows, every_baseline_hits(train_rows, rows), studies)
    strata: dict[str, dict[str, list[bool]]] = {"entity": defaultdict(list), "attribute": defaultdict(list)}
    strata["label"] = defaultdict(list)
    confusion: dict[str, Counter] = {label: Counter() for label in CHANGE_OPTIONS}
    for row, letter, hit in zip(rows, result["predicted"], result["correct"], strict=True):
        strata["entity"][row["entity_id"]].append(hit)
        strata["attribute"][row["attribute"]].append(hit)
        strata["label"][row["label"]].append(hit)
        confusion.setdefault(row["label"], Counter())[row["options"][LETTERS.index(letter)]] += 1
    return {
        **accuracy_summary(result["correct"]),
        "scoring": scoring,
        **{
            f"by_{name}": {key: accuracy_summary(hits) for key, hits in sorted(groups.items())}
            for name, groups in strata.items()
        },
        "confusion": confusion_table(confusion, CHANGE_OPTIONS),
        **({"baselines": baselines} if baselines else {}),
    }


def confusion_table(counts: dict[str, Counter], labels: Sequence[str]) -> dict:
    """`{"labels", "matrix"}` with matrix[i][j] = how often true label i was answered with label j."""
    return {"labels": list(labels), "matrix": [[counts[t][p] for p in labels] for t in labels]}


def evaluate_open_ended(
    reader,
    rows: Sequence[dict],
    studies: dict,
    bert_scorer=None,
    progress: bool = False,
    report_metrics: Sequence = (),
) -> dict:
    """Generate answers to the rows' open questions with a `ComparativeReader` and score them
    against the reference answers (`metrics.text_scores`): sacreBLEU corpus BLEU-4 (`bleu`),
    rouge-score's ROUGE-L F1 (`rouge_l`), nltk's METEOR without its WordNet synonym stage
    (`meteor_no_synonyms`), then BERTScore F1 (when a scorer is given), entity F1, and each of
    `report_metrics` by its name (RaTEScore, RadGraph F1: see `available_report_metrics`).
    Returns `scores` (numbers only), `bleu_signature` (sacreBLEU's, to report beside the BLEU
    score) and the (question, reference, answer) `examples`, one per row."""
    from .text import entity_f1, mean_text_score

    predictions, references, modalities, examples = [], [], [], []
    entities = row_entities(reader.processor, rows, studies, question="open_question")
    for row, entity in tqdm(
        zip(rows, entities, strict=True), total=len(rows), desc="open-ended VQA", unit="question", disable=not progress
    ):
        a, b = studies[row["study_a"]], studies[row["study_b"]]
        answer = reader.answer(a.image, b.image, row["open_question"], a.modality, entity=entity)
        predictions.append(answer)
        references.append(row["open_answer"])
        modalities.append(a.modality)
        examples.append(
            {
                "study_a": row["study_a"],
                "study_b": row["study_b"],
                "question": row["open_question"],
                "reference": row["open_answer"],
                "answer": answer,
            }
        )
    text = text_scores(predictions, references)
    signature = text.pop("bleu_signature")
    scores = {
        "questions": len(rows),
        **text,
        "entity_f1": entity_f1(predictions, references, modalities)["f1"],
    }
    if bert_scorer is not None:
        scores["bertscore_f1"] = bert_scorer.score(predictions, references)["f1"]
    for metric in report_metrics:
        scores[metric.name] = mean_text_score(metric, predictions, references)
    return {"scores": scores, "bleu_signature": signature, "examples": examples}


def sample_rows(rows: Sequence[dict], limit: int | None, seed: int = 0) -> list[dict]:
    """At most `limit` rows, drawn reproducibly (all of them when `limit` is None); only the drawn
    rows of a sequence are read (a view of a mined table stays unread)."""
    rows = rows if isinstance(rows, Sequence) else list(rows)
    if limit is None or len(rows) <= limit:
        return list(rows)
    return random.Random(seed).sample(rows, limit)


__all__ = [
    "BASELINES",
    "CLOSED_SCORING",
    "accuracy_summary",
    "confusion_table",
    "choose_option",
    "choose_options",
    "closed_accuracy",
    "closed_predictions",
    "closed_vqa_summary",
    "preload_images",
    "question_cluster",
    "baseline_hits",
    "evaluate_closed_vqa",
    "evaluate_longitudinal",
    "evaluate_open_ended",
    "row_entities",
    "sample_rows",
    "text_only_baseline",
]
