"""Metric functions against hand-computed cases."""

import math

import numpy as np
import pytest

from medreco.evaluation import bleu, exact_match, mcnemar_test, meteor, ndcg_at_k, recall_at_k, rouge_l, wilson_interval
from medreco.evaluation.metrics import balanced_accuracy, clustered_mean, clustered_paired_test
from medreco.evaluation.retrieval import entity_level, summarize_retrieval


def test_recall_at_k():
    ranked = ["a", "b", "c"]
    assert recall_at_k(ranked, {"c"}, 1) == recall_at_k(ranked, {"c"}, 2) == 0.0
    assert recall_at_k(ranked, {"c"}, 3) == 1.0 and recall_at_k(ranked, ["a", "z"], 1) == 1.0
    with pytest.raises(ValueError):
        recall_at_k(ranked, set(), 1)


def test_ndcg_by_hand():
    # relevant at ranks 2 and 3: (1/log2 3 + 1/log2 4) / (1 + 1/log2 3)
    expected = (1 / math.log2(3) + 0.5) / (1 + 1 / math.log2(3))
    assert ndcg_at_k(["x", "r1", "r2"], {"r1", "r2"}, 3) == pytest.approx(expected)
    assert ndcg_at_k(["r1", "r2", "x"], {"r1", "r2"}, 3) == pytest.approx(1.0)
    assert ndcg_at_k(["x", "y"], {"r"}, 2) == 0.0


