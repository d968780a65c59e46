"""Model cards: the Hub metadata users filter and compare by (base model and licence included),
evaluation with intervals, the input specification read from the saved processor, code that runs as
printed, the citation, a privacy statement, and nothing that was not passed in or saved."""

from __future__ import annotations

import dataclasses
import re
import shutil
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
import yaml
from huggingface_hub import ModelCard
from transformers import AutoConfig

from hub_ready import write_png
from medreco.data.phantom.dicom import DicomIdentity, write_radiograph
from medreco.demo.pipeline import write_model_cards
from medreco.factory import BUNDLED_HUB_ID, BUNDLED_TEXT_ENCODER, bundled_text_encoder_path, hub_model_id
from medreco.hub import Score, load_processor, model_card, write_model_card
from medreco.hub.card import input_specification
from medreco.hub.citation import CITATION_CFF
from medreco.processing import MedReCoImageProcessor
from medreco.training import load_recipe
from medreco.training.config import ModelSource
from medreco.training.loop import write_run_record
from toy_mined import RECIPES

ROOT = Path(__file__).resolve().parents[2]


def test_a_card_carries_the_metadata_and_the_scores_with_their_intervals(tmp_path):
    scores = [
        Score("synthetic closed VQA", "accuracy", 0.494, (0.463, 0.525), 1000),
        ("synthetic open VQA", "bleu", 0.445),  # a plain (task, metric, value) row still works
    ]
    training = {"stage2": {"steps": 700, "first_loss": 2.5, "last_loss": 0.7}}
    card = model_card("vlm", training, scores, "The synthetic cohort.", base_model="Qwen/Qwen2.5-7B-Instruct")
    write_model_card(card, tmp_path)
    loaded = ModelCard.load(tmp_path / "README.md")  # what the Hub parses
    data = loaded.data
    assert data.license == "apache-2.0" and data.library_name == "transformers"
    assert data.pipeline_tag == "image-text-to-text" and data.base_model == "Qwen/Qwen2.5-7B-Instruct"
    assert "medreco-vlm" in data.tags
    results = {(r.task_name, r.metric_type): r for r in data.eval_results}
    closed = results[("synthetic closed VQA", "accuracy")]
    assert closed.metric_value == pytest.approx(0.494) and closed.task_type == "visual-question-answering"
    assert "95% CI 0.4630-0.5250" in closed.metric_name and "n=1000" in closed.metric_name
    assert results[("synthetic open VQA", "bleu")].dataset_split == "test"
    text = loaded.text
    for section in (
        "## Intended use",
        "## Training data",
        "## Training",
        "## Evaluation",
        "## Limitations",
        "## Privacy",
    ):
        assert section in text
    assert "| synthetic closed VQA | accuracy | 0.4940 | 0.4630-0.5250 | 1000 |" in text


def test_a_card_without_scores_has_no_model_index_and_every_family_has_one():
    for family in ("vision", "retrieval", "reranker", "vlm"):
        card = model_card(family, {"phase": {"steps": 1, "first_loss": 1.0, "last_loss": 0.5}})
        assert card.data.eval_results is None and card.data.license == "apache-2.0"
    assert model_card("reranker").data.pipeline_tag is None
    assert model_card("retrieval").data.pipeline_tag is None  # no pipeline runs it: no Hub widget that fails


def test_base_models_are_hub_ids_only():
    assert hub_model_id(BUNDLED_TEXT_ENCODER) == BUNDLED_HUB_ID
    assert hub_model_id("FremyCompany/BioLORD-2023") == "FremyCompany/BioLORD-2023"
    assert hub_model_id(None) is None and hub_model_id("runs/stage1/final") is None


def test_model_card_refuses_unknown_families():
    with pytest.raises(ValueError, match="unknown family"):
        model_card("segmenter")
    text = model_card("reranker", {"reranker": {"steps": 3, "first_loss": 0.7, "last_loss": 0.5}}).text
    assert "| reranker | 3 | 0.7000 | 0.5000 |" in text and "AutoModel" in text


