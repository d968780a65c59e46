"""Model cards: the Hub metadata users filter and compare by, evaluation with intervals, a privacy
statement, and nothing that was not passed in."""

from __future__ import annotations

from importlib import metadata

import pytest
from huggingface_hub import ModelCard

from medreco.factory import BUNDLED_HUB_ID, BUNDLED_TEXT_ENCODER, hub_model_id
from medreco.hub import Score, model_card, write_model_card


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
