"""Stage 1 with TAMM's objectives on the toy longitudinal pairs (an effusion that grows, stays or
shrinks): the loss falls, the trend classifier reads the pair's trend from the image features
better than the majority trend, and `medreco evaluate --protocol trend` scores it with TILA's
four protocols and temporal sentence similarity."""

import json

import pytest
import torch

import medreco
from medreco.cli import main
from medreco.evaluation import evaluate_trends, trend_pairs
from medreco.inference import TrendPredictor
from medreco.training import load_recipe
from medreco.training.stage1 import Stage1Trainer
from toy_mined import write_toy_longitudinal

RECIPE = {"chest_xray": {"size": [1, 40, 40]}}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("tamm")
    mined = write_toy_longitudinal(root, patients=90)
    settings = [
        f"data.mined_dir={mined}",
        f"data.recipes={json.dumps(RECIPE)}",
        f"run.output_dir={root / 'stage1'}",
        "run.progress=false",
        "run.report_to=[tensorboard]",
        "freeze_text_encoder=true",
        "alignment.epochs=40",
        "alignment.learning_rate=3e-3",
        "ranking.epochs=0",
        "trend_weight=1",
        "rationale_weight=1",
    ]
    torch.manual_seed(0)
    trainer = Stage1Trainer(load_recipe("tiny", "stage1", settings))
    return mined, trainer, trainer.train(), root / "stage1" / "final"


def test_batches_carry_each_pairs_trend_and_rationales(trained):
    _, trainer, _, _ = trained
    phase = trainer.alignment_phase()
    batch = phase.collate(phase.items[:10])
    priors = batch["priors"]
    known = int((priors.trend >= 0).sum())
    assert 0 < known < 10  # the currents have a trend, their priors (first studies) none
    assert priors.prior_reports.pooled.shape[0] == priors.rationale.pooled.shape[0] == known
    for study, trend in zip(phase.items[:10], priors.trend.tolist(), strict=True):
        assert (trend >= 0) == study.endswith("-current")


def test_training_lowers_the_loss_and_the_trend_head_beats_the_majority(trained):
    _, trainer, summaries, folder = trained
    summary = summaries["stage1/alignment"]
    assert summary["last_loss"] < 0.8 * summary["first_loss"], summary
    report = evaluate_trends(TrendPredictor.from_pretrained(folder), trainer.data, "test")
    scored = report["all"]
    assert scored["model"]["pairs"] == len(trend_pairs(trainer.data, "test")) == 30
    assert scored["model"]["standard"]["value"] > scored["majority"]["standard"]["value"] + 0.2
    # read backwards (the negated difference) the head is less sure, still above the majority
    assert scored["model"]["reversed"]["value"] > scored["majority"]["reversed"]["value"] + 0.1


def test_cli_trend_protocol(trained, tmp_path, capsys):
    mined, _, _, folder = trained
    out = tmp_path / "trend.json"
    args = ["evaluate", "--mined", str(mined), "--protocol", "trend", "--quiet"]
    assert main([*args, "--model", str(folder), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "standard" in printed and "temporal sentence similarity" in printed
    report = json.loads(out.read_text())
    similarity = report["sentence_similarity"]
    assert similarity["pairs"] == 2 * similarity["paraphrases"] > 0  # as many contradictions as paraphrases
    from medreco.data.mining import MinedData
    from medreco.evaluation import temporal_sentence_similarity

    # the command reports what the Python function computes on the same split
    assert similarity == temporal_sentence_similarity(TrendPredictor.from_pretrained(folder).encoder, MinedData(mined))
    static = tmp_path / "static"
    medreco.create_model("retrieval", "tiny", text_model_name_or_path=medreco.BUNDLED_TEXT_ENCODER).save_pretrained(
        static
    )
    assert main([*args, "--model", str(static)]) == 2
    assert "no trend classifier" in capsys.readouterr().err