def test_a_run_too_short_to_log_a_loss_still_gets_its_card(tmp_path):
    """Stage 2 records no loss when it stops before its first log step: the card leaves the cells empty."""
    card = model_card("vlm", {"stage2": {"steps": 2, "first_loss": None, "last_loss": None}})
    write_model_card(card, tmp_path)
    assert "| stage2 | 2 |  |  |" in (tmp_path / "README.md").read_text()


def test_the_install_line_names_the_transformers_versions_this_medreco_declares():
    declared = next(
        r.split(";")[0].replace(" ", "")
        for r in metadata.requires("medreco")
        if r.startswith("transformers") and "extra" not in r
    )
    assert ">=" in declared  # a range, as pyproject.toml declares it
    text = str(model_card("vlm"))
    assert f'pip install torch "{declared}"' in text


# Where cards are written: `write_run_record` (every `medreco train` stage), `write_model_cards`
# (`medreco demo`, which rewrites the training cards with its scores) and the export (`medreco
# export`, `export_for_remote_code`). The tests below go through those functions.


def _run_card(folder: Path, preset: str, stage: str, family: str, **changes) -> ModelCard:
    """The card `medreco train` writes for `stage` of the packaged recipe `preset`."""
    recipe = load_recipe(preset, stage)
    if changes:
        recipe = dataclasses.replace(recipe, **changes)
    folder.mkdir(parents=True)
    write_run_record(folder, recipe, {"phase": stage, "steps": 3, "first_loss": 1.0, "last_loss": 0.5}, family)
    return ModelCard.load(folder / "README.md")


def _section(card: ModelCard, title: str) -> str:
    return card.text.split(f"## {title}\n")[1].split("\n## ")[0]


def test_training_cards_name_the_base_models_the_recipe_starts_from_with_their_licences(tmp_path):
    paper = _run_card(tmp_path / "paper-stage1", "paper", "stage1", "retrieval")
    assert paper.data.base_model == "FremyCompany/BioLORD-2023"
    # BioLORD-2023's own card: `other`, ihtsdo-and-nlm-licences (SNOMED CT / UMLS terms), stricter than ours
    assert paper.data.license == "other" and paper.data.license_name == "ihtsdo-and-nlm-licences"
    assert paper.data.license_link == "https://huggingface.co/FremyCompany/BioLORD-2023"
    assert "derived from FremyCompany/BioLORD-2023" in _section(paper, "Base model and licence")

    tiny = _run_card(
        tmp_path / "tiny-stage1", "tiny", "stage1", "retrieval"
    )  # bundled MiniLM, licence read from its card
    bundled = ModelCard.load(bundled_text_encoder_path() / "README.md").data.license
    assert tiny.data.base_model == BUNDLED_HUB_ID and tiny.data.license == bundled == "apache-2.0"
    assert "vision encoder: initialised at random" in _section(tiny, "Base model and licence")

    vlm = _run_card(tmp_path / "paper-stage2", "paper", "stage2", "vlm")
    assert vlm.data.base_model == "Qwen/Qwen2.5-7B-Instruct" and vlm.data.license == "apache-2.0"
    assert "vision encoder: taken from a medreco stage-1 retrieval model" in _section(vlm, "Base model and licence")

    scratch = _run_card(tmp_path / "tiny-stage2", "tiny", "stage2", "vlm")  # a preset language model, no Hub base
    assert scratch.data.base_model is None and scratch.data.license == "apache-2.0"
    assert "language model: initialised at random" in _section(scratch, "Base model and licence")

    reranker = _run_card(tmp_path / "reranker", "paper", "reranker", "reranker")
    assert reranker.data.base_model is None and "reranker: trained from scratch" in reranker.text
    for card in (paper, tiny, vlm, scratch, reranker):
        assert "runs/" not in card.text and str(tmp_path) not in card.text  # no local path reaches the card


