"""Training recipes: built-in recipes load into typed configs; errors name the key."""

from __future__ import annotations

import pytest

from medreco.training import RecipeError, load_recipe
from medreco.training.config import read_recipe, to_dict


def test_builtin_recipes_load_into_typed_configs():
    for stage in ("stage1", "reranker", "stage2"):
        for recipe in ("tiny", "demo", "paper"):
            config = load_recipe(recipe, stage)
            assert config.run.output_dir
    paper = load_recipe("paper", "stage1")
    assert paper.ranking.learning_rate == 1e-4 and paper.ranking.epochs == 10 and paper.triplet_margin == 0.2
    stage2 = load_recipe("paper", "stage2")
    assert stage2.optimization.learning_rate == 2e-5 and stage2.projector_learning_rate == 1e-4


def test_recipe_errors_name_the_key(tmp_path):
    with pytest.raises(RecipeError, match=r"alignment\.epochs"):
        load_recipe("tiny", "stage1", ["alignment.epochs=many"])
    with pytest.raises(RecipeError, match="unknown key"):
        load_recipe("tiny", "stage1", ["ranking.learning_rat=1"])
    with pytest.raises(RecipeError, match="not found"):
        load_recipe(tmp_path / "missing.yaml", "stage1")
    bad = tmp_path / "bad.yaml"
    bad.write_text("stage1: [1, 2")
    with pytest.raises(RecipeError, match="YAML"):
        load_recipe(bad, "stage1")
    # YAML reads a bare `no` as false: it still means "no mixed precision"
    assert load_recipe("tiny", "stage1", ["ranking.mixed_precision=no"]).ranking.mixed_precision == "no"


def test_a_recipe_extends_another_changing_only_what_it_names(tmp_path):
    (tmp_path / "base.yaml").write_text(
        "stage1:\n  triplet_margin: 0.3\n  alignment: {learning_rate: 0.01, epochs: 3}\n  run: {output_dir: base}\n"
    )
    (tmp_path / "child.yaml").write_text("extends: base.yaml\nstage1:\n  alignment: {epochs: 5}\n")
    child = load_recipe(tmp_path / "child.yaml", "stage1")
    assert child.alignment.epochs == 5 and child.alignment.learning_rate == 0.01  # mappings merge key by key
    assert child.triplet_margin == 0.3 and child.run.output_dir == "base"
    assert load_recipe(tmp_path / "child.yaml", "stage1", ["alignment.epochs=7"]).alignment.epochs == 7
    (tmp_path / "base.yaml").write_text("extends: child.yaml\n")
    with pytest.raises(RecipeError, match="circle"):
        load_recipe(tmp_path / "child.yaml", "stage1")
    (tmp_path / "orphan.yaml").write_text("extends: nowhere.yaml\n")
    with pytest.raises(RecipeError, match=r"nowhere\.yaml: recipe file not found"):
        load_recipe(tmp_path / "orphan.yaml", "stage1")


def test_the_demo_recipe_is_the_tiny_recipe_with_the_demos_changes():
    """Everything the demo trains with differs from `tiny` only where demo.yaml says so."""
    changed = {
        "stage1": {"freeze_text_encoder": True, "statement_alignment_weight": 1.0, "ranking_loss": "contrastive"},
        "reranker": {},
        "stage2": {
            "entity_tokens": True,
            "longitudinal_repeats": 8,
            "curriculum_steps": 150,
            "open_ended_share": 0.25,
            "remember_image_features": True,
        },
    }
    for stage, expected in changed.items():
        tiny, demo = to_dict(load_recipe("tiny", stage)), to_dict(load_recipe("demo", stage))
        differences = {key: demo[key] for key in demo if demo[key] != tiny[key]}
        if stage == "stage2":
            assert differences.pop("model")["overrides"]["text_config"]["num_hidden_layers"] == 4
            assert differences.pop("data")["max_train_samples"] is None
        assert differences == expected
    settings = read_recipe("demo")["demo"]
    assert settings["mining"]["metrics"] == ["agreement"] and sum(settings["mining"]["split_fractions"].values()) == 1
    assert settings["mining"]["language_prior_splits"] == []  # explicit, as the library default
    assert settings["mining"]["vqa_pairs_per_study"] == 4  # pairs in proportion to each family's studies
    assert set(settings["sizes"]) == {"full", "quick"} and settings["sizes"]["full"]["patients"] == 400


def test_every_ablation_switch_reaches_the_model_it_builds():
    """The overrides of `medreco ablate` (one per ablation) land where they act: the MoE switch in the
    built vision encoder, beside the demo's other vision settings; the others in the stage configs."""
    from medreco.demo.ablation import ABLATIONS
    from medreco.training.stage1 import build_retrieval_model

    demo = load_recipe("demo", "stage1")
    changed = {a.name: load_recipe("demo", a.stage, list(a.overrides)) for a in ABLATIONS}
    model, _ = build_retrieval_model(changed["shared-mlp"].model, demo.text_encoder)
    reference, _ = build_retrieval_model(demo.model, demo.text_encoder)
    assert model.config.vision_config.moe is False and reference.config.vision_config.moe is True
    assert model.config.vision_config.hidden_size == reference.config.vision_config.hidden_size
    assert changed["holistic-trained"].ranking_target == "study" and demo.ranking_target == "entity"
    assert changed["no-statement-alignment"].statement_alignment_weight == 0 < demo.statement_alignment_weight
    assert changed["triplet"].ranking_loss == "triplet" != demo.ranking_loss
    stage2 = load_recipe("demo", "stage2")
    assert changed["blind"].blind_images and not stage2.blind_images
    assert stage2.entity_tokens and not changed["no-entity-tokens"].entity_tokens
