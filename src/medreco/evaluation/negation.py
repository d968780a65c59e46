"""Does the model read a denied finding? A CXR-Align-style test (CLIP-clinic, section 3) on any report set.

For each abnormal study: its report r, the report with one positive finding's sentences removed
(r^r, *omitted*) and removed and denied (r^n, *negated*). Task A (negation) is right when the
study's whole-image feature is closer to r than to r^n; task B (omission) when closer to r than to
r^r. Beside them, the text-only separation: the cosine of r and r^n in the model's text space and
in its text backbone's (what the image side has to work with: at a cosine of 0.998 the projection
must amplify a tiny difference). On a mined folder a third task, *statement*, asks the same of the
image conditioned on the finding: its report's sentence on it against the denial. Accuracies carry
patient-clustered intervals.

`mined_negation_cases` builds the cases from a mined folder (every family, the denial worded as the
training reports word it); the published CXR-Align file reads through `cxr_align` into the same
`NegationCase`s, scored by `negation_alignment` with its images."""

from __future__ import annotations

import logging
import random
from collections import defaultdict
from collections.abc import Mapping, Sequence

import torch

from ..data.mining import MinedData
from ..data.public_datasets import NegationCase
from ..data.reports.negation import NegationPhrasebook, report_variants
from ..data.reports.ontology import entity_prompts
from ..inference.encoder import RetrievalEncoder
from .metrics import clustered_mean, clustered_paired_test
from .probe import conditioned_features

logger = logging.getLogger(__name__)
TASKS = ("negated", "omitted")
WHOLE_IMAGE = "whole image"  # the feature key of unconditioned (whole-image) features


def mined_negation_cases(
    data: MinedData,
    split: str = "test",
    train_split: str = "train",
    seed: int = 0,
    book: NegationPhrasebook | None = None,
) -> list[NegationCase]:
    """One case per study of `split` whose report asserts a finding (the finding drawn with `seed`),
    with denials in the words of `train_split`'s reports (or of `book`, built from them already)."""
    if split == train_split:
        raise ValueError(f"the denials are worded from split {train_split!r}: build the cases on another split")
    book = book or phrasebook(data, train_split)
    cases = []
    for study_id in data.study_ids(split):
        study = data.studies[study_id]
        variants = report_variants(study.report, study.statements, book, random.Random(f"{seed}:{study_id}"))
        if variants is not None:
            cases.append(NegationCase(study_id, variants.entity, study.report, variants.negated, variants.omitted))
    return cases


def phrasebook(data: MinedData, split: str = "train") -> NegationPhrasebook:
    """How `split`'s reports deny and assert each entity."""
    return NegationPhrasebook.from_statements(data.studies[s].statements for s in data.study_ids(split))


def negation_alignment(
    encoder: RetrievalEncoder,
    cases: Sequence[NegationCase],
    image_features: Mapping[str, torch.Tensor],
    patients: Mapping[str, str],
    families: Mapping[str, str] | None = None,
) -> dict:
    """Tasks A and B on `cases`, given each case's whole-image feature (`image_features`, by case
    id) and patient (for the clustered intervals); `families` (case id -> modality family) adds a
    row per family. Returns per task the accuracy with its interval and the per-case outcomes
    (`correct`, for paired comparisons of two models), and the text-only separation."""
    cases = [c for c in cases if c.case_id in image_features]
    if not cases:
        raise ValueError("no negation case has an image feature")
    texts = [text for c in cases for text in (c.report, c.negated, c.omitted)]
    shared, backbone = encoder.embed_texts(texts)
    shared, backbone = shared.view(len(cases), 3, -1), backbone.view(len(cases), 3, -1)
    images = torch.stack([image_features[c.case_id] for c in cases])
    scores = (images[:, None, :] * shared).sum(-1)  # (cases, [report, negated, omitted])
    clusters = [patients[c.case_id] for c in cases]
    result: dict = {"cases": len(cases), "patients": len(set(clusters)), "case_ids": [c.case_id for c in cases]}
    for column, task in enumerate(TASKS, start=1):
        correct = (scores[:, 0] > scores[:, column]).float().tolist()
        summary = clustered_mean(correct, clusters)
        result[task] = {"accuracy": summary["mean"], "interval": summary["interval"], "correct": correct}
    result["text_cosine"] = {
        "shared": float((shared[:, 0] * shared[:, 1]).sum(-1).mean()),
        "backbone": float((backbone[:, 0] * backbone[:, 1]).sum(-1).mean()),
    }
    if families:
        rows = defaultdict(list)
        for index, case in enumerate(cases):
            rows[families[case.case_id]].append(index)
        result["by_modality"] = {
            family: {
                "cases": len(indices),
                **{task: sum(result[task]["correct"][i] for i in indices) / len(indices) for task in TASKS},
            }
            for family, indices in sorted(rows.items())
        }
    return result


