"""`medreco demo`: the whole system on the synthetic cohort, on a CPU, in minutes.

Steps (each timed): write the synthetic cohort (DICOM, NIfTI, PNG, reports) -> mine its reports
(entity statements, retrieval relevance, triplets, VQA, longitudinal labels) -> train stage 1,
the reranker and stage 2 with the `tiny` recipe -> evaluate retrieval (entity, entity+rerank,
holistic), closed and open-ended VQA (against a text-only baseline) and the longitudinal
follow-up test set on the held-out patients -> write `metrics.json`, `report.md`, `report.html`
and the figures. Every trained model is saved with `save_pretrained` under `models/`.

A finished step is not redone when the demo is run again on the same folder (delete the folder,
or the step's subfolder, to start over)."""

from __future__ import annotations

import json
import logging
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..training.config import read_recipe

logger = logging.getLogger(__name__)
RECIPE = "demo"  # training/recipes/demo.yaml: the tiny recipe, what the demo changes, and its sizes


def demo_settings() -> dict:
    """The `demo:` section of the demo recipe: cohort, mining and run sizes (`full`, `quick`)."""
    return read_recipe(RECIPE)["demo"]


@dataclass
class DemoConfig:
    """Sizes of a demo run. `quick` (for CI) shrinks every step to fit in about 2 minutes on two
    cores; the default run takes 12 to 20, by the machine. Fields left None take the size of the
    chosen mode (the recipe's `demo.sizes`)."""

    out_dir: str = "medreco-demo"
    quick: bool = False
    patients: int | None = None
    alignment_steps: int | None = None  # stage-1 image-report warm-up
    stage1_steps: int | None = None  # stage-1 entity-conditioned ranking
    reranker_steps: int | None = None
    stage2_steps: int | None = None
    stage2_batch_size: int | None = None
    progression_steps: int | None = None  # each progression model's steps (TILA's: each of its two phases)
    closed_questions: int | None = None  # closed VQA test questions scored (sampled)
    swap_questions: int | None = None  # of those, asked again with the two images swapped (sampled)
    family_patients: dict[str, int] | None = None  # patients given each smaller family (brain MRI, ...)
    open_questions: int | None = None  # open-ended test questions answered and scored (sampled)
    seed: int = 0
    progress: bool = True

    def __post_init__(self):
        sizes = demo_settings()["sizes"]["quick" if self.quick else "full"]
        for name, value in sizes.items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        if self.patients < 10:
            raise ValueError("the demo needs at least 10 patients (train, validation and test splits)")


class Stopwatch:
    """Wall time of named steps, in seconds."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    def run(self, name: str, step: Callable[[], object]):
        logger.info("demo: %s", name)
        start = time.perf_counter()
        result = step()
        self.seconds[name] = round(time.perf_counter() - start, 2)
        return result


def _done(folder: Path) -> bool:
    return (folder / "config.json").exists()


STAGES = (
    "stage1",
    "reranker",
    "stage2",
    "stage2_blind",
    "progression",
    "progression_static",
    "progression_tila",
)
# a demo stage trained by another recipe stage: (that stage, what the demo adds to it). The blind VLM
# is stage 2 on blank images with the same data, steps and seed: what the VLM answers without the
# images. The progression model (BioViL-T's prior fusion) is compared with the same model without the
# prior (the missing-prior token in its place) and with TILA's fine-tuning, at the same budget.
STAGE_RECIPES = {
    "stage2_blind": ("stage2", ("blind_images=true",)),
    "progression_static": ("progression", ("use_prior=false",)),
    "progression_tila": ("progression", ("loss=bidirectional", "temporal_consistency_weight=50")),
}


def prepare_data(config: DemoConfig, clock: Stopwatch | None = None) -> Path:
    """Write the synthetic cohort and mine its reports under `config.out_dir` (each step skipped when
    already done); returns the mined folder."""
    from ..data.mining import MiningConfig, mine
    from ..data.phantom import PhantomConfig, generate_cohort

    clock = clock or Stopwatch()
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cohort, mined = out / "cohort", out / "mined"
    settings = demo_settings()
    phantom = PhantomConfig(
        num_patients=config.patients,
        seed=config.seed,
        patients_per_modality=dict(config.family_patients or {}),
        **settings["cohort"],
    )
    if (cohort / "manifest.jsonl").exists():
        check_cohort_modalities(cohort, phantom.modalities)
    else:
        clock.run("cohort", lambda: generate_cohort(phantom, cohort, progress=config.progress))
    mining = MiningConfig(
        **{key: tuple(value) if isinstance(value, list) else value for key, value in settings["mining"].items()},
        workers=min(2, os.cpu_count() or 1),
        seed=config.seed,
    )
    if (mined / "summary.json").exists():
        check_mined_settings(mined, mining)
    else:
        clock.run("mining", lambda: mine(cohort / "manifest.jsonl", mined, mining, progress=config.progress))
    return mined


def check_cohort_modalities(cohort: Path, modalities) -> None:
    """Refuse the cohort of an earlier demo that holds other modalities (chest only, before the demo
    covered all five families): its numbers would not be this version's."""
    from ..data.phantom import read_manifest

    found = sorted({record.modality for record in read_manifest(cohort)})
    if found != sorted(modalities):
        raise ValueError(
            f"{cohort}: written by an earlier demo with other modalities ({', '.join(found)}); delete the demo "
            "folder (or use another --out) to run this version"
        )


