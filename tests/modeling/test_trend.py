"""TAMM's objectives: the trend loss of a hand-built case, the rationale loss, the modules a recipe
attaches, and the trend labels mined from adjacent reports, which must invert when the pair does."""

import math

import pytest
import torch

import medreco
from conftest import images_2d
from medreco.data.mining.longitudinal import StudyTrend, pair_trend, study_trends
from medreco.modeling import (
    PriorBatch,
    TextBatch,
    attach_trend_parts,
    rationale_consistency_loss,
    trend_classification_loss,
)


def test_trend_loss_of_a_hand_built_case():
    image = torch.tensor([[2.0, 0.0, 0.0]])
    text = torch.tensor([[0.0, 0.0, 0.0]])
    labels = torch.tensor([0])
    expected = (-math.log(math.exp(2) / (math.exp(2) + 2)) + math.log(3)) / 2
    assert trend_classification_loss(image, text, labels).item() == pytest.approx(expected, rel=1e-6)


def test_rationale_loss_is_zero_only_when_both_directions_are_predicted():
    tokens = torch.randn(2, 4, 8, generator=torch.Generator().manual_seed(0))
    other = tokens + 1.0
    assert rationale_consistency_loss(other, other, tokens, tokens).item() == 0
    assert rationale_consistency_loss(other, other, other, tokens).item() == pytest.approx(1.0)
    assert rationale_consistency_loss(tokens, other, tokens, other).item() == pytest.approx(2.0)


def test_a_pairs_trend_and_its_inverse():
    assert pair_trend(["worsening", "stable"]) == "worsening"
    assert pair_trend(["improving"]) == "improving"
    assert pair_trend(["stable", "stable"]) == "stable"
    assert pair_trend(["improving", "worsening"]) is None  # findings moving both ways settle nothing
    assert pair_trend([]) is None
    trend = StudyTrend("A", "B", "P", "worsening", ("x",), "Larger effusion.", "Small effusion.")
    backwards = trend.reversed()
    assert (backwards.prior, backwards.current, backwards.trend) == ("B", "A", "improving")
    assert (backwards.rationale, backwards.counter_rationale) == ("Small effusion.", "Larger effusion.")
    assert backwards.reversed() == trend


def test_study_trends_take_the_rationale_from_the_later_report_and_the_counter_from_the_earlier():
    effusion, nodule = "cxr/abnormal/pleural-effusion@pleura", "cxr/abnormal/solitary-pulmonary-nodule-and-mass@x"
    rows = [
        {"prior": "A1", "current": "A2", "patient_id": "A", "entity_id": effusion, "label": "increased"},
        {"prior": "A1", "current": "A2", "patient_id": "A", "entity_id": nodule, "label": "stable"},
        {"prior": "B1", "current": "B2", "patient_id": "B", "entity_id": effusion, "label": "decreased"},
        {"prior": "B1", "current": "B2", "patient_id": "B", "entity_id": nodule, "label": "new"},
        {"prior": "C1", "current": "C2", "patient_id": "C", "entity_id": effusion, "label": "unable to compare"},
    ]
    said = {
        "A1": {effusion: {"sentences": ["Small effusion."]}},
        "A2": {effusion: {"sentences": ["Larger effusion."]}, nodule: {"sentences": ["Stable nodule."]}},
    }
    trends = study_trends(rows, lambda study: said.get(study, {}))
    assert len(trends) == 1  # B's findings move both ways; C has no directional change
    (trend,) = trends
    assert (trend.prior, trend.current, trend.trend, trend.findings) == ("A1", "A2", "worsening", (effusion,))
    assert (trend.rationale, trend.counter_rationale) == ("Larger effusion.", "Small effusion.")


def tamm_model(trend_weight=1.0, rationale_weight=1.0):
    torch.manual_seed(0)
    model = medreco.create_model("retrieval", "tiny")
    return attach_trend_parts(model, trend_weight, rationale_weight).eval()


def texts(count, seed):
    generator = torch.Generator().manual_seed(seed)
    return TextBatch(torch.randint(1000, 2000, (count, 6), generator=generator), torch.ones(count, 6, dtype=torch.long))


def inputs(trend=(2, -1, 0, 1)):
    known = sum(t >= 0 for t in trend)
    priors = PriorBatch(
        images_2d(4),
        torch.tensor([t >= 0 for t in trend]),
        None,
        torch.tensor(trend),
        texts(known, 2),
        texts(known, 3),
        texts(known, 4),
    )
    return {
        "pixel_values": images_2d(4),
        "modality_ids": torch.zeros(4, dtype=torch.long),
        "reports": texts(4, 1),
        "priors": priors,
    }


def test_attached_modules_save_and_load_with_the_model(tmp_path):
    model = tamm_model()
    assert model.trend_head.out_features == 3 and model.rationale_predictor is not None
    model.save_pretrained(tmp_path)
    loaded = medreco.MedReCoModel.from_pretrained(tmp_path)
    assert loaded.config.trend_weight == 1 and loaded.config.rationale_weight == 1
    torch.testing.assert_close(loaded.trend_head.weight, model.trend_head.weight)
    again = attach_trend_parts(loaded, 1.0, 1.0)  # a model saved with them keeps its own
    torch.testing.assert_close(again.trend_head.weight, model.trend_head.weight)


def test_tamm_losses_join_the_alignment_loss_and_reach_their_modules():
    model = tamm_model()
    batch = inputs()
    output = model(**batch)
    plain = {k: v for k, v in batch.items() if k != "priors"}
    with torch.no_grad():
        without = model(**plain).loss
    assert output.temporal_loss > 0
    torch.testing.assert_close(output.loss.detach(), without + output.temporal_loss.detach())
    output.loss.backward()
    assert model.trend_head.weight.grad.abs().sum() > 0
    assert model.rationale_predictor.modulation.weight.grad.abs().sum() > 0
    none_known = model(**inputs(trend=(-1, -1, -1, -1)))
    assert none_known.temporal_loss == 0


def test_tamm_losses_need_their_inputs():
    model = tamm_model()
    batch = inputs()
    with pytest.raises(ValueError, match="trend label"):
        model(**{**batch, "priors": PriorBatch(images_2d(4), torch.ones(4, dtype=torch.bool))})
    prior = batch["priors"]
    without_reports = PriorBatch(
        prior.pixel_values, prior.has_prior, None, prior.trend, None, prior.rationale, prior.counter_rationale
    )
    with pytest.raises(ValueError, match="priors' reports"):
        model(**{**batch, "priors": without_reports})
