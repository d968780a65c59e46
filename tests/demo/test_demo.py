"""`medreco demo --quick`: the main job end to end on the synthetic cohort, from the CLI.

The quick run checks the pipeline, not the science: in three minutes the tiny models stay near
chance (entity and holistic Recall@1 within noise of each other, measured with 40, 80 and 120
patients, with bf16 and float32, larger batches and a reduced catalogue of conspicuous findings).
The retrieval claim is checked on the default run's cohort and stage-1 model instead
(`test_entity_beats_holistic_on_the_default_cohort`, ~11 minutes since the cohort holds five
families: opt-in with MEDRECO_SLOW_TESTS=1, out of CI for time); the whole default run's claims
by the opt-in test at the end."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from transformers import AutoImageProcessor, AutoModel, AutoModelForImageTextToText, AutoProcessor

from medreco.cli import main
from medreco.data.mining import MinedData
from medreco.demo.pipeline import DemoConfig, prepare_data, train_demo_stage
from medreco.demo.report import html_report, markdown_report
from medreco.evaluation import evaluate_retrieval
from medreco.inference import RetrievalEncoder

SYSTEMS = ("entity", "entity+rerank", "holistic")


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("demo")
    assert main(["demo", "--quick", "--out", str(out), "--quiet"]) == 0
    return out


def test_demo_writes_metrics_with_the_documented_schema(demo):
    metrics = json.loads((demo / "metrics.json").read_text())
    assert set(metrics) >= {"retrieval", "vqa", "longitudinal", "wall_time_seconds", "run", "montage"}
    families = {"chest_xray", "chest_ct", "brain_mri", "abdominal_ct", "ultrasound"}
    assert set(metrics["retrieval"]) == families | {"all"}
    assert set(metrics["expert_changes"]) == families  # every family's expert trained
    assert all(change > 0.01 for change in metrics["expert_changes"].values()), metrics["expert_changes"]
    for modality, levels in metrics["retrieval"].items():
        assert "all" in levels and "abnormality" in levels, modality
        for entry in levels.values():
            assert entry["queries"] > 0
            for system in SYSTEMS:
                stats = entry[system]
                for k in (1, 3, 5):
                    assert 0.0 <= stats[f"recall@{k}"] <= 1.0
                    low, high = stats[f"recall@{k}_ci95"]
                    assert low <= stats[f"recall@{k}"] <= high
                assert stats["recall@1"] <= stats["recall@3"] <= stats["recall@5"]
            assert "entity vs holistic" in entry["mcnemar_recall@1"]
    closed = metrics["vqa"]["closed"]
    assert closed["vlm"]["questions"] == closed["text_only"]["questions"] > 0
    assert 0.0 <= closed["vlm"]["accuracy"] <= 1.0 and 0.0 <= closed["text_only"]["accuracy"] <= 1.0
    assert closed["scoring"] == "answer" and set(closed["by_scoring"]) == {"letter", "answer", "answer_mean"}
    assert closed["by_scoring"]["answer"] == {**closed["vlm"], "mcnemar": closed["mcnemar"]}
    assert closed["by_scoring"]["letter"]["questions"] == closed["vlm"]["questions"]
    # the blind VLM (trained in the demo) and every system on image-answerable and report-only questions
    assert closed["blind_vlm"]["questions"] == closed["vlm"]["questions"]
    assert closed["answerability"]["available"]
    groups = [g for g in ("image_answerable", "report_only", "unknown") if g in closed]
    assert "image_answerable" in groups
    assert sum(closed[g]["questions"] for g in groups) == closed["vlm"]["questions"]
    assert closed["answerability"]["counts"] == {
        g: closed[g]["questions"] if g in closed else 0 for g in closed["answerability"]["counts"]
    }
    overall = {"vlm": closed["vlm"], "blind_vlm": closed["blind_vlm"], **closed["baselines"]}
    for system, entry in overall.items():  # the groups partition the questions
        correct = sum(closed[g][system]["accuracy"] * closed[g]["questions"] for g in groups)
        assert correct == pytest.approx(entry["accuracy"] * entry["questions"]), system
    for group in groups:
        assert set(closed[group]["comparisons"]) == {"blind_vlm", "text_only", "majority"}
        for other, comparison in closed[group]["comparisons"].items():
            assert comparison["difference"] == pytest.approx(
                closed[group]["vlm"]["accuracy"] - closed[group][other]["accuracy"]
            )
    assert set(closed["image_answerable"]["by_family"]) <= families
    swap = metrics["vqa"]["swap_consistency"]
    assert swap["vlm"]["questions"] == swap["blind_vlm"]["questions"] > 0
    # the blind VLM reads the same prompt in both orders: it never tells which image is which
    assert swap["blind_vlm"]["order_dependent"]["hits"] == 0
    assert swap["vlm_minus_blind_vlm"]["difference"] == pytest.approx(swap["vlm"]["order_dependent"]["rate"])
    temporal = metrics["temporal"]
    assert set(temporal) == {"prior_vs_static", "tila_vs_plain", "change_probe"}
    for comparison in ("prior_vs_static", "tila_vs_plain"):
        assert {"model", "baseline", "majority", "model_minus_baseline"} <= set(temporal[comparison]["all"])
    probe = temporal["change_probe"]
    assert probe["pair"]["pairs"] == temporal["prior_vs_static"]["all"]["model"]["pairs"]
    for reading in ("pair", "current_only"):
        assert all(0 <= probe[reading][p]["value"] <= 1 for p in ("standard", "reversed", "combined", "consistency"))
    assert "change probe" in (demo / "report.md").read_text()
    negation = metrics["negation"]  # CLIP-clinic's CXR-Align tasks on the abnormal test studies
    assert negation["cases"] == sum(entry["cases"] for entry in negation["by_modality"].values()) > 0
    for task in ("negated", "omitted", "statement"):
        low, high = negation[task]["interval"]
        assert low <= negation[task]["accuracy"] <= high and "correct" not in negation[task]
    assert "Negation: does the image feature read a denied finding?" in (demo / "report.md").read_text()
    trends = metrics["trends"]  # TAMM's protocols; the demo's stage 1 trains no trend classifier
    assert "unavailable" in trends["classifier"]
    similarity = trends["sentence_similarity"]
    if "unavailable" not in similarity:  # as many contradictions as paraphrases, thresholds fitted per space
        assert similarity["pairs"] == 2 * similarity["paraphrases"] > 0
        assert {"threshold", "accuracy", "mean_cosine"} <= set(similarity["shared"]) & set(similarity["backbone"])
    assert "## Trends: improving, stable or worsening" in (demo / "report.md").read_text()
    probe = metrics["probe"]
    assert probe["table"] and [row["entity"] for row in probe["table"]] == sorted(
        probe["entities"], key=lambda e: (probe["entities"][e]["family"], e)
    )
    for entry in probe["entities"].values():
        assert "probabilities" not in entry and entry["n_test"] == entry["positives"] + entry["negatives"]
    assert metrics["presence_ceiling"]["questions"] >= 0
    report_metrics = {"ratescore", "radgraph"}  # scored when installed, else the reason is recorded
    assert set(metrics["vqa"]["open_ended"]) - report_metrics == {
        "questions", "bleu", "rouge_l", "meteor_no_synonyms", "entity_f1", "bertscore_f1"
    }  # fmt: skip
    assert metrics["vqa"]["bleu_signature"].startswith("nrefs:1|case:lc|eff:no|tok:13a|smooth:exp|version:")
    assert (
        set(metrics["vqa"]["open_ended"]) & report_metrics | set(metrics["vqa"]["unavailable_metrics"])
        == report_metrics
    )
    follow_up = metrics["longitudinal"]
    assert follow_up["questions"] > 0
    matrix = follow_up["confusion"]["matrix"]
    assert sum(map(sum, matrix)) == follow_up["questions"]
    correct = sum(matrix[i][i] for i in range(len(matrix)))
    assert correct == pytest.approx(follow_up["accuracy"] * follow_up["questions"])
    assert set(follow_up) >= {"by_entity", "by_attribute", "by_label"}
    # the follow-up baselines are fitted on the training follow-up questions and compared per patient
    assert set(follow_up["baselines"]) == {"text_only", "majority"}
    for baseline in follow_up["baselines"].values():
        assert baseline["questions"] == follow_up["questions"] and 0.0 <= baseline["accuracy"] <= 1.0
        assert baseline["clustered"]["clusters"] >= 1 and 0 <= baseline["mcnemar"]["p_value"] <= 1
    times = metrics["wall_time_seconds"]
    assert set(times) >= {"cohort", "mining", "stage1", "reranker", "stage2", "stage2_blind", "evaluation", "total"}
    assert times["total"] >= sum(v for k, v in times.items() if k != "total") - 1


def test_demo_writes_reports_figures_and_loadable_models(demo):
    figures = ("headline", "recall_bars", "confusion", "montage", "answerability")
    for name in ("report.md", "report.html", *(f"figures/{figure}.png" for figure in figures)):
        assert (demo / name).stat().st_size > 0, name
    report = (demo / "report.md").read_text()
    assert "image-answerable" in report and "Swap consistency" in report and "Ceiling" in report
    html = (demo / "report.html").read_text()
    assert "<table>" in html and "Recall" in html and "figures/" not in html  # every figure embedded
    assert html.count('src="data:image/png;base64,') == report.count("](figures/")
    models = demo / "models"
    retrieval = AutoModel.from_pretrained(models / "stage1" / "final")
    assert retrieval.config.model_type == "medreco"
    assert AutoImageProcessor.from_pretrained(models / "stage1" / "final") is not None
    assert AutoModel.from_pretrained(models / "reranker" / "final").config.model_type == "medreco_reranker"
    vlm = AutoModelForImageTextToText.from_pretrained(models / "stage2" / "final")
    assert vlm.config.model_type == "medreco_vlm"
    assert AutoProcessor.from_pretrained(models / "stage2" / "final") is not None


def test_the_readme_python_blocks_run_on_a_quick_demo(demo, tmp_path, monkeypatch):
    """The README's blocks on `medreco-demo/...`, as written, from the folder a user runs them in."""
    from test_readme import DEMO_FOLDER, demo_blocks, run_block

    (tmp_path / DEMO_FOLDER).symlink_to(demo)
    monkeypatch.chdir(tmp_path)
    retrieval, vlm = demo_blocks()
    found = run_block(retrieval)
    assert found["images"]["pixel_values"].shape[:2] == (2, 1) and -1.0 <= found["score"] <= 1.0
    grid = found["grid"]
    assert found["heat_map"].shape == (grid, grid) and (tmp_path / "heat-map.png").stat().st_size > 0
    assert torch.allclose(found["heat_map"].sum(), torch.tensor(1.0), atol=1e-3)  # the attention, per slice summed
    answered = run_block(vlm)
    assert isinstance(answered["answer"], str)
    assert answered["output"].shape[1] <= answered["inputs"]["input_ids"].shape[1] + 64


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Chromium (apt-get install chromium)")
def test_the_report_reads_in_a_real_browser(demo, tmp_path):
    """report.html in headless Chromium: the page the browser builds leads with the headline table and
    figure, keeps the full tables in one collapsed section, and its screenshot is not blank."""
    import matplotlib.image

    page = (demo / "report.html").resolve().as_uri()
    chromium = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1200,1600"]
    dom = subprocess.run([*chromium, "--dump-dom", page], capture_output=True, text=True, timeout=120).stdout
    assert dom.index("What the run shows") < dom.index("<table>") < dom.index("<details>")
    assert dom.count("<details>") == 1 and "data:image/png;base64," in dom
    shot = tmp_path / "report.png"
    subprocess.run([*chromium, f"--screenshot={shot}", page], capture_output=True, timeout=120, check=True)
    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[0] >= 1000 and pixels.std() > 0.05  # drawn, not an empty page