def test_wilson_interval_matches_the_textbook_value():
    low, high = wilson_interval(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-4) and high == pytest.approx(0.9433, abs=1e-4)
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(10, 10)[1] == pytest.approx(1.0)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    for trials in range(1, 200):  # every interval holds its estimate, also at 0 and 1 exactly
        for successes in {0, trials // 3, trials}:
            low, high = wilson_interval(successes, trials)
            assert low <= successes / trials <= high


def test_mcnemar_exact_binomial():
    a = [True, True, True, False, True]
    b = [False, False, False, False, True]
    assert mcnemar_test(a, b) == {"b": 3, "c": 0, "p_value": pytest.approx(0.25)}
    assert mcnemar_test([True] * 6, [False] * 6)["p_value"] == pytest.approx(2 / 64)
    assert mcnemar_test(a, a)["p_value"] == 1.0
    with pytest.raises(ValueError):
        mcnemar_test([True], [True, False])


def test_bleu_by_hand():
    assert bleu(["no change in the effusion"], ["no change in the effusion"]) == pytest.approx(1.0)
    # p1 = 5/6, p2 = (3+1)/(5+1), p3 = (1+1)/(4+1), p4 = (0+1)/(3+1), no brevity penalty
    expected = math.exp((math.log(5 / 6) + math.log(4 / 6) + math.log(2 / 5) + math.log(1 / 4)) / 4)
    assert bleu(["the cat sat on the mat"], ["the cat is on the mat"]) == pytest.approx(expected)
    assert bleu([""], ["anything"]) == 0.0


def test_rouge_l_and_meteor_by_hand():
    assert rouge_l(["a b c d"], ["a c d e"]) == pytest.approx(0.75)  # LCS 3 of 4 both ways
    assert rouge_l(["x"], ["y"]) == 0.0
    assert meteor(["a b c d"], ["a b c d"]) == pytest.approx(1 - 0.5 * (1 / 4) ** 3)
    assert meteor(["d c b a"], ["a b c d"]) < meteor(["a b c d"], ["a b c d"])  # fragmentation penalised
    assert exact_match(["Larger in Case B."], ["larger in case b"]) == 1.0


def test_retrieval_summary_groups_and_tests():
    def result(modality, entity, entity_hit, holistic_hit):
        systems = {
            name: {"recall@1": hit, "recall@3": 1.0, "recall@5": 1.0, "ndcg@5": hit}
            for name, hit in (("entity", entity_hit), ("holistic", holistic_hit))
        }
        return {
            "query": f"q{len(results)}",
            "modality": modality,
            "level": entity_level(entity),
            "systems": systems,
            "gallery_size": 4,
            "relevant": ["a"],
        }

    results = []
    for _ in range(6):
        results.append(result("chest_ct", "ct/abnormal/x@y", 1.0, 0.0))
    for _ in range(2):
        results.append(result("chest_xray", "cxr/anatomy/z", 0.0, 0.0))
    summary = summarize_retrieval(results)
    assert summary["chest_ct"]["abnormality"]["entity"]["recall@1"] == 1.0
    assert summary["all"]["all"]["queries"] == 8
    assert summary["all"]["all"]["entity"]["recall@1"] == pytest.approx(6 / 8)
    assert summary["chest_ct"]["all"]["mcnemar_recall@1"]["entity vs holistic"]["p_value"] == pytest.approx(2 / 64)
    assert summary["chest_xray"]["anatomy"]["holistic"]["recall@1_ci95"][0] == 0.0
    # one relevant study among four: a random ranking finds it first 1/4 of the time, in the top 3 3/4
    assert summary["all"]["all"]["chance"] == {"recall@1": 0.25, "recall@3": 0.75, "recall@5": 1.0}
    assert "clustered_recall@1" not in summary["all"]["all"]  # no patients given: no clustered statistics
    # all six chest CT queries from one patient: McNemar's p = 2/64 becomes no evidence at all
    patients = {r["query"]: ("P1" if r["modality"] == "chest_ct" else f"P{i}") for i, r in enumerate(results)}
    clustered = summarize_retrieval(results, patients)["chest_ct"]["all"]
    assert clustered["clustered_recall@1"]["entity vs holistic"]["p_value"] == 1.0
    assert clustered["entity"]["recall@1_ci95_clustered"] == [1.0, 1.0]


def test_chance_recall_by_hand():
    from medreco.evaluation.retrieval import chance_recall

    assert chance_recall(10, 2, 1) == pytest.approx(0.2)
    assert chance_recall(10, 2, 3) == pytest.approx(1 - (8 * 7 * 6) / (10 * 9 * 8))
    assert chance_recall(3, 1, 5) == 1.0


def test_entity_f1_counts_clinical_facts_by_hand():
    from medreco.evaluation import clinical_facts, entity_f1

    facts = clinical_facts("Moderate right pleural effusion. No consolidation.", "chest_xray", _decomposer())
    effusion = "cxr/abnormal/pleural-effusion@pleura"
    assert {(effusion, "status", "positive"), (effusion, "side", "right"), (effusion, "grade", 2)} <= facts
    assert ("cxr/abnormal/lung-consolidation@pulmonary-parenchyma", "status", "negative") in facts
    same = entity_f1(["Moderate right pleural effusion."], ["Moderate right pleural effusion."], ["chest_xray"])
    assert same == {"precision": 1.0, "recall": 1.0, "f1": 1.0}
    # the side is wrong: the side facts of the finding and of its anatomy (pleura) differ, the rest agree
    reference = clinical_facts("Moderate left pleural effusion.", "chest_xray", _decomposer())
    prediction = clinical_facts("Moderate right pleural effusion.", "chest_xray", _decomposer())
    shared = len(reference & prediction)
    expected = 2 * shared / (len(reference) + len(prediction))
    scores = entity_f1(["Moderate right pleural effusion."], ["Moderate left pleural effusion."], ["chest_xray"])
    assert scores["f1"] == pytest.approx(expected) and 0 < scores["f1"] < 1
    assert entity_f1([""], ["Moderate left pleural effusion."], ["chest_xray"])["f1"] == 0.0


def _decomposer():
    from medreco.data.reports.decomposition import RuleBasedDecomposer

    return RuleBasedDecomposer()


def test_bertscore_with_the_bundled_encoder():
    from medreco.evaluation import BERTScorer

    scorer = BERTScorer()
    identical = scorer.score(["small left pleural effusion"], ["small left pleural effusion"])
    assert identical["f1"] == pytest.approx(1.0, abs=1e-5)
    close = scorer.score(["small left pleural effusion"], ["small left effusion"])["f1"]
    far = scorer.score(["the heart size is normal"], ["small left effusion"])["f1"]
    assert far < close < 1.0
    assert scorer.score([""], ["small left effusion"])["f1"] == 0.0


def test_text_only_baseline_learns_the_language_prior():
    from medreco.evaluation import text_only_baseline

    train = [{"question": "Which case shows effusion?", "options": ["Both cases", "Neither case"], "answer": "A"}] * 5
    test = [
        {"question": "Which case shows effusion?", "options": ["Neither case", "Both cases"], "answer": "B"},
        {"question": "Which case shows effusion?", "options": ["Both cases", "Neither case"], "answer": "B"},
    ]
    assert text_only_baseline(train, test) == [True, False]


def test_report_metrics_are_scored_when_available_and_explained_when_not():
    from medreco.data.mining.similarity import SimilarityMetric
    from medreco.evaluation import available_report_metrics, mean_text_score

    metrics, unavailable = available_report_metrics()
    assert {m.name for m in metrics} | set(unavailable) == {"ratescore", "radgraph"}
    assert all("pip install" in reason or "could not load" in reason for reason in unavailable.values())

    class ExactMatch(SimilarityMetric):
        name = "exact"

        def score(self, a, b):
            return np.array([float(x.text == y.text) for x, y in zip(a, b, strict=True)])

    assert mean_text_score(ExactMatch(), ["no effusion", "new nodule", "stable"], ["no effusion", "x", "stable"]) == (
        pytest.approx(2 / 3)
    )
    assert mean_text_score(ExactMatch(), [], []) == 0.0


def test_balanced_accuracy_by_hand_and_a_majority_guess_gains_nothing():
    truth = ["worse", "worse", "worse", "stable", "better"]
    guess = ["worse", "worse", "stable", "stable", "worse"]
    assert balanced_accuracy(truth, guess) == pytest.approx((2 / 3 + 1 + 0) / 3)
    imbalanced = ["worse"] * 8 + ["stable", "better"]
    assert balanced_accuracy(imbalanced, ["worse"] * 10) == pytest.approx(1 / 3)  # plain accuracy: 0.8
    with pytest.raises(ValueError):
        balanced_accuracy(["a"], [])


def test_clustered_intervals_are_as_wide_as_the_patients_not_the_rows():
    # 10 patients with 100 questions each; a patient's answers are all right or all wrong
    values = [float(patient % 2) for patient in range(10) for _ in range(100)]
    clusters = [f"P{patient}" for patient in range(10) for _ in range(100)]
    summary = clustered_mean(values, clusters)
    low, high = summary["interval"]
    assert summary["mean"] == 0.5 and summary["clusters"] == 10
    wilson_low, wilson_high = wilson_interval(500, 1000)
    assert high - low > 0.3 and high - low > 4 * (wilson_high - wilson_low)  # rows as independent: far too narrow
    assert clustered_mean(values, clusters) == summary  # seeded: the same interval every time


def test_the_clustered_paired_test_sees_a_consistent_gain_and_discounts_one_patient():
    clusters = [f"P{patient}" for patient in range(30) for _ in range(10)]
    rng = np.random.default_rng(0)
    base = rng.random(300) < 0.4
    better = base | (rng.random(300) < 0.3)  # B gains on every patient
    consistent = clustered_paired_test(better, base, clusters)
    assert consistent["difference"] > 0 and consistent["interval"][0] > 0 and consistent["p_value"] < 0.01
    assert consistent["clusters"] == 30 and "clustered" in consistent["test"]
    one_patient = [True] * 10 + [False] * 290  # all of the gain from one patient's ten questions
    lucky = clustered_paired_test(one_patient, [False] * 300, clusters)
    assert lucky["p_value"] > 0.5 and mcnemar_test(one_patient, [False] * 300)["p_value"] < 0.01
    assert clustered_paired_test(base, base, clusters)["p_value"] == 1.0
