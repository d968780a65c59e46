"""Metric functions against hand-computed cases, the text metrics against the standard packages they
call, and the statistics against SciPy where it is installed."""

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from medreco.evaluation import (
    bleu,
    exact_match,
    mcnemar_test,
    meteor,
    meteor_no_synonyms,
    ndcg_at_k,
    recall_at_k,
    rescore_open_ended,
    rouge_l,
    text_scores,
    wilson_interval,
)
from medreco.evaluation.metrics import (
    _normal_quantile,
    balanced_accuracy,
    clustered_mean,
    clustered_paired_test,
    mean_ranking_scores,
)
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


def test_the_statistics_agree_with_scipy():
    stats = pytest.importorskip("scipy.stats")
    for b, c in [(3, 0), (6, 0), (5, 5), (7, 2), (1, 12), (40, 25), (0, 1)]:
        outcomes_a = [True] * b + [False] * c + [True] * 4  # 4 concordant pairs, which McNemar ignores
        outcomes_b = [False] * b + [True] * c + [True] * 4
        expected = stats.binomtest(b, b + c, 0.5).pvalue
        assert mcnemar_test(outcomes_a, outcomes_b)["p_value"] == pytest.approx(expected, rel=1e-12)
    for successes, trials in [(8, 10), (0, 10), (10, 10), (1, 3), (30, 30), (57, 120), (999, 1000)]:
        for confidence in (0.9, 0.95, 0.99):
            interval = stats.binomtest(successes, trials).proportion_ci(confidence_level=confidence, method="wilson")
            low, high = wilson_interval(successes, trials, confidence)
            assert low == pytest.approx(interval.low, abs=1e-8) and high == pytest.approx(interval.high, abs=1e-8)
    for p in (1e-9, 1e-4, 0.01, 0.02425, 0.025, 0.3, 0.5, 0.8, 0.975, 0.99, 1 - 1e-6):
        assert _normal_quantile(p) == pytest.approx(stats.norm.ppf(p), rel=1e-8, abs=1e-9)


# a fixed corpus of comparative answers (mixed case and punctuation, as generated answers and references are)
ANSWERS = [
    "The effusion is larger in Case B.",
    "no change in the right lower lobe nodule",
    "Case A shows a small left pleural effusion; case B shows none.",
    "the heart is enlarged in both cases",
    "Neither case shows consolidation.",
]
REFERENCES = [
    "The pleural effusion is larger in Case B than in Case A.",
    "The right lower lobe nodule is unchanged.",
    "Case A shows a small left pleural effusion, Case B does not.",
    "The heart size is normal in both cases.",
    "Neither case shows consolidation.",
]


def test_bleu_is_sacrebleus_corpus_bleu_with_its_signature():
    sacrebleu = pytest.importorskip("sacrebleu")
    scored = bleu(ANSWERS, REFERENCES)
    expected = sacrebleu.corpus_bleu(ANSWERS, [REFERENCES], lowercase=True)
    assert scored["bleu"] == pytest.approx(expected.score / 100, rel=1e-12) and 0 < scored["bleu"] < 1
    assert scored["bleu_signature"] == f"nrefs:1|case:lc|eff:no|tok:13a|smooth:exp|version:{sacrebleu.__version__}"
    # by hand: p1 = 5/6, p2 = 3/5, p3 = 1/4, no 4-gram matches (exp smoothing: 1/(2*3)), equal lengths
    single = bleu(["the cat sat on the mat"], ["The cat is on the mat"])["bleu"]
    assert single == pytest.approx((5 / 6 * 3 / 5 * 1 / 4 * 1 / 6) ** 0.25)
    # every n-gram matches once case is folded; 5 words for the reference's 6 tokens (the full stop is one)
    assert bleu(["no change in the effusion"], ["No change in the effusion."])["bleu"] == pytest.approx(
        math.exp(1 - 6 / 5)
    )
    assert bleu([""], ["anything at all here"])["bleu"] == 0.0
    assert bleu([], []) == {"bleu": 0.0, "bleu_signature": scored["bleu_signature"]}


def test_rouge_l_is_rouge_scores_f1_mean():
    rouge_scorer = pytest.importorskip("rouge_score.rouge_scorer")
    # LCS "the effusion is larger": precision 4/4, recall 4/7, F1 = 2PR/(P+R) = 8/11
    assert rouge_l(["the effusion is larger"], ["The left effusion is much larger now."]) == pytest.approx(8 / 11)
    assert rouge_l(["a b c d"], ["a c d e"]) == pytest.approx(0.75)  # LCS 3 of 4 both ways
    assert rouge_l(["x"], ["y"]) == 0.0 and rouge_l([], []) == 0.0
    assert rouge_l(["increased"], ["increase"]) == 0.0  # no stemming
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)
    expected = np.mean([scorer.score(r, a)["rougeL"].fmeasure for a, r in zip(ANSWERS, REFERENCES)])
    assert rouge_l(ANSWERS, REFERENCES) == pytest.approx(expected, rel=1e-12)