def test_demo_privacy_nothing_identifying_in_outputs(demo):
    """The cohort's DICOM files carry fake names, IDs and institutions; none may reach the outputs."""
    import pydicom

    first = next((demo / "cohort" / "patients").rglob("*.dcm"))
    header = pydicom.dcmread(first, stop_before_pixels=True)
    secrets = [str(header.PatientName), str(header.PatientID), str(header.InstitutionName)]
    cards = [f"models/{stage}/final/README.md" for stage in ("stage1", "reranker", "stage2")]
    for name in ("metrics.json", "report.md", "report.html", "retrieval_queries.json", *cards):
        text = (demo / name).read_text()
        for secret in secrets:
            assert secret not in text, (name, secret)


def test_demo_models_carry_hub_model_cards(demo):
    from huggingface_hub import ModelCard

    for stage, tag in (("stage1", "medreco-retrieval"), ("reranker", "medreco-reranker"), ("stage2", "medreco-vlm")):
        card = ModelCard.load(demo / "models" / stage / "final" / "README.md")
        assert card.data.library_name == "transformers" and tag in card.data.tags
        assert "synthetic" in card.text and "No patient data" in card.text and "| phase | steps |" in card.text
        assert "## Evaluation" in card.text and "not for clinical use" in card.text


def test_demo_rerun_reuses_finished_steps(demo, capsys):
    before = (demo / "models" / "stage1" / "final" / "model.safetensors").stat().st_mtime_ns
    assert main(["demo", "--quick", "--out", str(demo), "--quiet"]) == 0
    assert (demo / "models" / "stage1" / "final" / "model.safetensors").stat().st_mtime_ns == before
    metrics = json.loads((demo / "metrics.json").read_text())
    assert "stage1" not in metrics["wall_time_seconds"]  # not retrained
    assert "Recall@1" in capsys.readouterr().out


