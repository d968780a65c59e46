"""`medreco train progression` and `medreco evaluate --protocol temporal` on a toy whose change is
visible only in the pair: the prior-fused model learns it, the same model without the prior does
not, and TILA's four protocols are reported beside the majority class."""

import json

import pytest
import torch
from transformers import AutoModel

import medreco
from medreco.cli import main
from medreco.data.mining import MinedData
from medreco.evaluation import PROTOCOLS, evaluate_progression
from medreco.inference import ProgressionPredictor
from medreco.training import load_recipe
from medreco.training.progression import ProgressionTrainer
from toy_mined import write_ms_cxr_t_csv, write_toy_longitudinal

RECIPE = {"chest_xray": {"size": [1, 40, 40]}}


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("longitudinal")
    mined = write_toy_longitudinal(root, patients=90)
    stage1 = root / "stage1"
    torch.manual_seed(0)  # the untrained encoder's weights, whatever ran before in this process
    medreco.create_model("retrieval", "tiny", text_model_name_or_path=medreco.BUNDLED_TEXT_ENCODER).save_pretrained(
        stage1
    )
    return root, mined, stage1


def settings(toy, out, *extra):
    _, mined, stage1 = toy
    return [
        f"retrieval_model={stage1}",
        f"data.mined_dir={mined}",
        f"data.recipes={json.dumps(RECIPE)}",
        f"run.output_dir={out}",
        "run.progress=false",
        "run.report_to=[tensorboard]",
        "optimization.epochs=100",
        "optimization.learning_rate=3e-3",
        "optimization.batch_size_2d=16",
        *extra,
    ]


@pytest.fixture(scope="module")
def trained(toy, tmp_path_factory):
    """The fused model and the static baseline, trained once through the recipe loader."""
    runs = {}
    for name, extra in (("fused", ()), ("static", ("use_prior=false",))):
        out = tmp_path_factory.mktemp(name)
        torch.manual_seed(0)
        summaries = ProgressionTrainer(load_recipe("tiny", "progression", settings(toy, out, *extra))).train()
        runs[name] = (out / "final", summaries)
    return runs


def test_training_lowers_the_loss_and_saves_a_retrieval_model_with_a_head(trained):
    folder, summaries = trained["fused"]
    summary = summaries["progression"]
    assert summary["last_loss"] < 0.7 * summary["first_loss"], summary
    model = AutoModel.from_pretrained(folder)
    assert isinstance(model, medreco.MedReCoModel) and model.progression is not None
    assert model.config.vision_config.num_temporal_layers == 1
    assert json.loads((folder / "training_config.json").read_text())["use_prior"] is True
    assert (folder / "README.md").is_file() and (folder / "processor_config.json").is_file()


def test_stage1_weights_stay_as_they_were(trained, toy):
    _, _, stage1 = toy
    before = medreco.MedReCoModel.from_pretrained(stage1).state_dict()
    after = AutoModel.from_pretrained(trained["fused"][0]).state_dict()
    assert set(before) < set(after)
    for name, value in before.items():
        torch.testing.assert_close(after[name], value, msg=name)


def test_the_prior_fused_model_beats_the_static_one_and_the_majority(trained, toy):
    _, mined, _ = toy
    fused = ProgressionPredictor.from_pretrained(trained["fused"][0])
    static = ProgressionPredictor.from_pretrained(trained["static"][0])
    assert fused.use_prior and not static.use_prior  # each reads as it was trained
    report = evaluate_progression(fused, MinedData(mined), "test", baseline=static)["all"]
    assert set(PROTOCOLS) <= set(report["model"])
    assert report["model"]["pairs"] == 30 and report["model"]["patients"] == 30
    standard = report["model"]["standard"]
    assert standard["value"] > 0.6, standard
    assert report["model_minus_baseline"]["standard"]["interval"][0] > 0, report["model_minus_baseline"]["standard"]
    assert report["majority"]["standard"]["value"] == pytest.approx(1 / 3)
    assert report["model"]["standard"]["minus_baseline"]["interval"][0] > 0  # above the majority class
    assert set(report["model"]["by_group"]) == {"chest_xray"}