def test_a_run_continued_from_a_checkpoint_carries_the_checkpoints_base(tmp_path):
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    write_model_card(model_card("retrieval", base_model="FremyCompany/BioLORD-2023"), checkpoint)
    card = _run_card(
        tmp_path / "continued", "tiny", "stage1", "retrieval", model=ModelSource(init_from=str(checkpoint))
    )
    assert card.data.base_model == "FremyCompany/BioLORD-2023" and card.data.license == "other"
    assert "continued from a saved medreco checkpoint" in card.text and str(checkpoint) not in card.text


def test_the_demos_cards_keep_the_base_model_beside_their_scores(tmp_path):
    models = tmp_path / "models"
    for stage, family in (("stage1", "retrieval"), ("reranker", "reranker"), ("stage2", "vlm")):
        _run_card(models / stage / "final", "demo", stage, family)
        MedReCoImageProcessor(recipes=RECIPES).save_pretrained(models / stage / "final")
    recall = {"recall@1": 0.5, "recall@3": 0.7, "recall@5": 0.8, "recall@1_ci95": [0.4, 0.6]}
    accuracy = {"accuracy": 0.6, "ci95": [0.5, 0.7], "questions": 40}
    metrics = {
        "retrieval": {"all": {"all": {"queries": 20, "entity": recall, "holistic": recall, "entity+rerank": recall}}},
        "vqa": {"closed": {"vlm": accuracy}, "open_ended": {"bleu": 0.2, "questions": 10}},
        "longitudinal": accuracy,
    }
    write_model_cards(metrics, models)
    retrieval = ModelCard.load(models / "stage1" / "final" / "README.md")
    assert retrieval.data.base_model == BUNDLED_HUB_ID and retrieval.data.eval_results
    assert "## Input specification" in retrieval.text and "## Citation" in retrieval.text
    vlm = ModelCard.load(models / "stage2" / "final" / "README.md")
    assert vlm.data.base_model is None and "language model: initialised at random" in vlm.text


def _table(card_text: str) -> dict[str, list[str]]:
    """modality -> cells of the card's Input specification table."""
    section = card_text.split("## Input specification\n")[1].split("\n## ")[0]
    rows = [line.strip("|").split("|") for line in section.splitlines() if line.startswith("| ")][1:]  # no header
    return {cells[0].strip(): [cell.strip() for cell in cells[1:]] for cells in rows}


def test_the_input_specification_is_the_saved_processors_recipe(hub_ready):
    for family, folder in hub_ready.items():
        processor = load_processor(folder, family)
        images = getattr(processor, "image_processor", processor)
        table = _table((folder / "README.md").read_text())
        assert list(table) == images.modalities, family
        for modality in images.modalities:
            recipe = images.recipe(modality)
            dimensionality, spacing, intensity, shape, dicom = table[modality]
            assert dimensionality == ("2D" if recipe.kind == "projection" else "3D")
            assert shape == "1 x " + " x ".join(str(n) for n in recipe.size)
            assert dicom == ", ".join(recipe.dicom_modalities)
            if recipe.kind == "projection":
                assert f"{recipe.size[1]} x {recipe.size[2]}" in spacing and "aspect ratio kept" in spacing
            else:
                assert spacing == " x ".join(f"{value:g}" for value in recipe.spacing)
            low, high = recipe.window if recipe.kind == "ct" else recipe.percentiles
            assert f"{low:g}" in intensity and f"{high:g}" in intensity
    # the tiny recipe of these folders, not the paper's defaults: the table is read, not written out
    assert _table((hub_ready["vlm"] / "README.md").read_text())["chest_ct"][1:4:2] == ["40 x 8 x 8", "1 x 4 x 40 x 40"]


