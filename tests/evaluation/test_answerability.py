"""Closed-VQA accuracy split by what the images can answer, from hand-made hits."""

from types import SimpleNamespace

import pytest

from medreco.evaluation import answerability_breakdown
from medreco.evaluation.answerability import NOTHING_KNOWN, answerability_of

STUDIES = {
    "X1": SimpleNamespace(patient_id="P1", modality="chest_xray"),
    "X2": SimpleNamespace(patient_id="P2", modality="chest_xray"),
    "C3": SimpleNamespace(patient_id="P3", modality="chest_ct"),
    "C4": SimpleNamespace(patient_id="P4", modality="chest_ct"),
}
# (study_a, study_b, dimension, image_answerable, reason)
LAYOUT = [
    ("X1", "X2", "presence", True, ""),
    ("X2", "X1", "size", True, ""),
    ("X1", "X2", "presence", True, ""),
    ("C3", "C4", "presence", True, ""),
    ("C3", "C4", "margins", False, "not drawn"),
    ("C4", "C3", "margins", False, "not drawn"),
    ("C3", "C4", "aetiology", False, "only the report states it"),
    ("X1", "X2", "morphology", None, ""),
]
HITS = {
    "vlm": [True, True, True, False, False, True, False, True],
    "blind_vlm": [False, True, False, False, False, True, True, True],
    "text_only": [True, False, False, False, True, True, True, False],
}


def rows(layout=LAYOUT, with_answerability=True):
    made = []
    for a, b, dimension, answerable, reason in layout:
        row = {"study_a": a, "study_b": b, "dimension": dimension, "entity_id": "e", "answer": "A"}
        if with_answerability:
            row |= {"image_answerable": answerable, "answerability_reason": reason}
        made.append(row)
    return made


def test_groups_split_accuracy_by_what_the_images_show():
    result = answerability_breakdown(HITS, rows(), STUDIES)
    assert result["available"] is True and result["reference"] == "vlm" and result["questions"] == 8
    assert result["counts"] == {"image_answerable": 4, "report_only": 3, "unknown": 1}
    groups = result["groups"]
    answerable, report_only = groups["image_answerable"], groups["report_only"]
    assert answerable["systems"]["vlm"]["accuracy"] == pytest.approx(3 / 4)
    assert answerable["systems"]["blind_vlm"]["accuracy"] == pytest.approx(1 / 4)
    assert answerable["systems"]["vlm"]["questions"] == 4
    low, high = answerable["systems"]["vlm"]["ci95"]
    assert low < 0.75 < high
    assert report_only["systems"]["vlm"]["accuracy"] == pytest.approx(1 / 3)
    assert report_only["systems"]["blind_vlm"]["accuracy"] == pytest.approx(2 / 3)
    assert report_only["systems"]["text_only"]["accuracy"] == pytest.approx(1.0)
    assert groups["unknown"]["questions"] == 1 and groups["unknown"]["systems"]["vlm"]["accuracy"] == 1.0
    assert result["systems"]["vlm"]["accuracy"] == pytest.approx(5 / 8)


def test_strata_by_family_dimension_and_both():
    answerable, report_only = (
        answerability_breakdown(HITS, rows(), STUDIES)["groups"][g] for g in ("image_answerable", "report_only")
    )
    assert set(answerable["by_family"]) == {"chest_xray", "chest_ct"}
    assert answerable["by_family"]["chest_xray"]["vlm"]["accuracy"] == 1.0
    assert answerable["by_family"]["chest_xray"]["vlm"]["questions"] == 3
    assert answerable["by_family"]["chest_xray"]["blind_vlm"]["accuracy"] == pytest.approx(1 / 3)
    assert answerable["by_family"]["chest_ct"]["vlm"]["questions"] == 1
    assert answerable["by_family"]["chest_ct"]["vlm"]["accuracy"] == 0.0
    assert {k: v["vlm"]["questions"] for k, v in answerable["by_dimension"].items()} == {"presence": 3, "size": 1}
    assert answerable["by_dimension"]["presence"]["vlm"]["accuracy"] == pytest.approx(2 / 3)
    assert set(answerable["by_family_dimension"]) == {"chest_xray/presence", "chest_xray/size", "chest_ct/presence"}
    assert answerable["by_family_dimension"]["chest_ct/presence"]["vlm"]["questions"] == 1
    assert set(report_only["by_family"]) == {"chest_ct"}
    assert {k: v["blind_vlm"]["questions"] for k, v in report_only["by_dimension"].items()} == {
        "margins": 2,
        "aetiology": 1,
    }
    assert report_only["reasons"] == {"not drawn": 2, "only the report states it": 1}
    assert "reasons" not in answerable


def test_the_reference_is_compared_with_each_system_clustered_by_patient():
    answerable = answerability_breakdown(HITS, rows(), STUDIES)["groups"]["image_answerable"]
    assert set(answerable["comparisons"]) == {"blind_vlm", "text_only"}
    versus_blind = answerable["comparisons"]["blind_vlm"]
    assert versus_blind["difference"] == pytest.approx(0.5)
    assert versus_blind["mcnemar"] == {"b": 2, "c": 0, "p_value": pytest.approx(0.5)}
    clustered = versus_blind["clustered"]
    # rows 0-2 are clustered by P1 (the first of X1, X2's patients), row 3 by P3
    assert clustered["clusters"] == 2 and clustered["difference"] == pytest.approx(0.5)
    # one patient holds the whole difference: every sign flip is as extreme, so no evidence at all
    assert clustered["p_value"] == pytest.approx(1.0)
    against_blind = answerability_breakdown(HITS, rows(), STUDIES, reference="blind_vlm")["groups"]["image_answerable"]
    assert against_blind["comparisons"]["vlm"]["difference"] == pytest.approx(-0.5)


def test_no_clustered_comparison_when_the_studies_know_no_patient():
    anonymous = {key: SimpleNamespace(modality=study.modality) for key, study in STUDIES.items()}
    answerable = answerability_breakdown(HITS, rows(), anonymous)["groups"]["image_answerable"]
    assert "clustered" not in answerable["comparisons"]["blind_vlm"]
    assert answerable["comparisons"]["blind_vlm"]["difference"] == pytest.approx(0.5)
    assert set(answerable["by_family"]) == {"chest_xray", "chest_ct"}


def test_nothing_known_says_so_and_still_reports_overall_accuracy():
    for unknown in (rows(with_answerability=False), [{**row, "image_answerable": None} for row in rows()]):
        result = answerability_breakdown(HITS, unknown, STUDIES)
        assert result["available"] is False and result["reason"] == NOTHING_KNOWN
        assert "real archive" in result["reason"] and "groups" not in result
        assert result["systems"]["vlm"]["accuracy"] == pytest.approx(5 / 8)
        assert result["systems"]["vlm"]["questions"] == 8


def test_hits_must_align_with_rows_and_values_are_read_leniently():
    with pytest.raises(ValueError, match="blind_vlm"):
        answerability_breakdown({"vlm": HITS["vlm"], "blind_vlm": [True]}, rows(), STUDIES)
    np = pytest.importorskip("numpy")
    values = [True, False, None, np.bool_(False), "true", "False", "maybe", float("nan"), 1]
    assert [answerability_of({"image_answerable": v}) for v in values] == [
        True, False, None, False, True, False, None, None, True,
    ]  # fmt: skip
    assert answerability_of({}) is None
