"""Stage 1 with temporal pretraining (BioViL-T's alignment on the prior-fused tokens, TILA's
change-aware loss) on a toy whose current reports say only the change: the fused feature learns
to pick its own report where the static one cannot, the zero-shot protocol reads the change from
text prompts, and a progression model trained on top keeps the pretrained fusion."""

import json

import pytest
import torch
from transformers import AutoModel

import medreco
from medreco.cli import main
from medreco.data.mining import MinedData, progression_pairs
from medreco.evaluation import PROTOCOLS, evaluate_progression
from medreco.inference import ZeroShotProgressionPredictor
from medreco.inference.progression import encode_studies
from medreco.modeling import PROGRESSION_CLASSES
from medreco.training import RecipeError, load_recipe
from medreco.training.progression import ProgressionTrainer
from medreco.training.stage1 import Stage1Trainer
from toy_mined import CHANGE_WORDING, write_ms_cxr_t_csv, write_toy_longitudinal

RECIPE = {"chest_xray": {"size": [1, 40, 40]}}


def toy_settings(mined, out, *extra: str) -> list[str]:
    """The recipe settings every run on the toy shares, then `extra`."""
    common = [f"data.mined_dir={mined}", f"data.recipes={json.dumps(RECIPE)}", f"run.output_dir={out}"]
    return [*common, "run.progress=false", "run.report_to=[tensorboard]", *extra]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    root = tmp_path_factory.mktemp("temporal-stage1")
    mined = write_toy_longitudinal(root, patients=90, change_reports=True)
    sets = toy_settings(
        mined,
        root / "stage1",
        "freeze_text_encoder=true",
        "alignment.epochs=100",
        "alignment.learning_rate=3e-3",
        "ranking.epochs=0",  # the toy has no triplets; ranking does not read priors
        "num_temporal_layers=1",
        "temporal_alignment_weight=1",
        "change_aware_weight=1",
    )
    torch.manual_seed(0)
    summaries = Stage1Trainer(load_recipe("tiny", "stage1", sets)).train()
    return root, mined, root / "stage1" / "final", summaries


def test_training_lowers_the_loss_and_saves_a_temporal_retrieval_model(pretrained):
    _, _, folder, summaries = pretrained
    summary = summaries["stage1/alignment"]
    assert summary["last_loss"] < 0.85 * summary["first_loss"], summary
    model = AutoModel.from_pretrained(folder)
    assert isinstance(model, medreco.MedReCoModel) and model.vision_model.temporal is not None
    assert model.config.temporal_alignment_weight == 1 and model.config.change_aware_weight == 1
    assert model.change_logit_bias.item() != pytest.approx(model.config.change_logit_bias_init_value)


def test_the_fused_feature_finds_its_own_report_where_the_static_one_cannot(pretrained):
    _, mined, folder, _ = pretrained
    encoder = ZeroShotProgressionPredictor.from_pretrained(folder).encoder
    model, data = encoder.model.eval(), MinedData(mined)
    pairs = progression_pairs(data.rows("longitudinal", "test"))
    tokens = encode_studies(encoder, {s: data.studies[s] for p in pairs for s in (p.prior, p.current)})
    labels = torch.tensor([PROGRESSION_CLASSES.index(p.progression) for p in pairs])
    with torch.no_grad():
        reports = model.encode_entity_texts([f"Pleural effusion. {w}" for w in CHANGE_WORDING], encoder.tokenizer)
        current = torch.stack([tokens.tokens[p.current] for p in pairs])
        prior = torch.stack([tokens.tokens[p.prior] for p in pairs])
        ids = torch.zeros(len(pairs), dtype=torch.long)
        fused = model.condition(model.temporal_tokens(current, prior, ids), ids).features
        static = model.condition(current, ids).features
    fused_right = ((fused @ reports.T).argmax(-1) == labels).float().mean().item()
    static_right = ((static @ reports.T).argmax(-1) == labels).float().mean().item()
    assert fused_right > 0.7 and static_right < 0.5, (fused_right, static_right)


def test_zero_shot_protocol_reads_the_change_from_text_prompts(pretrained, tmp_path, capsys):
    _, mined, folder, _ = pretrained
    report = tmp_path / "zero-shot.json"
    flags = ["--protocol", "temporal", "--zero-shot", "--model", str(folder), "--mined", str(mined)]
    code = main(["evaluate", *flags, "--out", str(report), "--quiet"])
    printed = capsys.readouterr().out
    assert code == 0 and "consistency" in printed and "majority" in printed
    scored = json.loads(report.read_text())["all"]
    assert set(PROTOCOLS) <= set(scored["model"])
    assert scored["model"]["standard"]["value"] > 0.6, scored["model"]["standard"]
    assert scored["model"]["standard"]["minus_baseline"]["interval"][0] > 0  # above the majority class


