"""Retrieval Recall@k and NDCG@k (medreco), as an `evaluate` module."""

import evaluate

from medreco.evaluation.hf_metrics import metric_info
from medreco.evaluation.metrics import mean_ranking_scores

_DESCRIPTION = """Recall@k (1 when a relevant study is among the first k, the MedReCo paper's) and binary-relevance
NDCG@k of each query's ranking, averaged over queries: medreco's `evaluation.metrics.mean_ranking_scores`,
built on the `recall_at_k` and `ndcg_at_k` that `evaluate_retrieval` scores every query with."""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of lists of str): each query's ranked gallery (study ids, best first).
    references (list of lists of str): each query's relevant study ids (at least one).
    ks (list of int, default [1, 3, 5]): the cut-offs.
Returns:
    queries (int), and "recall@k" and "ndcg@k" (floats, 0-1) for each k.
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class RankingAtK(evaluate.Metric):
    def _info(self):
        return metric_info(_DESCRIPTION, _KWARGS_DESCRIPTION, {"predictions": "strings", "references": "strings"})

    def _compute(self, predictions, references, ks=(1, 3, 5)):
        return mean_ranking_scores(predictions, references, ks)