def test_ablate_retrains_each_switch_and_reports_every_run_against_the_demo(demo, capsys):
    """`medreco ablate` on the demo's folder: the method is the demo's own run (not retrained), each
    ablation retrains its stage with one switch and the same steps, and every row is scored on the
    demo's queries and questions with clustered intervals; a second call trains nothing."""
    args = ["ablate", "--quick", "--out", str(demo), "--only", "holistic-trained,blind", "--quiet"]
    assert main(args[:1] + args[2:]) == 2  # the default sizes on a quick demo's folder: refused
    assert "quick = True" in capsys.readouterr().err
    assert main(args) == 0
    root = demo / "ablations"
    result = json.loads((root / "ablation.json").read_text())
    assert not (root / "seed-0" / "base" / "models").exists()  # the demo's own models
    holistic = json.loads(
        (root / "seed-0" / "holistic-trained" / "models" / "stage1" / "final" / "training_config.json").read_text()
    )
    demo_stage1 = json.loads((demo / "models" / "stage1" / "final" / "training_config.json").read_text())
    assert holistic["ranking_target"] == "study" and demo_stage1["ranking_target"] == "entity"
    assert holistic["ranking"]["max_steps"] == demo_stage1["ranking"]["max_steps"]
    assert not (root / "seed-0" / "blind" / "models").exists()  # the demo's own blind VLM, not retrained
    blind = AutoModelForImageTextToText.from_pretrained(demo / "models" / "stage2_blind" / "final")
    assert blind.config.blind_images
    table = result["seeds"]["0"]
    assert [r["system"] for r in table["retrieval"]] == [
        "entity (MedReCo)",
        "entity + reranker",
        "holistic, CLS query of the same model",
        "holistic, trained for study ranking",
    ]
    assert [r["system"] for r in table["vqa"]] == [
        "VLM (MedReCo)",
        "blind VLM (blank images)",
        "text-only (question wording)",
        "majority answer",
    ]
    metrics = json.loads((demo / "metrics.json").read_text())  # the reference rows are the demo's scores
    assert table["retrieval"][0]["score"]["mean"] == pytest.approx(
        metrics["retrieval"]["all"]["all"]["entity"]["recall@1"]
    )
    assert table["vqa"][0]["score"]["mean"] == pytest.approx(metrics["vqa"]["closed"]["vlm"]["accuracy"])
    for row in table["retrieval"][1:] + table["vqa"][1:]:
        test = row["method_minus_this"]
        assert test["interval"][0] <= test["difference"] <= test["interval"][1] and 0 < test["p_value"] <= 1
        assert test["difference"] == pytest.approx(
            table["retrieval" if row in table["retrieval"] else "vqa"][0]["score"]["mean"] - row["score"]["mean"]
        )
    assert [(t["baseline"], t["task"]) for t in result["targets"]] == [
        ("holistic, trained for study ranking", "retrieval"),
        ("blind VLM (blank images)", "vqa"),
        ("blind VLM (blank images)", "vqa_image_answerable"),
        ("text-only (question wording)", "vqa_image_answerable"),
        ("blind VLM (blank images)", "vqa_swap"),
    ]
    # swap consistency per seed, on the demo's swap questions: the reference row is the demo's VLM
    swap = table["vqa_swap"]
    assert [r["system"] for r in swap] == ["VLM (MedReCo)", "blind VLM (blank images)"]
    demo_swap = metrics["vqa"]["swap_consistency"]
    assert swap[0]["score"]["mean"] == pytest.approx(demo_swap["vlm"]["order_dependent"]["rate"])
    assert swap[1]["score"]["mean"] == pytest.approx(demo_swap["blind_vlm"]["order_dependent"]["rate"]) == 0.0
    assert swap[1]["method_minus_this"]["difference"] == pytest.approx(demo_swap["vlm_minus_blind_vlm"]["difference"])
    answerable = [r for r in table["vqa_image_answerable"]]
    assert [r["system"] for r in answerable] == [r["system"] for r in table["vqa"]]
    assert answerable[0]["score"]["mean"] == pytest.approx(
        metrics["vqa"]["closed"]["image_answerable"]["vlm"]["accuracy"]
    )
    markdown = (root / "ablation.md").read_text()
    assert (
        "| holistic, trained for study ranking | 0 |" in markdown and (root / "figures" / "ablation.png").stat().st_size
    )
    assert capsys.readouterr().out.count("seed 0 (") == 5  # each target, met or not
    trained = (root / "seed-0" / "holistic-trained" / "models" / "stage1" / "final" / "model.safetensors").stat()
    assert main(args) == 0
    assert (
        root / "seed-0" / "holistic-trained" / "models" / "stage1" / "final" / "model.safetensors"
    ).stat().st_mtime_ns == trained.st_mtime_ns
    assert json.loads((root / "ablation.json").read_text())["seeds"] == result["seeds"]


