"""`medreco ablate`: the ablation grid at the demo's scale, over training seeds, in one table.

Every ablation retrains one stage of the demo with one recipe switch (same data, architecture
sizes, steps and batch sizes as the demo's run of that seed) and is scored on the demo's test
queries and questions, paired with the full method of the same seed:

- retrieval (Recall@1 over the test split's queries): the method (`entity`) against the reranker
  (`entity+rerank`), the same model's whole-image query (`holistic (CLS)`), a holistic model
  trained for study-level ranking (`ranking_target=study`), one shared MLP instead of the
  modality experts (`moe: false`), no statement alignment, the triplet loss;
- closed VQA (accuracy over the demo's sampled test questions): the VLM against the blind VLM
  (blank images, same architecture and steps), the VLM without entity tokens, and the text-only
  and majority-answer baselines fitted on the training split, also on the image-answerable
  questions alone; and swap consistency (the share of order-dependent questions whose answer
  changes to its inverse when the two images are exchanged) of the three VLMs.

Every difference has its patient-clustered bootstrap interval and sign-flip p-value (a query or
question is clustered by its patient). The cohort and its mining are the demo folder's (the
demo's seed); the seeds vary training only. Every run is kept and reported. Outputs under
`OUT/ablations/`: one folder per seed and run (models, per-query scores), `ablation.json`,
`ablation.md` and `figures/ablation.png`. A finished run is not redone."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from ..atomic import save_figure, write_text_atomically
from .pipeline import DemoConfig, Stopwatch, prepare_data, stage_overrides

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ablation:
    """One recipe switch: the stage it retrains, the `key=value` overrides, and what it asks."""

    name: str
    stage: str
    overrides: tuple[str, ...]
    question: str


ABLATIONS = (
    Ablation(
        "holistic-trained",
        "stage1",
        ("ranking_target=study",),
        "entity-conditioned ranking vs a holistic model trained to rank studies with the same budget",
    ),
    Ablation("shared-mlp", "stage1", ("model.overrides.vision_config.moe=false",), "modality experts vs one MLP"),
    Ablation("no-statement-alignment", "stage1", ("statement_alignment_weight=0",), "statement alignment on/off"),
    Ablation("triplet", "stage1", ("ranking_loss=triplet",), "contrastive ranking vs the paper's triplet margin"),
    Ablation("blind", "stage2", ("blind_images=true",), "does the VLM read the images (blank images)"),
    Ablation("no-entity-tokens", "stage2", ("entity_tokens=false",), "entity tokens on/off"),
)
BY_NAME = {a.name: a for a in ABLATIONS}

# (system label, run, the run's system): every row of the table, the reference first
RETRIEVAL_ROWS = (
    ("entity (MedReCo)", "base", "entity"),
    ("entity + reranker", "base", "entity+rerank"),
    ("holistic, CLS query of the same model", "base", "holistic"),
    ("holistic, trained for study ranking", "holistic-trained", "holistic"),
    ("entity, one shared MLP (no MoE)", "shared-mlp", "entity"),
    ("entity, no statement alignment", "no-statement-alignment", "entity"),
    ("entity, triplet loss", "triplet", "entity"),
)
VQA_ROWS = (
    ("VLM (MedReCo)", "base", "vlm"),
    ("blind VLM (blank images)", "blind", "vlm"),
    ("VLM without entity tokens", "no-entity-tokens", "vlm"),
    ("text-only (question wording)", "base", "text_only"),
    ("majority answer", "base", "majority"),
)
# Targets at the demo's scale (issues 21 and 45): (method, baseline, task, margin)
TARGETS = (
    ("entity (MedReCo)", "holistic, trained for study ranking", "retrieval", 0.05),
    ("VLM (MedReCo)", "blind VLM (blank images)", "vqa", 0.10),
    ("VLM (MedReCo)", "blind VLM (blank images)", "vqa_image_answerable", 0.10),
    ("VLM (MedReCo)", "text-only (question wording)", "vqa_image_answerable", 0.05),
    ("VLM (MedReCo)", "blind VLM (blank images)", "vqa_swap", 0.20),
)
TASKS = (
    ("retrieval", "Retrieval, Recall@1"),
    ("vqa", "Closed VQA, accuracy"),
    ("vqa_image_answerable", "Closed VQA, image-answerable questions, accuracy"),
    ("vqa_swap", "Swap consistency, order-dependent answers"),
)
SWAP_ROWS = VQA_ROWS[:3]  # the trained VLMs: the text-only and majority answers never see an order


@dataclass
class AblationConfig:
    """Which seeds and ablations to run on which demo folder (sizes: the demo's, `quick` or not)."""

    demo: DemoConfig
    seeds: tuple[int, ...] = (0,)
    ablations: tuple[str, ...] = tuple(a.name for a in ABLATIONS)

    def __post_init__(self):
        unknown = sorted(set(self.ablations) - set(BY_NAME))
        if unknown:
            raise ValueError(f"unknown ablation(s) {unknown}; choose from {sorted(BY_NAME)}")
        if not self.seeds:
            raise ValueError("give at least one seed")

    @property
    def root(self) -> Path:
        return Path(self.demo.out_dir) / "ablations"

    def models(self, seed: int, run: str) -> Path:
        """The models of a run: the demo's own `models/` for the full method at the demo's seed."""
        if run == "base" and seed == self.demo.seed:
            return Path(self.demo.out_dir) / "models"
        return self.root / f"seed-{seed}" / run / "models"

    def scores(self, seed: int, run: str) -> Path:
        return self.root / f"seed-{seed}" / run

    def stage_folder(self, seed: int, run: str, stage: str) -> Path:
        """Where a run's stage is trained: the demo's own blind VLM for the blind run at its seed."""
        if (seed, run, stage) == (self.demo.seed, "blind", "stage2"):
            return Path(self.demo.out_dir) / "models" / "stage2_blind"
        return self.models(seed, run) / stage


SIZES = ("quick", "patients", "alignment_steps", "stage1_steps", "reranker_steps", "stage2_steps", "stage2_batch_size")


def check_demo_folder(config: AblationConfig) -> None:
    """Refuse a demo folder run with other sizes or another seed than the ablations ask for: its
    models would be compared with ablations trained differently."""
    metrics = Path(config.demo.out_dir) / "metrics.json"
    if not metrics.exists():
        return
    ran = json.loads(metrics.read_text()).get("run", {}).get("config", {})
    for key in (*SIZES, "seed", "closed_questions"):
        if key in ran and ran[key] != getattr(config.demo, key):
            raise ValueError(
                f"{config.demo.out_dir}: a demo run with {key} = {ran[key]}, not {getattr(config.demo, key)}; "
                "ablate with the demo's own settings (--quick, --patients, --seed), or use another --out"
            )


def fingerprint(*folders: Path) -> list[str]:
    """Size and modification time of each model's weights: a score file of other weights is stale."""
    stamps = []
    for folder in folders:
        weights = folder / "model.safetensors"
        stat = weights.stat() if weights.exists() else None
        stamps.append(f"{folder.parent.name}:{stat.st_size}:{stat.st_mtime_ns}" if stat else f"{folder}:missing")
    return stamps


def cached_scores(path: Path, models: list[str]) -> dict | None:
    """A run's score file, if it was computed from these very models."""
    if not path.exists():
        return None
    scores = json.loads(path.read_text())
    return scores if scores.get("models") == models else None


def train_run(config: AblationConfig, seed: int, run: str, stage: str, clock: Stopwatch) -> Path:
    """Train one stage of one run (skipped when its final model exists); returns its final folder."""
    from ..training import load_recipe, train_stage

    folder = config.stage_folder(seed, run, stage)
    final = folder / "final"
    if (final / "config.json").exists():
        return final
    base_stage1 = config.models(seed, "base") / "stage1" / "final"
    overrides = [*stage_overrides(config.demo, stage), f"run.seed={seed}", f"run.output_dir={folder}"]
    if stage in ("reranker", "stage2"):
        key = "retrieval_model" if stage == "reranker" else "vision_model"
        overrides.append(f"{key}={base_stage1}")
    if run != "base":
        overrides += BY_NAME[run].overrides
    recipe = load_recipe("demo", stage, overrides)
    clock.run(f"seed {seed} {run} {stage}", lambda: train_stage(stage, recipe))
    return final


def retrieval_scores(config: AblationConfig, seed: int, run: str, data) -> dict:
    """Per-query Recall@1 of each system of a run's stage-1 model (with the reranker for the method)."""
    from ..evaluation import evaluate_retrieval
    from ..inference import RerankerScorer, RetrievalEncoder

    path = config.scores(seed, run) / "retrieval.json"
    models = config.models(seed, run)
    stamps = fingerprint(models / "stage1" / "final", *([models / "reranker" / "final"] if run == "base" else []))
    if (cached := cached_scores(path, stamps)) is not None:
        return cached
    encoder = RetrievalEncoder.from_pretrained(models / "stage1" / "final", tensor_cache_dir=_cache(config))
    scorer = RerankerScorer.from_pretrained(models / "reranker" / "final") if run == "base" else None
    result = evaluate_retrieval(encoder, data, "test", scorer, rerank_top=10, progress=config.demo.progress)
    scores = {
        "models": stamps,
        "keys": [f"{q['query']}|{q['entity_id']}" for q in result["queries"]],
        "patients": [data.studies[q["query"]].patient_id for q in result["queries"]],
        "systems": {
            system: [q["systems"][system]["recall@1"] for q in result["queries"]]
            for system in result["queries"][0]["systems"]
        },
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(path, json.dumps(scores))
    return scores


def vqa_scores(config: AblationConfig, seed: int, run: str, data, rows: list[dict]) -> dict:
    """Per-question hits of a run's VLM on the demo's sampled test questions (the demo's headline
    scoring), and of the baselines fitted on the training split before the language-prior filter;
    under `swap`, the same for swap consistency (per order-dependent question of the demo's swap
    sample, whether the answer changed to its inverse with the images exchanged)."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from ..evaluation import CLOSED_SCORING, closed_predictions, evaluate_swap_consistency, preload_images, sample_rows
    from ..evaluation.vqa import every_baseline_hits, question_cluster

    path = config.scores(seed, run) / "vqa.json"
    folder = config.stage_folder(seed, run, "stage2") / "final"
    stamps = fingerprint(folder)
    cached = cached_scores(path, stamps)
    if cached is not None and cached["keys"] == [question_key(r) for r in rows] and "swap" in cached:
        return cached
    model = AutoModelForImageTextToText.from_pretrained(folder).eval()
    model.remember_frozen_features()
    processor = AutoProcessor.from_pretrained(folder)
    scoring = CLOSED_SCORING[0]
    studies = preload_images(
        data.studies, [r[k] for r in rows for k in ("study_a", "study_b")], processor.image_processor
    )
    letters = closed_predictions(model, processor, rows, studies, config.demo.progress, (scoring,))[scoring]
    systems = {"vlm": [letter == row["answer"] for letter, row in zip(letters, rows, strict=True)]}
    if run == "base":
        train_rows = data.rows("vqa", "train") + data.rows("vqa_removed", "train")
        systems.update(every_baseline_hits(train_rows, rows))
    swap_indices = sample_rows(range(len(rows)), config.demo.swap_questions, config.demo.seed)  # the demo's
    swap_rows = [rows[i] for i in swap_indices]
    answered = [letters[i] for i in swap_indices]  # the first order, answered above
    swap = evaluate_swap_consistency(model, processor, swap_rows, studies, scoring=scoring, answered=answered)
    asymmetric = [swap_rows[i] for i in swap["order_dependent_rows"]]
    scores = {
        "models": stamps,
        "keys": [question_key(r) for r in rows],
        "patients": [question_cluster(r, data.studies) for r in rows],
        "scoring": scoring,
        "systems": systems,
        "swap": {
            "keys": [question_key(r) for r in asymmetric],
            "patients": [question_cluster(r, data.studies) for r in asymmetric],
            "systems": {"vlm": swap["hits"]["order_dependent"]},
        },
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(path, json.dumps(scores))
    return scores


def scores_subset(scores: dict, keep: list[bool]) -> dict:
    """A run's per-question scores restricted to the questions `keep` marks."""

    def select(values: list) -> list:
        return [value for value, kept in zip(values, keep, strict=True) if kept]

    systems = {name: select(hits) for name, hits in scores["systems"].items()}
    return {**scores, "keys": select(scores["keys"]), "patients": select(scores["patients"]), "systems": systems}


def question_key(row: dict) -> str:
    return f"{row['study_a']}|{row['study_b']}|{row['question']}"


def _cache(config: AblationConfig) -> Path:
    return Path(config.demo.out_dir) / "cache"


def compare(rows: tuple, runs: dict[str, dict]) -> list[dict]:
    """Each row's score with its clustered interval, and its difference from the first row (the
    method) with the clustered interval and sign-flip p-value, on the same queries or questions."""
    from ..evaluation.metrics import clustered_mean, clustered_paired_test

    reference_label, reference_run, reference_system = rows[0]
    reference = runs[reference_run]
    table = []
    for label, run, system in rows:
        if run not in runs or system not in runs[run]["systems"]:
            continue
        if runs[run]["keys"] != reference["keys"]:
            raise ValueError(f"{label}: scored on other queries than {reference_label}; delete its scores and rerun")
        hits = [float(h) for h in runs[run]["systems"][system]]
        ours = [float(h) for h in reference["systems"][reference_system]]
        entry = {"system": label, "run": run, "score": clustered_mean(hits, reference["patients"])}
        if (run, system) != (reference_run, reference_system):
            entry["method_minus_this"] = clustered_paired_test(ours, hits, reference["patients"])
        table.append(entry)
    return table


def run_ablations(config: AblationConfig) -> dict:
    """Train and score every (seed, run) of the grid; write `ablation.json`, `ablation.md` and the figure."""
    from ..data.mining import MinedData
    from ..evaluation import sample_rows

    check_demo_folder(config)
    clock = Stopwatch()
    mined = prepare_data(config.demo, clock)
    data = MinedData(mined)
    questions = sample_rows(data.rows("vqa", "test"), config.demo.closed_questions, config.demo.seed)
    stage1_runs = ["base", *(a for a in config.ablations if BY_NAME[a].stage == "stage1")]
    stage2_runs = ["base", *(a for a in config.ablations if BY_NAME[a].stage == "stage2")]
    seeds = {}
    for seed in config.seeds:
        for stage in ("stage1", "reranker", "stage2"):
            train_run(config, seed, "base", stage, clock)
        for run in stage1_runs[1:]:
            train_run(config, seed, run, "stage1", clock)
        for run in stage2_runs[1:]:
            train_run(config, seed, run, "stage2", clock)
        retrieval = {run: retrieval_scores(config, seed, run, data) for run in stage1_runs}
        vqa = {run: vqa_scores(config, seed, run, data, questions) for run in stage2_runs}
        seeds[str(seed)] = {"retrieval": compare(RETRIEVAL_ROWS, retrieval), "vqa": compare(VQA_ROWS, vqa)}
        seeds[str(seed)]["vqa_swap"] = compare(SWAP_ROWS, {run: vqa[run]["swap"] for run in vqa})
        answerable = [bool(row.get("image_answerable")) for row in questions]
        if any(answerable):
            subset = {run: scores_subset(scores, answerable) for run, scores in vqa.items()}
            seeds[str(seed)]["vqa_image_answerable"] = compare(VQA_ROWS, subset)
    result = {
        "seeds": seeds,
        "targets": targets(seeds),
        "ablations": {
            a.name: {"stage": a.stage, "overrides": list(a.overrides), "question": a.question}
            for a in ABLATIONS
            if a.name in config.ablations
        },
        "sizes": {k: v for k, v in vars(config.demo).items() if k not in ("out_dir", "progress")},
        "questions": len(questions),
        "wall_time_seconds": clock.seconds,
    }
    config.root.mkdir(parents=True, exist_ok=True)
    write_text_atomically(config.root / "ablation.json", json.dumps(result, indent=2))
    ablation_plot(result, config.root / "figures" / "ablation.png")
    write_text_atomically(config.root / "ablation.md", ablation_markdown(result))
    return result


def targets(seeds: dict) -> list[dict]:
    """Each target per seed: the difference, its clustered interval, and whether it is met (at least
    the margin, interval above zero)."""
    checks = []
    for method, baseline, task, margin in TARGETS:
        per_seed = {}
        for seed, tables in seeds.items():
            row = next((r for r in tables.get(task, []) if r["system"] == baseline), None)
            if row is None:
                continue
            test = row["method_minus_this"]
            per_seed[seed] = {
                "difference": test["difference"],
                "interval": test["interval"],
                "p_value": test["p_value"],
                "met": test["difference"] >= margin and test["interval"][0] > 0,
            }
        checks.append({"method": method, "baseline": baseline, "task": task, "margin": margin, "seeds": per_seed})
    return checks


def ablation_markdown(result: dict) -> str:
    """The table: every seed's score per system and its difference from the method."""
    lines = [
        "# Ablations at the demo's scale",
        "",
        f"Seeds (training): {', '.join(result['seeds'])}; the demo's cohort, mining and step counts; "
        f"{result['questions']} closed test questions. Scores with patient-clustered 95% bootstrap intervals; "
        "*method - this*: the method's score minus this system's, clustered interval and sign-flip p-value.",
        "",
    ]
    for task, title in TASKS:
        if not any(task in tables for tables in result["seeds"].values()):
            continue
        lines += [
            f"## {title}",
            "",
            "| system | seed | score % [95% CI] | method - this, points [95% CI] | p |",
            "|---|---|---|---|---|",
        ]
        for seed, tables in result["seeds"].items():
            for row in tables.get(task, []):
                score = row["score"]
                cell = f"{100 * score['mean']:.1f} [{100 * score['interval'][0]:.1f}, {100 * score['interval'][1]:.1f}]"
                test = row.get("method_minus_this")
                diff, p = "reference", ""
                if test:
                    low, high = test["interval"]
                    diff = f"{100 * test['difference']:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]"
                    p = f"{test['p_value']:.3g}"
                lines.append(f"| {row['system']} | {seed} | {cell} | {diff} | {p} |")
        lines.append("")
    lines += ["## Targets", ""]
    for target in result["targets"]:
        for seed, check in target["seeds"].items():
            low, high = check["interval"]
            verdict = "met" if check["met"] else "NOT met"
            lines.append(
                f"- seed {seed} ({target['task']}): {target['method']} - {target['baseline']} = "
                f"{100 * check['difference']:+.1f} points "
                f"[{100 * low:+.1f}, {100 * high:+.1f}] (target >= {100 * target['margin']:.0f}, interval above 0): "
                f"{verdict}"
            )
    lines += ["", "![ablations](figures/ablation.png)", ""]
    return "\n".join(lines)


def ablation_plot(result: dict, path: Path) -> Path:
    """Method minus each system, per seed, with clustered intervals: one panel per task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [
        (task, f"{title.split(',')[0]}{', image-answerable' if 'image' in task else ''}: method - system (points)")
        for task, title in TASKS
        if any(task in tables for tables in result["seeds"].values())
    ]
    figure, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 3.8), squeeze=False)
    axes = axes[0]
    for axis, (task, title) in zip(axes, tasks, strict=True):
        labels: list[str] = []
        for offset, (seed, tables) in enumerate(result["seeds"].items()):
            rows = [r for r in tables.get(task, []) if "method_minus_this" in r]
            labels = labels or [r["system"] for r in rows]
            for y, row in enumerate(rows):
                test = row["method_minus_this"]
                low, high = (100 * v for v in test["interval"])
                middle = 100 * test["difference"]
                axis.errorbar(
                    middle,
                    y + 0.15 * offset,
                    xerr=[[middle - low], [high - middle]],
                    fmt="o",
                    color=f"C{offset}",
                    capsize=2,
                    label=f"seed {seed}" if y == 0 else None,
                )
        axis.axvline(0, color="black", linewidth=0.8)
        axis.set_yticks(range(len(labels)), labels, fontsize=8)
        axis.invert_yaxis()
        axis.set_title(title, fontsize=10)
    axes[-1].legend(fontsize=8)
    return save_figure(figure, path)


__all__ = ["ABLATIONS", "Ablation", "AblationConfig", "ablation_markdown", "run_ablations", "targets"]