def expert_changes(config: DemoConfig, final: Path) -> dict[str, float]:
    """How far training moved each modality expert of the stage-1 vision encoder: the relative
    distance ||trained - initial|| / ||initial|| over the expert's feed-forward weights, the initial
    weights rebuilt from the run's seed (stage 1 initialises the model right after seeding)."""
    import re

    from transformers import AutoModel, set_seed

    from ..training import load_recipe
    from ..training.stage1 import build_retrieval_model

    recipe = load_recipe(RECIPE, "stage1", stage_overrides(config, "stage1"))
    set_seed(recipe.run.seed)
    initial, _ = build_retrieval_model(
        recipe.model, recipe.text_encoder, freeze_text_encoder=recipe.freeze_text_encoder
    )
    trained = AutoModel.from_pretrained(final)
    modalities = list(trained.config.vision_config.modalities)
    before, after = initial.state_dict(), trained.state_dict()
    squares: dict[int, list[float]] = {}
    for name, weight in after.items():
        match = re.search(r"\.experts\.(\d+)\.", name)
        if match and name in before and before[name].shape == weight.shape:
            change = squares.setdefault(int(match.group(1)), [0.0, 0.0])
            change[0] += float((weight.float() - before[name].float()).pow(2).sum())
            change[1] += float(before[name].float().pow(2).sum())
    return {modalities[i]: round((d / max(n, 1e-12)) ** 0.5, 4) for i, (d, n) in sorted(squares.items())}


def check_mined_settings(mined: Path, mining) -> None:
    """Refuse a mined folder of an earlier demo whose settings differ from this version's (entity
    levels, the splits the language-prior filter judged): its numbers would not be this protocol's."""
    summary = json.loads((mined / "summary.json").read_text())
    found = {"levels": summary.get("levels", list(mining.levels)), "splits": summary.get("vqa_language_prior_splits")}
    wanted = {"levels": list(mining.levels), "splits": list(mining.language_prior_splits)}
    if found != wanted:
        raise ValueError(
            f"{mined}: mined by an earlier demo with other settings ({found} instead of {wanted}); "
            "delete that folder (or use another --out) to mine again"
        )