def test_ablate_refuses_an_unknown_switch_in_one_line(tmp_path, capsys):
    assert main(["ablate", "--out", str(tmp_path), "--only", "holistic-trained,no-such-thing"]) == 2
    error = capsys.readouterr().err.strip()
    assert "no-such-thing" in error and "\n" not in error and not list(tmp_path.iterdir())


def test_markdown_and_html_reports_render_tables(tmp_path):
    entry = {
        "queries": 4,
        **{
            s: {
                **{f"recall@{k}": 0.5 for k in (1, 3, 5)},
                **{f"recall@{k}_ci95": [0.2, 0.8] for k in (1, 3, 5)},
                "ndcg@5": 0.5,
            }
            for s in SYSTEMS
        },
        "mcnemar_recall@1": {"entity vs holistic": {"b": 1, "c": 0, "p_value": 1.0}},
    }
    clustered = {"difference": 0.05, "interval": (-0.02, 0.12), "p_value": 0.21, "clusters": 3}
    entry["clustered_recall@1"] = {"entity vs holistic": clustered}
    rate = {"accuracy": 0.5, "questions": 2, "ci95": [0.1, 0.9]}
    metrics = {
        "retrieval": {"all": {"all": entry}},
        "vqa": {
            "closed": {
                "scoring": "answer",
                "vlm": rate,
                "text_only": rate,
                "mcnemar": {"p_value": 1.0},
                "clustered": clustered,
                "by_scoring": {name: {**rate, "mcnemar": {"p_value": 1.0}} for name in ("answer", "letter")},
                "by_dimension": {"presence": rate},
            },
            "open_ended": {"questions": 1, "bleu": 0.1},
            "examples": [{"study_a": "a", "study_b": "b", "question": "q?", "reference": "r <b>", "answer": ""}],
        },
        "longitudinal": {**rate, "by_label": {"new": rate}, "by_attribute": {}, "by_entity": {}},
    }
    markdown = markdown_report(metrics)
    assert "| all | all | 4 | entity | 50.0 [20.0-80.0]" in markdown
    assert "answer likelihood) | 50.0 [10.0-90.0] | 2 |" in markdown and "letter p = 1" in markdown
    sentence = "difference +5.0 points, 95% cluster-bootstrap interval [-2.0, +12.0], sign-flip permutation p = 0.21"
    assert markdown.count(sentence) == 2 and "over 3 patients" in markdown  # retrieval and VQA
    page = html_report(markdown)
    assert page.count("<table>") == 7  # headline, retrieval, VQA, dimensions, examples, follow-up, wall time
    # what a reader wants first: the headline comparisons, then the full tables (collapsed in the page)
    order = [markdown.index(h) for h in ("## What the run shows", "## Full results", "## Controllable retrieval")]
    assert order == sorted(order)
    headline = "| retrieval Recall@1: entity-conditioned | 4 queries | 50.0 | holistic (same model) | 50.0 | +5.0"
    assert headline in markdown
    assert "| closed VQA, all questions: VLM | 2 questions |" in markdown
    assert page.index("<details>") < page.index("Controllable retrieval") and page.count("<details>") == 1
    assert "`" not in page  # markdown code spans render as code, not as backticks
    assert "r &lt;b&gt;" in page and "<b>" not in page  # text is escaped
    figure = tmp_path / "figures" / "plot.png"
    figure.parent.mkdir()
    figure.write_bytes(b"\x89PNG\r\n\x1a\n fake")
    embedded = html_report("# Report\n\n![a plot](figures/plot.png)\n\n![gone](figures/missing.png)\n", tmp_path)
    assert f'src="data:image/png;base64,{base64.b64encode(figure.read_bytes()).decode()}"' in embedded
    assert 'src="figures/missing.png"' in embedded and "<h1>Report</h1>" in embedded
    # every baseline with its clustered comparison; per-entity tables for retrieval and VQA
    closed = metrics["vqa"]["closed"]
    closed["baselines"] = {
        "text_only": {**rate, "clustered": clustered},
        "majority": {**rate, "accuracy": 0.25, "clustered": {**clustered, "difference": 0.25}},
    }
    closed["by_entity"] = {"cxr/abnormal/pleural-effusion": rate}
    metrics["retrieval_by_entity"] = {
        "cxr/anatomy/pleura": {
            "modality": "chest_xray",
            "level": "anatomy",
            "queries": 4,
            **dict.fromkeys(SYSTEMS, 0.5),
        }
    }
    markdown = markdown_report(metrics)
    assert "| majority answer (most often right option) | 25.0 [10.0-90.0] | 2 |" in markdown
    assert (
        "vs majority answer (most often right option), clustered" in markdown and "difference +25.0 points" in markdown
    )
    assert "| chest_xray | anatomy | cxr/anatomy/pleura | 4 | 50.0 | 50.0 | 50.0 |" in markdown
    assert "| cxr/abnormal/pleural-effusion | 50.0 | 2 |" in markdown
    # the report says which splits the run's language-prior filter judged
    assert "before the language-prior filter (splits not recorded)" in markdown
    metrics["run"] = {"mined": {"vqa_language_prior_splits": []}}
    metrics["longitudinal"]["baselines"] = {"majority": {**rate, "accuracy": 0.25, "clustered": clustered}}
    assert "Patient-clustered (VLM vs majority answer (most often right option) (25.0%, fitted on the training " in (
        markdown_report(metrics)
    )
    assert "language-prior filter (not applied)" in markdown_report(metrics)
    metrics["run"]["mined"]["vqa_language_prior_splits"] = ["train", "test"]
    assert "language-prior filter (which judged the train, test splits)" in markdown_report(metrics)


