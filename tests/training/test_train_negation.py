"""Stage 1 with CLIP-clinic's objectives on the toy: the hard negatives and clinical labels each batch
carries, training, and the CXR-Align-style protocol (`medreco evaluate --protocol negation`)."""

import json

import pytest
import torch
from transformers import AutoModel

from medreco.cli import main
from medreco.evaluation import evaluate_negation
from medreco.inference import RetrievalEncoder
from medreco.training.stage1 import Stage1Trainer
from toy_mined import CARDIO, EFFUSION
from toy_training import stage1_config

CLINIC = ("negation_hard_negatives=true", "text_soft_label_threshold=0.9", "clinical_soft_label_threshold=0.8")


@pytest.fixture(scope="module")
def trained(toy, tmp_path_factory):
    root = tmp_path_factory.mktemp("clinic")
    settings = (
        "freeze_text_encoder=true",
        "statement_alignment_weight=1",
        "alignment.max_steps=150",
        "ranking.epochs=0",
    )
    runs = {}
    for name, extra in (("clinic", CLINIC), ("base", ())):
        torch.manual_seed(0)
        trainer = Stage1Trainer(stage1_config(toy, root / name, *settings, *extra))
        runs[name] = (trainer, trainer.train(), root / name / "final")
    return runs


def test_each_batch_carries_a_hard_negative_per_study_and_the_clinical_labels(toy, tmp_path):
    trainer = Stage1Trainer(
        stage1_config(toy, tmp_path, "freeze_text_encoder=true", "statement_alignment_weight=1", *CLINIC)
    )
    phase = trainer.alignment_phase()
    studies = phase.items[:12]
    batch = phase.collate(studies)
    supervision, statements = batch["report_supervision"], batch["statements"]
    records = [trainer.data.studies[s] for s in studies]
    # every toy study has a hard negative: a finding denied, or (normal) another study's one-finding report
    assert supervision.hard_negatives.pooled.shape[0] == len(studies)
    assert supervision.negative_rows.tolist() == list(range(len(studies)))  # each made from its own study
    assert supervision.clinical_labels.shape == (2 * len(studies), 3)  # two entities and "no finding"
    for row, record in enumerate(records):
        labels = supervision.clinical_labels[row]
        positives = [e for e, st in record.statements.items() if st["status"] == "positive"]
        assert labels[-1] == (not positives)
        negative = supervision.clinical_labels[len(studies) + row]
        assert not torch.equal(labels, negative)  # the hard negative says something else
    # a statement's hard negative is its finding reversed: a different group, shared with real statements
    own = statements.groups.tolist()
    flipped = statements.negative_groups.tolist()
    assert len(flipped) == len(own) and all(a != b for a, b in zip(own, flipped))
    assert set(flipped) <= set(own) | set(trainer.texts.statement_table(phase.items)["group"].values())
    texts = trainer.texts.report_table(phase.items, clinical=True)["negatives"]
    for record in records:
        said = {e: st["status"] for e, st in record.statements.items()}
        if said[EFFUSION] == "positive" or said[CARDIO] == "positive":
            assert texts[record.study_id] != record.report and (
                "No pleural effusion." in texts[record.study_id] or "Normal heart size." in texts[record.study_id]
            )


def test_training_with_the_clinic_objectives_lowers_the_loss_and_saves_them(trained):
    _, summaries, folder = trained["clinic"]
    summary = summaries["stage1/alignment"]
    assert summary["last_loss"] < 0.7 * summary["first_loss"], summary
    config = AutoModel.from_pretrained(folder).config
    assert config.text_soft_label_threshold == 0.9 and config.clinical_soft_label_threshold == 0.8


def test_the_trained_image_features_prefer_the_report_to_its_negated_twin(trained):
    trainer, _, folder = trained["clinic"]
    result = evaluate_negation(RetrievalEncoder.from_pretrained(folder), trainer.data, "test")
    assert result["cases"] >= 5 and set(result["by_modality"]) == {"chest_xray"}
    assert result["negated"]["accuracy"] >= 0.9 and result["omitted"]["accuracy"] >= 0.9
    low, high = result["negated"]["interval"]
    assert low <= result["negated"]["accuracy"] <= high
    assert -1 <= result["text_cosine"]["shared"] < result["text_cosine"]["backbone"] <= 1
    # the image conditioned on the finding prefers the report's sentence on it to the denial
    assert len(result["statement"]["correct"]) == result["cases"] and result["statement"]["accuracy"] >= 0.9


def test_cli_negation_protocol_with_a_baseline(trained, toy, tmp_path, capsys):
    _, _, clinic = trained["clinic"]
    _, _, base = trained["base"]
    out = tmp_path / "negation.json"
    args = ["evaluate", "--model", str(clinic), "--baseline", str(base), "--mined", str(toy), "--protocol", "negation"]
    assert main([*args, "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "negated" in printed and "statement" in printed and "model - baseline" in printed
    report = json.loads(out.read_text())
    assert report["model"]["case_ids"] == report["baseline"]["case_ids"]
    difference = report["difference"]["negated"]["difference"]
    assert difference == pytest.approx(
        report["model"]["negated"]["accuracy"] - report["baseline"]["negated"]["accuracy"]
    )
    assert main([*args, "--probe"]) == 2
    assert "--probe belongs to --protocol retrieval" in capsys.readouterr().err


def test_the_published_cxr_align_file_reads_through_the_same_code(trained, toy, tmp_path, capsys):
    trainer, _, clinic = trained["clinic"]
    data = trainer.data
    cases = {}
    for study_id in data.study_ids("test"):
        study = data.studies[study_id]
        if study.status(EFFUSION) == "positive":
            rest = study.report.replace("Pleural effusion.", "").strip()
            cases[study_id] = {"chosen": "Pleural Effusion", "report": study.report,
                               "negation": f"No pleural effusion. {rest}", "omitted": rest}  # fmt: skip
    (tmp_path / "cxr-align.json").write_text(json.dumps({"mimic": cases}))
    images = toy.parent / "images"  # the toy's PNGs, named by study id as MIMIC-CXR-JPG names them by DICOM id
    out = tmp_path / "result.json"
    args = ["evaluate-public", "cxr-align", "--model", str(clinic), "--data", str(tmp_path / "cxr-align.json")]
    assert main([*args, "--images", str(images), "--out", str(out), "--quiet"]) == 0
    result = json.loads(out.read_text())
    assert result["items"] == result["cases"] == len(cases) > 0
    assert result["negated"]["accuracy"] >= 0.9
    assert "negated" in capsys.readouterr().out
    (tmp_path / "missing").mkdir()
    assert main([*args, "--images", str(tmp_path / "missing"), "--quiet"]) == 2
    assert "no image" in capsys.readouterr().err