def stage_overrides(config: DemoConfig, stage: str) -> list[str]:
    """What the demo sets in the demo recipe for `stage`: paths under `config.out_dir`, the seed and
    the run's step counts and batch sizes."""
    out = Path(config.out_dir)
    models = out / "models"
    stage1 = models / "stage1" / "final"
    common = [
        f"data.mined_dir={out / 'mined'}",
        f"run.progress={str(config.progress).lower()}",
        f"run.seed={config.seed}",
        f"run.output_dir={models / stage}",
    ]
    cache = f"data.tensor_cache_dir={out / 'cache'}"
    stages = {
        "stage1": [cache, f"alignment.max_steps={config.alignment_steps}", f"ranking.max_steps={config.stage1_steps}"],
        "reranker": [cache, f"retrieval_model={stage1}", f"optimization.max_steps={config.reranker_steps}"],
        "progression": [cache, f"retrieval_model={stage1}", f"optimization.max_steps={config.progression_steps}"],
        "stage2": [
            cache,
            f"vision_model={stage1}",
            f"optimization.max_steps={config.stage2_steps}",
            f"optimization.batch_size_2d={config.stage2_batch_size}",
            f"optimization.batch_size_3d={config.stage2_batch_size}",
        ],
    }
    if stage not in STAGES:
        raise ValueError(f"the demo has no stage {stage!r}; choose from {STAGES}")
    recipe_stage, extra = STAGE_RECIPES.get(stage, (stage, ()))
    overrides = common + stages[recipe_stage] + list(extra)
    if stage == "progression_tila":  # the same steps in all, split as TILA's 20 + 30 epochs
        first = round(0.4 * config.progression_steps)
        overrides += [f"optimization.max_steps={first}", f"consistency.max_steps={config.progression_steps - first}"]
    return overrides


def train_demo_stage(config: DemoConfig, stage: str, clock: Stopwatch | None = None) -> Path:
    """Train one stage of the demo (skipped when its final model exists; stage 2 and the reranker
    need stage 1's); returns the folder of its final model."""
    from ..training import load_recipe, train_stage

    final = Path(config.out_dir) / "models" / stage / "final"
    if not _done(final):
        recipe_stage = STAGE_RECIPES.get(stage, (stage,))[0]
        recipe = load_recipe(RECIPE, recipe_stage, stage_overrides(config, stage))
        (clock or Stopwatch()).run(stage, lambda: train_stage(recipe_stage, recipe))
    return final


def run_demo(config: DemoConfig) -> dict:
    """Run every step and write the outputs under `config.out_dir`; returns the metrics."""
    from ..data.mining import MinedData

    out = Path(config.out_dir)
    clock = Stopwatch()
    started = time.perf_counter()
    models = out / "models"
    mined = prepare_data(config, clock)
    for stage in STAGES:
        train_demo_stage(config, stage, clock)

    data = MinedData(mined)
    metrics = clock.run("evaluation", lambda: evaluate_demo(config, data, models, out))
    metrics["expert_changes"] = expert_changes(config, models / "stage1" / "final")
    metrics["wall_time_seconds"] = {**clock.seconds, "total": round(time.perf_counter() - started, 2)}
    metrics["run"] = {
        "config": asdict(config),
        "mined": json.loads((mined / "summary.json").read_text()),
        "models": {name: str(models / name / "final") for name in STAGES},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__},
    }
    from .report import write_report

    write_model_cards(metrics, models)
    write_report(metrics, out)
    return metrics


CARD_DATA = (
    "Trained by `medreco demo` on the synthetic cohort of `medreco phantom` (generated thoraxes with "
    "co-occurring, evolving findings; chest X-ray, chest CT, brain MRI, abdominal CT and ultrasound; template "
    "reports). No patient data "
    "was used. Supervision was mined from the reports with `medreco mine`."
)
CARD_LIMITS = (
    "A tiny model trained for minutes on a CPU to demonstrate the pipeline; its scores on the synthetic "
    "test split are in the evaluation table and are not evidence of clinical performance. Not a medical "
    "device; not for clinical use."
)


def _phases(folder: Path) -> dict:
    from ..training.loop import phase_summaries

    summary = json.loads((folder / "summary.json").read_text()) if (folder / "summary.json").exists() else {}
    return phase_summaries(summary)


