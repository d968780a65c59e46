"""The package's own metrics as local `evaluate` modules: they load offline and compute what the
package's functions compute."""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local module needs no Hub, and must not try it
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_EVALUATE_OFFLINE", "1")

evaluate = pytest.importorskip("evaluate")

from medreco.evaluation.hf_metrics import METRICS, metric_path  # noqa: E402
from medreco.evaluation.metrics import mean_ranking_scores  # noqa: E402
from medreco.evaluation.text import entity_f1  # noqa: E402
from medreco.evaluation.vqa import accuracy_summary  # noqa: E402


def _load(name, tmp_path):
    return evaluate.load(metric_path(name), cache_dir=str(tmp_path))


def test_every_metric_is_a_folder_with_its_module():
    for name in METRICS:
        folder = metric_path(name)
        assert os.path.isfile(os.path.join(folder, f"{name}.py"))
    with pytest.raises(ValueError, match="closed_vqa_accuracy"):
        metric_path("bleu")


def test_closed_vqa_accuracy_is_the_packages(tmp_path):
    predicted, right = ["A", "B", "B", "C", "A"], ["A", "B", "C", "C", "B"]
    result = _load("closed_vqa_accuracy", tmp_path).compute(predictions=predicted, references=right)
    assert result == accuracy_summary([p == r for p, r in zip(predicted, right)])
    assert result["accuracy"] == pytest.approx(3 / 5) and result["questions"] == 5


def test_ranking_at_k_is_the_packages(tmp_path):
    rankings = [["x", "r1", "r2", "y"], ["a", "b", "c"], ["q", "w", "e", "t", "z"]]
    relevant = [["r1", "r2"], ["a"], ["z"]]
    metric = _load("ranking_at_k", tmp_path)
    assert metric.compute(predictions=rankings, references=relevant) == mean_ranking_scores(rankings, relevant)
    result = metric.compute(predictions=rankings, references=relevant, ks=[1, 5])
    assert result == mean_ranking_scores(rankings, relevant, (1, 5))
    assert result["recall@1"] == pytest.approx(1 / 3) and result["recall@5"] == 1.0


def test_entity_f1_is_the_packages(tmp_path):
    answers = ["Moderate right pleural effusion.", "No consolidation.", ""]
    references = ["Moderate left pleural effusion.", "No consolidation.", "Small pneumothorax."]
    modalities = ["chest_xray"] * 3
    result = _load("entity_f1", tmp_path).compute(predictions=answers, references=references, modalities=modalities)
    assert result == entity_f1(answers, references, modalities)
    assert 0 < result["f1"] < 1