def evaluate_negation(
    encoder: RetrievalEncoder,
    data: MinedData,
    split: str = "test",
    seed: int = 0,
    batch_size: int = 16,
    progress: bool = False,
    tensors: Mapping[str, torch.Tensor] | None = None,
) -> dict:
    """The CXR-Align-style protocol on a mined folder's `split` (see the module doc)."""
    book = phrasebook(data)
    cases = mined_negation_cases(data, split, seed=seed, book=book)
    if not cases:
        raise ValueError(f"{data.directory}: no {split!r} study's report asserts a finding, so nothing can be negated")
    ids = sorted({c.case_id for c in cases})
    found = conditioned_features(
        encoder, data, {WHOLE_IMAGE: ids}, {WHOLE_IMAGE: None}, batch_size, progress=progress, tensors=tensors
    )[WHOLE_IMAGE]
    patients = {s: data.studies[s].patient_id for s in ids}
    result = negation_alignment(encoder, cases, found, patients, {s: data.studies[s].modality for s in ids})
    result["statement"] = statement_negation(encoder, data, cases, book, batch_size, progress, tensors)
    logger.info(
        "negation: %d cases, negated %.3f, omitted %.3f",
        result["cases"],
        result["negated"]["accuracy"],
        result["omitted"]["accuracy"],
    )
    return {"split": split, **result}


def statement_negation(
    encoder: RetrievalEncoder,
    data: MinedData,
    cases: Sequence[NegationCase],
    book: NegationPhrasebook,
    batch_size: int = 16,
    progress: bool = False,
    tensors: Mapping[str, torch.Tensor] | None = None,
) -> dict:
    """The statement task: each case's image conditioned on its finding, against the report's
    sentence on it and against the denial (what the entity-statement alignment and its hard
    negatives train); accuracy with a patient-clustered interval, per case in `cases` order."""
    prompts = entity_prompts()
    wanted: dict[str, list[str]] = defaultdict(list)
    for case in cases:
        wanted[case.entity].append(case.case_id)
    found = conditioned_features(
        encoder, data, wanted, {e: prompts.get(e, e) for e in wanted}, batch_size, progress=progress, tensors=tensors
    )
    said = [" ".join(data.studies[c.case_id].statements[c.entity]["sentences"]) for c in cases]
    shared, _ = encoder.embed_texts([t for c, text in zip(cases, said) for t in (text, book.denial(c.entity))])
    shared = shared.view(len(cases), 2, -1)
    features = torch.stack([found[c.entity][c.case_id] for c in cases])
    scores = (features[:, None, :] * shared).sum(-1)
    correct = (scores[:, 0] > scores[:, 1]).float().tolist()
    summary = clustered_mean(correct, [data.studies[c.case_id].patient_id for c in cases])
    return {"accuracy": summary["mean"], "interval": summary["interval"], "correct": correct}


def compare_negation(with_method: dict, without: dict, patients: Mapping[str, str]) -> dict:
    """Per task, the paired patient-clustered difference of two models' results on the same cases."""
    if with_method["case_ids"] != without["case_ids"]:
        raise ValueError("the two results were scored on different cases")
    clusters = [patients[c] for c in with_method["case_ids"]]
    tasks = [task for task in (*TASKS, "statement") if task in with_method and task in without]
    return {
        task: clustered_paired_test(with_method[task]["correct"], without[task]["correct"], clusters) for task in tasks
    }


__all__ = ["TASKS", "compare_negation", "evaluate_negation", "mined_negation_cases", "negation_alignment"]