def write_model_cards(metrics: dict, models: Path) -> None:
    """A Hub model card (`README.md`) in each trained model's folder, with its demo scores."""
    from ..hub import Score, model_card, write_model_card

    overall = metrics["retrieval"]["all"]["all"]
    closed, follow_up = metrics["vqa"]["closed"]["vlm"], metrics["longitudinal"]

    def recall(system: str, k: int) -> Score:
        entry = overall[system]
        interval = entry.get(f"recall@{k}_ci95")
        return Score(
            f"synthetic retrieval, {system}", f"recall@{k}", entry[f"recall@{k}"], interval, overall["queries"]
        )

    evaluation = {
        "stage1": [recall("entity", k) for k in (1, 3, 5)] + [recall("holistic", 1)],
        "reranker": [recall("entity+rerank", 1)],
        "stage2": [
            Score("synthetic closed VQA", "accuracy", closed["accuracy"], closed.get("ci95"), closed["questions"]),
            Score(
                "synthetic longitudinal VQA",
                "accuracy",
                follow_up["accuracy"],
                follow_up.get("ci95"),
                follow_up["questions"],
            ),
            *[
                Score("synthetic open VQA", name, value)
                for name, value in metrics["vqa"]["open_ended"].items()
                if name != "questions"
            ],
        ],
    }
    for stage, family in (("stage1", "retrieval"), ("reranker", "reranker"), ("stage2", "vlm")):
        folder = models / stage / "final"
        card = model_card(family, _phases(folder), evaluation[stage], CARD_DATA, CARD_LIMITS, folder=folder)
        write_model_card(card, folder)


def evaluate_demo(config: DemoConfig, data, models: Path, out: Path) -> dict:
    """Retrieval, closed and open-ended VQA (VLM and blind VLM), longitudinal and negation scores on the test split."""
    from ..atomic import write_text_atomically
    from ..evaluation import evaluate_negation, evaluate_retrieval, linear_probe, probe_table
    from ..inference import RerankerScorer, RetrievalEncoder

    encoder = RetrievalEncoder.from_pretrained(models / "stage1" / "final", tensor_cache_dir=out / "cache")
    scorer = RerankerScorer.from_pretrained(models / "reranker" / "final")
    retrieval = evaluate_retrieval(encoder, data, "test", scorer, rerank_top=10, progress=config.progress)
    write_text_atomically(out / "retrieval_queries.json", json.dumps(retrieval["queries"]))
    probe = linear_probe(encoder, data, progress=config.progress)
    vqa = evaluate_demo_vqa(config, data, models, probe)
    temporal = evaluate_demo_temporal(config, data, models)
    negation = evaluate_negation(encoder, data, "test", seed=config.seed, progress=config.progress)
    trends = evaluate_demo_trends(encoder, data)
    entities = {e: {k: v for k, v in entry.items() if k != "probabilities"} for e, entry in probe["entities"].items()}
    return {
        "retrieval": retrieval["summary"],
        "retrieval_by_entity": retrieval["by_entity"],
        **vqa,
        "probe": {
            **{k: v for k, v in probe.items() if k != "entities"},
            "entities": entities,
            "table": probe_table(probe),
        },
        "montage": _montage(encoder, scorer, data, retrieval["queries"], out),
        "temporal": temporal,
        # the per-case outcomes stay out of metrics.json (`medreco evaluate --protocol negation --out` has them)
        "negation": {k: v for k, v in negation.items() if k != "case_ids"}
        | {
            task: {k: v for k, v in negation[task].items() if k != "correct"}
            for task in ("negated", "omitted", "statement")
        },
        "trends": trends,
    }


def evaluate_demo_trends(encoder, data) -> dict:
    """TAMM's protocols for the demo's stage 1: temporal sentence similarity of its text side, and the
    trend classifier's four protocols when the stage 1 was trained with one (`trend_weight`); what
    cannot be scored says why."""
    from ..evaluation import evaluate_trends, temporal_sentence_similarity
    from ..inference import TrendPredictor

    result = {}
    try:
        result["sentence_similarity"] = temporal_sentence_similarity(encoder, data, "test")
    except ValueError as error:
        result["sentence_similarity"] = {"unavailable": str(error)}
    if getattr(encoder.model, "trend_head", None) is None:
        result["classifier"] = {"unavailable": "the demo's stage 1 trains no trend classifier (trend_weight: 0)"}
    else:
        result["classifier"] = evaluate_trends(TrendPredictor(encoder), data, "test")
    return result