@pytest.mark.skipif(
    not os.environ.get("MEDRECO_SLOW_TESTS"),
    reason="about 11 minutes on 2 cores (the default cohort and stage 1): set MEDRECO_SLOW_TESTS=1",
)
def test_entity_beats_holistic_on_the_default_cohort(tmp_path):
    """Issue 6's retrieval claim, in CI: the default demo's cohort (400 patients, several findings per
    study), mining and stage-1 training, exactly as `medreco demo` runs them; on the test split,
    entity-conditioned Recall@1 beats the same model's whole-image (holistic) Recall@1 by McNemar at
    p < 0.05. With seed 0 (this test's, and the demo's) stage 1 gives 48.6% vs 39.4% on 3,433
    queries (five modality families since issue 24; 45.4% vs 38.5% on 2,559 chest queries before),
    McNemar p = 3e-20; earlier settings' seeds 0-3
    were ahead by 4.8-10.4 points, p <= 0.002 (docs/demo.md). A run is the same in every
    process: CI once saw p = 0.15 for this seed when string hashing still reached training."""
    config = DemoConfig(out_dir=str(tmp_path / "demo"), progress=False)
    mined = prepare_data(config)
    encoder = RetrievalEncoder.from_pretrained(train_demo_stage(config, "stage1"))
    overall = evaluate_retrieval(encoder, MinedData(mined), "test", progress=False)["summary"]["all"]["all"]
    assert overall["queries"] >= 1000
    assert overall["entity"]["recall@1"] > overall["holistic"]["recall@1"] > overall["chance"]["recall@1"]
    assert overall["mcnemar_recall@1"]["entity vs holistic"]["p_value"] < 0.05