def test_tila_fine_tuning_runs_both_phases(toy, tmp_path):
    out = tmp_path / "tila"
    summaries = ProgressionTrainer(
        load_recipe(
            "tiny",
            "progression",
            settings(toy, out, "loss=bidirectional", "temporal_consistency_weight=50", "consistency.epochs=5"),
        )
    ).train()
    assert set(summaries) == {"progression", "consistency"}
    assert (out / "final" / "model.safetensors").is_file()


def test_command_line_trains_and_prints_the_four_protocols(toy, trained, tmp_path, capsys):
    _, mined, stage1 = toy
    out = tmp_path / "cli"
    sets = [f"retrieval_model={stage1}", f"data.recipes={json.dumps(RECIPE)}", "run.progress=false"]
    sets = [
        item
        for setting in (*sets, "run.report_to=[tensorboard]", "optimization.epochs=2")
        for item in ("--set", setting)
    ]
    assert main(["train", "progression", "--config", "tiny", "--mined", str(mined), "--out", str(out), *sets]) == 0
    capsys.readouterr()
    report = tmp_path / "temporal.json"
    code = main(
        [
            "evaluate",
            "--protocol",
            "temporal",
            "--model",
            str(trained["fused"][0]),
            "--baseline",
            str(trained["static"][0]),
            "--mined",
            str(mined),
            "--out",
            str(report),
            "--quiet",
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0
    assert "consistency" in printed and "model - baseline" in printed and "majority" in printed
    assert json.loads(report.read_text())["all"]["model"]["standard"]["value"] > 0.6


def test_command_line_refuses_a_model_without_a_head_and_mixed_options(toy, capsys):
    _, mined, stage1 = toy
    assert main(["evaluate", "--protocol", "temporal", "--model", str(stage1), "--mined", str(mined)]) == 2
    assert "no progression head" in capsys.readouterr().err
    assert main(["evaluate", "--model", str(stage1), "--mined", str(mined), "--baseline", str(stage1)]) == 2
    assert "--protocol temporal" in capsys.readouterr().err


def test_ms_cxr_t_layout_scores_the_same_pairs_as_the_mined_folder(trained, toy, tmp_path):
    """The test pairs written as an MS-CXR-T CSV (images found by DICOM id under a root) go through
    the same code: the same four protocols, per finding."""
    from medreco.evaluation import run_public_set

    root, mined, _ = toy
    data = MinedData(mined)
    csv = write_ms_cxr_t_csv(data, tmp_path)
    public = run_public_set("ms-cxr-t", trained["fused"][0], csv, root / "images", progress=False)
    assert public["findings"]["pleural_effusion"] == "cxr/abnormal/pleural-effusion@pleura"
    assert public["reading"] == "fine-tuned"
    mined_report = evaluate_progression(ProgressionPredictor.from_pretrained(trained["fused"][0]), data, "test")
    for protocol in PROTOCOLS:
        assert public["all"]["model"][protocol]["value"] == pytest.approx(
            mined_report["all"]["model"][protocol]["value"]
        )
    assert set(public["all"]["model"]["by_group"]) == {"pleural_effusion"}


def test_change_probe_reads_the_change_from_the_pair_not_the_current_study(trained, toy, tmp_path, capsys):
    """The frozen features' linear read-out: on the toy the change is in the pair only, so the probe
    of (current - prior, current) is above the probe of the current study alone."""
    from medreco.evaluation import change_probe

    _, mined, _ = toy
    encoder = ProgressionPredictor.from_pretrained(trained["fused"][0]).encoder
    result = change_probe(encoder, MinedData(mined), "test")
    assert result["train_pairs"] == 60 and result["pair"]["pairs"] == 30
    assert set(PROTOCOLS) <= set(result["pair"]) and set(PROTOCOLS) <= set(result["current_only"])
    assert result["pair"]["standard"]["value"] > result["current_only"]["standard"]["value"] + 0.2, result
    out = tmp_path / "probe.json"
    flags = ["--protocol", "temporal", "--probe", "--model", str(trained["fused"][0]), "--mined", str(mined)]
    assert main(["evaluate", *flags, "--out", str(out), "--quiet"]) == 0
    assert "change probe (pair)" in capsys.readouterr().out
    assert json.loads(out.read_text())["change_probe"]["pair"]["standard"] == result["pair"]["standard"]
