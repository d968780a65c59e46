"""Closed-ended comparative VQA accuracy (medreco), as an `evaluate` module."""

import evaluate

from medreco.evaluation.hf_metrics import metric_info
from medreco.evaluation.vqa import accuracy_summary

_DESCRIPTION = """The share of closed questions whose chosen option letter is the right one, with the 95% Wilson
score interval: medreco's `evaluation.vqa.accuracy_summary`, which `evaluate_closed_vqa` reports."""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of str): the option letter each question was answered with ("A", "B", ...).
    references (list of str): the right letter of each question.
Returns:
    accuracy (float): the share answered right, 0-1.
    questions (int): how many questions.
    ci95 (list of two floats): the 95% Wilson score interval of the accuracy.
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class ClosedVqaAccuracy(evaluate.Metric):
    def _info(self):
        return metric_info(_DESCRIPTION, _KWARGS_DESCRIPTION, {"predictions": "string", "references": "string"})

    def _compute(self, predictions, references):
        return accuracy_summary([p == r for p, r in zip(predictions, references, strict=True)])