FULL_DEMO = os.environ.get("MEDRECO_FULL_DEMO")


@pytest.mark.skipif(
    not FULL_DEMO,
    reason="the default demo takes 12-20 minutes on 2 cores: set MEDRECO_FULL_DEMO=1 (fresh run) or to a demo folder",
)
def test_default_demo_results_mean_something(tmp_path):
    """The README's claims on the default run, each as a patient-clustered interval above zero:
    entity-conditioned Recall@1 ahead of holistic; on image-answerable closed questions the VLM
    ahead of the blind VLM (blank images, same training) and of the text-only answerer; overall
    closed accuracy at or above text-only; swap consistency above the blind VLM's. Not claimed (and
    not asserted): anything on report-only questions, where text-only is ahead."""
    out = Path(FULL_DEMO) if FULL_DEMO not in ("1", "true") else tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--quiet"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    overall = metrics["retrieval"]["all"]["all"]
    assert overall["queries"] >= 1000
    assert overall["entity"]["recall@1"] > overall["holistic"]["recall@1"] > overall["chance"]["recall@1"]
    assert overall["clustered_recall@1"]["entity vs holistic"]["interval"][0] > 0
    closed = metrics["vqa"]["closed"]
    assert closed["scoring"] == "answer" and closed["vlm"]["questions"] >= 1000
    answerable = closed["image_answerable"]
    assert answerable["questions"] >= 500 and set(answerable["by_family"]) == set(metrics["expert_changes"])
    for baseline in ("blind_vlm", "text_only"):
        test = answerable["comparisons"][baseline]["clustered"]
        assert test["interval"][0] > 0 and test["p_value"] < 0.05, (baseline, test)
    assert closed["baselines"]["text_only"]["clustered"]["difference"] >= 0
    swap = metrics["vqa"]["swap_consistency"]
    assert swap["vlm_minus_blind_vlm"]["clustered"]["interval"][0] > 0
    assert metrics["presence_ceiling"]["questions"] > 0 and metrics["probe"]["table"]
    # the frozen features allow more order-awareness than stage 2 reads from them (README, Results)
    ceiling_swap = metrics["presence_ceiling"]["swap_consistency"]["order_dependent"]
    assert ceiling_swap["clustered"]["interval"][0] > swap["vlm"]["by_dimension"]["presence"]["rate"]