def test_zero_shot_needs_the_fusion(pretrained, tmp_path, capsys):
    _, mined, _, _ = pretrained
    static = tmp_path / "static"
    medreco.create_model("retrieval", "tiny", text_model_name_or_path=medreco.BUNDLED_TEXT_ENCODER).save_pretrained(
        static
    )
    code = main(["evaluate", "--protocol", "temporal", "--zero-shot", "--model", str(static), "--mined", str(mined)])
    assert code == 2 and "no prior-image fusion" in capsys.readouterr().err
    code = main(["evaluate", "--zero-shot", "--model", str(static), "--mined", str(mined)])
    assert code == 2 and "--protocol temporal" in capsys.readouterr().err


def test_a_progression_model_keeps_the_pretrained_fusion(pretrained, tmp_path):
    _, mined, folder, _ = pretrained
    sets = toy_settings(
        mined,
        tmp_path / "progression",
        f"retrieval_model={folder}",
        "optimization.max_steps=1",
        "optimization.learning_rate=0",
        "num_temporal_layers=null",
    )
    trainer = ProgressionTrainer(load_recipe("tiny", "progression", sets))
    stage1 = medreco.MedReCoModel.from_pretrained(folder).state_dict()
    fused = {n: v for n, v in trainer.model.state_dict().items() if n.startswith("vision_model.temporal.")}
    assert fused and all(torch.equal(v, stage1[n]) for n, v in fused.items())
    report = evaluate_progression(ZeroShotProgressionPredictor(trainer._placed_encoder()), MinedData(mined), "test")
    assert report["all"]["model"]["pairs"] == 30
    with pytest.raises(RecipeError, match="has 1 prior-image fusion blocks"):
        ProgressionTrainer(load_recipe("tiny", "progression", [*sets[:-1], "num_temporal_layers=2"]))


def test_temporal_weights_without_fusion_are_refused(pretrained, tmp_path):
    _, mined, _, _ = pretrained
    sets = [f"data.mined_dir={mined}", f"run.output_dir={tmp_path}", "temporal_alignment_weight=1"]
    with pytest.raises(RecipeError, match="num_temporal_layers"):
        Stage1Trainer(load_recipe("tiny", "stage1", sets))
    with pytest.raises(RecipeError, match="0 or more"):
        load_recipe("tiny", "stage1", [*sets, "change_aware_weight=-1"])


def test_ms_cxr_t_reads_a_temporal_stage1_zero_shot(pretrained, tmp_path, capsys):
    """MS-CXR-T's layout on a stage-1 model with fusion and no head: the zero-shot protocol, with
    the same scores as the mined folder's pairs."""
    from medreco.evaluation import run_public_set

    root, mined, folder, _ = pretrained
    data = MinedData(mined)
    csv = write_ms_cxr_t_csv(data, tmp_path)
    public = run_public_set("ms-cxr-t", folder, csv, root / "images", progress=False)
    assert public["reading"] == "zero-shot"
    mined_report = evaluate_progression(ZeroShotProgressionPredictor.from_pretrained(folder), data, "test")
    for protocol in PROTOCOLS:
        assert public["all"]["model"][protocol]["value"] == pytest.approx(
            mined_report["all"]["model"][protocol]["value"]
        )
    flags = ["--model", str(folder), "--data", str(csv), "--images", str(root / "images"), "--quiet"]
    assert main(["evaluate-public", "ms-cxr-t", *flags]) == 0
    printed = capsys.readouterr().out
    assert "ms-cxr-t (zero-shot" in printed and "consistency" in printed and "majority" in printed


def test_alignment_batches_read_only_the_priors_that_exist(pretrained, tmp_path):
    _, mined, _, _ = pretrained
    sets = toy_settings(
        mined, tmp_path, "freeze_text_encoder=true", "num_temporal_layers=1", "temporal_alignment_weight=1"
    )
    trainer = Stage1Trainer(load_recipe("tiny", "stage1", sets))
    priors = trainer.prior_table()
    current = sorted(priors)[0]
    first_study = priors[current][0]  # a patient's first study has no prior of its own
    pixel_values, _ = trainer.store.batch([current, first_study])
    batch = trainer.prior_batch([current, first_study], priors, pixel_values)
    assert batch.has_prior.tolist() == [True, False] and batch.changed.tolist() == [priors[current][1], False]
    assert batch.pixel_values.shape == pixel_values.shape
    assert batch.pixel_values[0].abs().sum() > 0 and not batch.pixel_values[1].any()
