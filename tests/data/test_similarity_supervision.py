import os
import subprocess
import sys

import numpy as np
import pytest

from medreco.data.mining import MiningConfig
from medreco.data.mining.similarity import (
    SIMILARITY_METRICS,
    AgreementSimilarity,
    EmbeddingSimilarity,
    MetricUnavailableError,
    RadGraphSimilarity,
    RaTEScoreSimilarity,
    ReportSimilarity,
    SimilarityThresholds,
    build_similarity_metric,
    statement_key,
)
from medreco.data.mining.splits import assign_splits
from medreco.data.mining.supervision import StudyInfo, build_retrieval_queries, build_triplets
from medreco.data.phantom import PhantomConfig, generate_cohort, read_ground_truth
from medreco.data.reports.decomposition import RuleBasedDecomposer
from medreco.data.reports.statement import EntityStatement, MentionStatus

P, N, M = MentionStatus.POSITIVE, MentionStatus.NEGATIVE, MentionStatus.NOT_MENTIONED


def s(status, text=""):
    return EntityStatement("e", status, [text] if text else [])


@pytest.fixture(scope="module")
def embedding():
    return EmbeddingSimilarity("bundled:minilm")


def test_embedding_similarity_is_semantic(embedding):
    a = [s(P, "Small left pleural effusion.")]
    close, far = (
        [s(P, "There is a small left-sided pleural effusion.")],
        [s(P, "The osseous structures are unremarkable.")],
    )
    assert embedding.score(a, close)[0] > 0.85 > embedding.score(a, far)[0]
    matrix = embedding.matrix(a + close, a + close)
    assert matrix.shape == (2, 2) and np.allclose(np.diag(matrix), 1.0, atol=1e-5)


def test_agreement_compares_status_and_attributes():
    agreement = AgreementSimilarity()
    pairs = [
        (s(P, "Small left pleural effusion."), s(P, "A small pleural effusion on the left."), 1.0),
        (s(P, "Small left pleural effusion."), s(P, "Large left pleural effusion."), 0.5),
        (s(P, "A 10 mm nodule in the right upper lobe."), s(P, "An 11 mm nodule in the right upper lobe."), 1.0),
        (s(P, "Small effusion."), s(N, "No effusion."), 0.0),
        (s(N, "No effusion."), s(N, "There is no pleural effusion."), 1.0),
    ]
    for x, y, expected in pairs:
        assert agreement.score([x], [y])[0] == pytest.approx(expected), (x.text, y.text)
    # the all-pairs matrix (attributes read once per statement) equals the pairwise scores
    first, second = [x for x, _, _ in pairs], [y for _, y, _ in pairs]
    matrix = agreement.matrix(first, second)
    assert matrix.shape == (5, 5)
    assert np.array_equal(matrix, [[agreement.score([x], [y])[0] for y in second] for x in first])
    assert agreement.matrix([], second).shape == (0, 5)