def test_the_input_specification_shows_a_recipes_standardisation(tmp_path):
    MedReCoImageProcessor(recipes={"chest_xray": {"mean": 0.5, "std": 0.25}}).save_pretrained(tmp_path)
    (row,) = [row for row in input_specification(tmp_path) if row.modality == "chest_xray"]
    assert row.intensity.endswith("then (x - 0.5) / 0.25") and row.dimensionality == "2D"
    assert input_specification(tmp_path / "nowhere") == []


def test_a_folder_without_a_recipe_says_it_records_no_base_model(hub_ready):
    text = (hub_ready["vision"] / "README.md").read_text()
    assert "records no base model" in _section(ModelCard(text), "Base model and licence")
    assert ModelCard(text).data.base_model is None


def test_the_citation_block_is_citation_cff():
    root = (ROOT / "CITATION.cff").read_text()
    assert root == CITATION_CFF, "the package's copy differs: copy CITATION.cff into src/medreco/hub/citation.py"
    cff = yaml.safe_load(root)
    (bibtex,) = re.findall(r"```bibtex\n(.*?)```", str(model_card("vlm")), flags=re.DOTALL)
    paper, software = bibtex.strip().split("\n\n")
    cited = cff["preferred-citation"]
    assert paper.startswith("@article{") and f"title = {{{cited['title']}}}" in paper
    authors = " and ".join(f"{a['family-names']}, {a['given-names']}" for a in cited["authors"])
    assert f"author = {{{authors}}}" in paper and f"year = {{{cited['year']}}}" in paper
    assert cited["identifiers"][0]["value"].split(":")[1] in paper and cited["url"] in paper
    assert software.startswith("@software{") and f"title = {{{cff['title']}}}" in software
    assert f"version = {{{cff['version']}}}" in software and "{{medreco developers}}" in software


def test_the_vlm_cards_pipeline_snippet_is_in_the_block_that_runs_as_printed(hub_ready):
    """test_remote_code.py runs this block (`card_code`) without medreco: the pipeline answers in it."""
    from test_remote_code import card_code

    code = card_code(hub_ready["vlm"])
    assert 'pipe = pipeline("image-text-to-text", model="medreco-vlm", trust_remote_code=True)' in code
    assert "pipe(text=messages, " in code  # the conversation with its images' modalities
    assert "pipeline(" not in card_code(hub_ready["retrieval"])  # its forward needs text: no pipeline serves it
    assert "pipeline(" not in card_code(hub_ready["reranker"])


def test_the_vision_cards_code_runs_as_printed(hub_ready, monkeypatch):
    from test_remote_code import card_code

    root = hub_ready["vision"].parent
    write_radiograph(np.random.default_rng(0).random((60, 50)), (0.2, 0.2), root / "query.dcm", DicomIdentity())
    write_png(root / "reference.png", seed=1)
    monkeypatch.chdir(root)
    namespace = {}
    exec(card_code(hub_ready["vision"]), namespace)  # as a user pastes it
    hidden = AutoConfig.from_pretrained(hub_ready["vision"]).hidden_size
    assert np.asarray(namespace["embedding"]).shape == (1, hidden)  # the pipeline's pooled features


def test_pushing_points_the_cards_pipeline_at_the_repository(hub_ready, tmp_path):
    from medreco.hub.push import _point_the_card_at

    shutil.copy(hub_ready["vlm"] / "README.md", tmp_path / "README.md")
    _point_the_card_at(tmp_path, "lab/vlm")
    text = (tmp_path / "README.md").read_text()
    assert 'pipeline("image-text-to-text", model="lab/vlm"' in text and 'from_pretrained("lab/vlm"' in text
    assert '"medreco-vlm"' not in text


def test_a_damaged_training_record_is_refused_naming_it(tmp_path):
    (tmp_path / "training_config.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"training_config\.json: damaged settings file, not JSON"):
        model_card("retrieval", folder=tmp_path)