def evaluate_demo_temporal(config: DemoConfig, data, models: Path) -> dict:
    """TILA's four protocols on the test split's longitudinal pairs: the prior-fused progression
    model against the same model without the prior, and TILA's fine-tuning against the plain one;
    beside them the change probe of the frozen stage-1 features (what a linear read-out of the pair
    reaches, with and without the prior: whether a shortfall is stage 1's or the head's)."""
    from ..evaluation import change_probe, evaluate_progression
    from ..inference import ProgressionPredictor

    def predictor(stage: str) -> ProgressionPredictor:
        return ProgressionPredictor.from_pretrained(models / stage / "final")

    fused = predictor("progression")
    return {
        "prior_vs_static": evaluate_progression(fused, data, "test", baseline=predictor("progression_static")),
        "tila_vs_plain": evaluate_progression(predictor("progression_tila"), data, "test", baseline=fused),
        "change_probe": change_probe(fused.encoder, data, "test"),
    }


def demo_swap_consistency(config: DemoConfig, vlms: dict, rows: list[dict], studies: dict, letters, scores) -> dict:
    """Swap consistency (and TILA's four protocols) of each VLM on the demo's sample of its closed
    questions, whose first order was answered already (`letters`, `scores`): only the swapped twins
    are asked; with the VLM-minus-blind-VLM comparison."""
    from ..evaluation import evaluate_swap_consistency, sample_rows, swap_comparison

    indices = sample_rows(range(len(rows)), config.swap_questions, config.seed)
    swaps = {
        name: evaluate_swap_consistency(
            model,
            processor,
            [rows[i] for i in indices],
            studies,
            config.progress,
            answered=[letters[name][i] for i in indices],
            answered_scores=[scores[name][i] for i in indices],
        )
        for name, (model, processor) in vlms.items()
    }
    swap = {
        name: {k: v for k, v in result.items() if k not in ("predicted", "predicted_swapped", "hits")}
        for name, result in swaps.items()
    }
    swap["vlm_minus_blind_vlm"] = swap_comparison(swaps["vlm"], swaps["blind_vlm"])
    return swap


def _load_vlm(folder: Path):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    return AutoModelForImageTextToText.from_pretrained(folder).eval(), AutoProcessor.from_pretrained(folder)


