"""Entity F1 of answers against reference answers (medreco), as an `evaluate` module."""

import evaluate

from medreco.evaluation.hf_metrics import metric_info
from medreco.evaluation.text import entity_f1

_DESCRIPTION = """Micro-averaged precision, recall and F1 of the clinical facts two texts state, as medreco's
rule-based report parser reads them: for every vocabulary entity of the pair's modality, its mention status
(positive, negative, uncertain) and, when positive, its attributes (side, lobes, grade, size, number,
margins, density). medreco's `evaluation.text.entity_f1`, which `evaluate_open_ended` reports; it plays the
role RadGraph F1 plays in the MedReCo paper, without a model download."""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of str): the answers.
    references (list of str): the reference answers.
    modalities (list of str): each pair's modality ("chest_xray", "chest_ct", "brain_mri", "abdominal_ct",
        "ultrasound"), which chooses the vocabulary.
Returns:
    precision, recall, f1 (floats, 0-1).
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class EntityF1(evaluate.Metric):
    def _info(self):
        return metric_info(
            _DESCRIPTION, _KWARGS_DESCRIPTION, {"predictions": "string", "references": "string", "modalities": "string"}
        )

    def _compute(self, predictions, references, modalities):
        return entity_f1(predictions, references, modalities)