def test_meteor_matches_words_and_stems_but_no_synonyms_without_wordnet():
    assert meteor_no_synonyms(["a b c d"], ["A b c d."]) == pytest.approx(1 - 0.5 * (1 / 4) ** 3)  # one chunk
    assert meteor_no_synonyms(["the effusion"], ["no change"]) == 0.0
    assert meteor_no_synonyms(["d c b a"], ["a b c d"]) < meteor_no_synonyms(["a b c d"], ["a b c d"])  # fragmented
    # "increased" and "increases" share the Porter stem "increas": all three words match, in one chunk
    assert meteor_no_synonyms(["the effusion increased"], ["the effusion increases"]) == pytest.approx(
        1 - 0.5 * (1 / 3) ** 3
    )
    no_synonym = meteor_no_synonyms(["the effusion is bigger"], ["the effusion is larger"])
    # 3 of 4 words match in one chunk: Fmean = 3/4, penalty 0.5 * (1/3)^3
    assert no_synonym == pytest.approx(0.75 * (1 - 0.5 / 27))

    class OneSynonym:  # a WordNet with one synset: "bigger" and "larger"
        def synsets(self, word):
            lemmas = [SimpleNamespace(name=lambda w=w: w) for w in ("bigger", "larger")]
            return [SimpleNamespace(lemmas=lambda: lemmas)] if word in ("bigger", "larger") else []

    with_synonym = meteor(["the effusion is bigger"], ["the effusion is larger"], wordnet=OneSynonym())
    assert with_synonym == pytest.approx(1 - 0.5 * (1 / 4) ** 3) and with_synonym > no_synonym
    assert meteor_no_synonyms([], []) == 0.0
    assert exact_match(["Larger in Case B."], ["larger in case b"]) == 1.0


def test_text_scores_and_open_ended_evaluation_report_the_signature_beside_numbers():
    from medreco.evaluation import evaluate_open_ended

    scores = text_scores(ANSWERS, REFERENCES)
    assert set(scores) == {"bleu", "bleu_signature", "rouge_l", "meteor_no_synonyms"}
    assert scores["bleu"] == bleu(ANSWERS, REFERENCES)["bleu"] and scores["rouge_l"] == rouge_l(ANSWERS, REFERENCES)

    class Reader:  # answers with the fixed corpus; no entity vocabulary, so no entity is looked up
        processor = SimpleNamespace()

        def answer(self, image_a, image_b, question, modality, entity=None):
            return ANSWERS[int(question)]

    studies = {
        "a": SimpleNamespace(image="a.png", modality="chest_xray"),
        "b": SimpleNamespace(image="b.png", modality="chest_xray"),
    }
    rows = [
        {"study_a": "a", "study_b": "b", "open_question": str(i), "open_answer": r} for i, r in enumerate(REFERENCES)
    ]
    result = evaluate_open_ended(Reader(), rows, studies)
    assert result["bleu_signature"] == scores["bleu_signature"]
    assert set(result["scores"]) == {"questions", "bleu", "rouge_l", "meteor_no_synonyms", "entity_f1"}
    assert all(result["scores"][k] == scores[k] for k in ("bleu", "rouge_l", "meteor_no_synonyms"))
    assert all(isinstance(v, int | float) for v in result["scores"].values())  # tables format every score
    assert [e["answer"] for e in result["examples"]] == ANSWERS


def test_a_finished_runs_text_scores_are_recomputed_from_its_saved_answers(tmp_path, capsys):
    examples = [{"question": "q", "reference": r, "answer": a} for a, r in zip(ANSWERS, REFERENCES)]
    saved = {"questions": 5, "bleu": 0.9, "rouge_l": 0.9, "meteor": 0.9, "entity_f1": 0.5, "bertscore_f1": 0.7}
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps({"vqa": {"open_ended": saved, "examples": examples}}))
    rescored = rescore_open_ended(path)
    text = text_scores(ANSWERS, REFERENCES)
    assert rescored["bleu_signature"] == text.pop("bleu_signature")
    assert rescored["scores"] == {"questions": 5, **text, "entity_f1": 0.5, "bertscore_f1": 0.7}
    assert rescored["previous"] == saved
    from medreco.cli import main

    assert main(["rescore", str(path), "--out", str(tmp_path / "rescored.json")]) == 0
    assert json.loads((tmp_path / "rescored.json").read_text()) == rescored
    assert f"BLEU: sacreBLEU {rescored['bleu_signature']}" in capsys.readouterr().out
    (tmp_path / "other.json").write_text(json.dumps({"retrieval": {}}))
    with pytest.raises(ValueError, match=r"other\.json: not the metrics\.json of a finished run"):
        rescore_open_ended(tmp_path / "other.json")
    path.write_text(json.dumps({"vqa": {"open_ended": saved, "examples": examples[:3]}}))
    with pytest.raises(ValueError, match="3 saved answers for 5 questions"):
        rescore_open_ended(path)


def test_mean_ranking_scores_average_the_per_query_metrics():
    rankings, relevant = [["x", "r1", "r2"], ["a", "b"]], [["r1", "r2"], ["b"]]
    scores = mean_ranking_scores(rankings, relevant, ks=(1, 3))
    assert scores["queries"] == 2 and scores["recall@1"] == 0.0 and scores["recall@3"] == 1.0
    # query 1: relevant at ranks 2 and 3 (the NDCG case above); query 2: at rank 2 of 1 relevant
    first = (1 / math.log2(3) + 0.5) / (1 + 1 / math.log2(3))
    assert scores["ndcg@3"] == pytest.approx((first + 1 / math.log2(3)) / 2)
    with pytest.raises(ValueError):
        mean_ranking_scores([["a"]], [])


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