def evaluate_demo_vqa(config: DemoConfig, data, models: Path, probe: dict | None = None) -> dict:
    """Closed VQA of the VLM and the blind VLM against the baselines, overall and on the questions
    the images can answer apart from those only the reports answer; swap consistency of both
    models; the follow-up test set and open-ended answers of the VLM; with the stage-1 `probe`
    (`evaluation.linear_probe`), the presence ceiling it implies on the same closed questions."""
    from ..data.mining.vqa import longitudinal_questions
    from ..data.reports.ontology import Ontology
    from ..evaluation import (
        BERTScorer,
        answerability_breakdown,
        available_report_metrics,
        best_letter,
        closed_option_scores,
        evaluate_closed_vqa,
        evaluate_longitudinal,
        evaluate_open_ended,
        preload_images,
        presence_ceiling,
        sample_rows,
    )
    from ..inference import ComparativeReader

    model, processor = _load_vlm(models / "stage2" / "final")
    blind, blind_processor = _load_vlm(models / "stage2_blind" / "final")
    for vlm in (model, blind):
        vlm.remember_frozen_features()  # each test image is asked about many times
    studies = preload_images(data.studies, data.study_ids("test"), processor.image_processor, config.progress)
    closed_rows = sample_rows(data.rows("vqa", "test"), config.closed_questions, config.seed)
    # the baselines learn from the training split as it was before the language-prior filter
    baseline_rows = data.rows("vqa", "train") + data.rows("vqa_removed", "train")
    closed = evaluate_closed_vqa(model, processor, closed_rows, baseline_rows, studies, config.progress)
    hits, letters = closed.pop("hits"), {"vlm": closed.pop("predicted")["answer"]}
    scores = {"vlm": closed.pop("option_scores")["answer"]}
    scores["blind_vlm"] = closed_option_scores(
        blind, blind_processor, closed_rows, studies, config.progress, ("answer",)
    )["answer"]
    letters["blind_vlm"] = [best_letter(values) for values in scores["blind_vlm"]]
    hits["blind_vlm"] = [p == row["answer"] for p, row in zip(letters["blind_vlm"], closed_rows, strict=True)]
    breakdown = answerability_breakdown(hits, closed_rows, studies)
    closed["blind_vlm"] = breakdown["systems"]["blind_vlm"]
    closed["answerability"] = {key: value for key, value in breakdown.items() if key != "groups"}
    for group, entry in breakdown.get("groups", {}).items():  # image_answerable, report_only, unknown
        closed[group] = {**entry.pop("systems"), **entry}
    vlms = {"vlm": (model, processor), "blind_vlm": (blind, blind_processor)}
    swap = demo_swap_consistency(config, vlms, closed_rows, studies, letters, scores)
    ontology = Ontology.load()
    follow_up = longitudinal_questions(data.rows("longitudinal", "test"), ontology, config.seed)
    follow_up_train = longitudinal_questions(data.rows("longitudinal", "train"), ontology, config.seed)
    longitudinal = evaluate_longitudinal(
        model, processor, follow_up, studies, config.progress, train_rows=follow_up_train
    )
    open_rows = sample_rows(
        [r for r in data.rows("vqa", "test") if r.get("open_question")], config.open_questions, config.seed
    )
    report_metrics, unavailable = available_report_metrics()
    open_ended = evaluate_open_ended(
        ComparativeReader(model, processor), open_rows, studies, BERTScorer(), config.progress, report_metrics
    )
    return {
        "vqa": {
            "closed": closed,
            "swap_consistency": swap,
            "open_ended": open_ended["scores"],
            "bleu_signature": open_ended["bleu_signature"],
            "unavailable_metrics": unavailable,
            "examples": open_ended["examples"],
        },
        "longitudinal": longitudinal,
        **({"presence_ceiling": presence_ceiling(probe, closed_rows, baseline_rows, studies)} if probe else {}),
    }


def _montage(encoder, scorer, data, queries: list[dict], out: Path) -> dict | None:
    """Index the test studies of one modality and plot a search for a query whose entity-conditioned
    top hit is relevant (the first query when none is): the `medreco search --plot` picture."""
    from ..data.reports.ontology import entity_prompts
    from ..inference import GalleryIndex, Searcher

    if not queries:
        return None
    chosen = next((q for q in queries if q["systems"]["entity"]["recall@1"]), queries[0])
    modality = chosen["modality"]
    gallery = [s for s in data.study_ids("test") if data.studies[s].modality == modality]
    index = GalleryIndex(out / "index", encoder)
    index.add(gallery, [data.studies[s].image for s in gallery], [modality] * len(gallery), progress=False)
    patient = data.studies[chosen["query"]].patient_id
    exclude = {s for s in gallery if data.studies[s].patient_id == patient}
    prompt = entity_prompts().get(chosen["entity_id"], chosen["entity_id"])
    searcher = Searcher(index, scorer)
    query = data.studies[chosen["query"]].image
    hits, extras = searcher.search(query, modality, prompt, top_k=4, rerank_top=10, exclude=exclude)
    path = searcher.plot(query, modality, hits, extras, out / "figures" / "montage.png", f"{chosen['query']}: {prompt}")
    relevant = set(chosen.get("relevant", []))
    return {
        "query": chosen["query"],
        "entity": prompt,
        "figure": str(path.relative_to(out)),
        "hits": [{**h.to_dict(), "relevant": h.study_id in relevant} for h in hits],
    }


__all__ = [
    "RECIPE",
    "STAGES",
    "DemoConfig",
    "demo_settings",
    "expert_changes",
    "evaluate_demo",
    "prepare_data",
    "run_demo",
    "stage_overrides",
    "train_demo_stage",
    "write_model_cards",
]