def test_a_statement_key_is_the_same_in_every_process():
    """Statement keys group training statements by content. A frozenset's repr (lobes) follows the
    process's string-hash seed, which split groups differently per run and made stage 1 differ
    between processes with the same seed."""
    texts = [
        "Nodules in the right upper lobe, left lower lobe and right middle lobe, up to 8 mm.",
        "Consolidation in the left upper lobe and the right lower lobe.",
    ]
    same_content = "Nodules in the right middle lobe, right upper lobe and left lower lobe, up to 8 mm."
    assert statement_key("positive", texts[0]) == statement_key("positive", same_content)
    program = (
        "from medreco.data.mining.similarity import statement_key; "
        f"print([statement_key('positive', text) for text in {texts!r}])"
    )
    printed = {
        subprocess.run(
            [sys.executable, "-c", program],
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in range(1, 7)
    }
    assert len(printed) == 1, printed


def test_metrics_by_name_and_agreement_alone_labels_paraphrases_by_content():
    """With MiniLM, paraphrases of a negative finding fall below the embedding threshold, so a
    relevance that needs the embedding metric judges wording; agreement alone judges content."""
    statements = [s(N, "No cardiomegaly."), s(N, "Heart size is normal."), s(P, "Mild cardiomegaly.")]
    strict = SimilarityThresholds({"embedding": 0.8, "agreement": 0.99}, {"embedding": 0.75, "agreement": 0.01})
    both = ReportSimilarity(
        [build_similarity_metric(name, "bundled:minilm") for name in SIMILARITY_METRICS[:2]], strict
    )
    alone = ReportSimilarity([build_similarity_metric("agreement")], strict)
    assert both.relevance(statements[:1], statements[1:]).tolist() == [[-1, -1]]  # wording: neither
    assert alone.relevance(statements[:1], statements[1:]).tolist() == [[1, 0]]
    with pytest.raises(ValueError, match="unknown similarity metric"):
        build_similarity_metric("bleu")
    with pytest.raises(ValueError, match="bleu"):
        MiningConfig(metrics=("agreement", "bleu"))


def test_combination_thresholds_and_ranking(embedding):
    similarity = ReportSimilarity([embedding, AgreementSimilarity()])  # paper thresholds 0.9 / 0.3
    a = [s(P, "Small left pleural effusion."), s(P, "Small left pleural effusion."), s(M)]
    b = [s(P, "Small left pleural effusion."), s(N, "The knee is unremarkable."), s(P, "Small left pleural effusion.")]
    relevance = similarity.relevance(a, b)
    assert relevance[0, 0] == 1 and relevance[1, 1] == 0 and (relevance[2] == -1).all()
    candidates = [
        s(P, "Large right pleural effusion."),
        s(P, "Small left pleural effusion."),
        s(N, "The knee is unremarkable."),
    ]
    ranks = similarity.ranking_score(a[:1], candidates)
    assert ranks[0].argmax() == 1 and ranks[0].argmin() == 2
    per_metric = ReportSimilarity(
        [AgreementSimilarity()], SimilarityThresholds(positive={"agreement": 0.4}, negative=0.3)
    )
    assert per_metric.relevance([s(P, "Small left effusion.")], [s(P, "Large left effusion.")])[0, 0] == 1


def test_unavailable_metrics_say_what_to_install():
    for metric, package in ((RaTEScoreSimilarity, "RaTEScore"), (RadGraphSimilarity, "radgraph")):
        try:
            metric()
        except MetricUnavailableError as error:
            assert package in str(error)


def test_triplets_and_benchmark_respect_splits_entities_and_truth(tmp_path, embedding):
    records = generate_cohort(
        PhantomConfig(num_patients=30, size="tiny", seed=2, modalities=("chest_xray",)), tmp_path, progress=False
    )
    decomposer = RuleBasedDecomposer()
    decompositions = {r.study_id: decomposer.decompose(r.report, r.modality) for r in records}
    splits = assign_splits({r.patient_id for r in records}, {"train": 0.6, "test": 0.4})
    studies = {r.study_id: StudyInfo(r.study_id, r.patient_id, r.modality, splits[r.patient_id]) for r in records}
    effusion = decomposer.ontology.find("pleural effusion", "chest_xray").id
    similarity = ReportSimilarity(
        [embedding, AgreementSimilarity()],
        SimilarityThresholds(
            positive={"embedding": 0.8, "agreement": 0.99}, negative={"embedding": 0.75, "agreement": 0.01}
        ),
    )
    triplets = build_triplets(decompositions, studies, [effusion], similarity)
    assert len(triplets) > 20
    truth = {
        r.study_id: {f["key"]: f["present"] for f in read_ground_truth(tmp_path, r.study_id)["findings"]}
        for r in records
    }
    for t in triplets:
        assert studies[t.anchor].split == studies[t.positive].split == studies[t.negative].split == t.split
        assert len({studies[x].patient_id for x in (t.anchor, t.positive, t.negative)}) == 3
        # positives share the anchor's effusion status, negatives do not (read from the images' truth)
        assert truth[t.anchor]["pleural_effusion"] == truth[t.positive]["pleural_effusion"]
        assert truth[t.anchor]["pleural_effusion"] != truth[t.negative]["pleural_effusion"]
    queries = build_retrieval_queries(decompositions, studies, [effusion], similarity)
    assert queries and all(q.query not in q.gallery and set(q.relevant) <= set(q.gallery) for q in queries)
    assert all(studies[g].split == "test" for q in queries for g in q.gallery)
