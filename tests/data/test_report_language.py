"""Report language on hand-written reports the decomposer was not built from.

tests/data/report_language/ holds three sets of hand-written report excerpts with mention-status
labels (written here for this purpose, not copied from any dataset): `dev.jsonl` and `dev2.jsonl`
are development sets (the rules and the vocabulary were tuned on them; dev2 was the first held-out
set, scored once before it was folded into development), `test.jsonl` is held out (never tuned on).
See docs/mining.md, "How well it reads real reports"."""

import json
from pathlib import Path

import pytest

from medreco.data.mining.benchmark import read_labelled_reports, score_labelled_reports
from medreco.data.reports.decomposition import MentionStatus, RuleBasedDecomposer
from medreco.errors import TextFileError

SETS = Path(__file__).parent / "report_language"


@pytest.fixture(scope="module")
def decomposer():
    return RuleBasedDecomposer()


def test_the_sets_are_large_and_cover_every_family():
    for name, minimum in (("dev.jsonl", 240), ("dev2.jsonl", 300), ("test.jsonl", 300)):
        rows = read_labelled_reports(SETS / name)
        assert len(rows) >= minimum
        assert {r["modality"] for r in rows} == {"chest_xray", "chest_ct", "abdominal_ct", "brain_mri", "ultrasound"}
    development = {r["text"] for name in ("dev.jsonl", "dev2.jsonl") for r in read_labelled_reports(SETS / name)}
    assert not development & {r["text"] for r in read_labelled_reports(SETS / "test.jsonl")}  # held out


@pytest.mark.parametrize("name", ["dev.jsonl", "dev2.jsonl"])
def test_development_sets_read_right(decomposer, name):
    result = score_labelled_reports(decomposer, SETS / name)
    assert result["status_accuracy_resolved"] >= 0.97, result["errors"]
    assert result["vocabulary_coverage"] >= 0.97


def test_held_out_set_is_scored_and_does_not_regress(decomposer):
    """The target is 95%; the held-out set is read at 87.8% (first evaluation, labels the vocabulary
    resolves) and this guards against regression: README and docs/mining.md give the numbers."""
    result = score_labelled_reports(decomposer, SETS / "test.jsonl")
    assert result["labels"] >= 600
    assert result["status_accuracy_resolved"] >= 0.87
    assert result["vocabulary_coverage"] >= 0.93
    assert set(result["by_modality"]) == {"chest_xray", "chest_ct", "abdominal_ct", "brain_mri", "ultrasound"}


@pytest.mark.parametrize(
    ("text", "modality", "expected"),
    [
        # negation shared along a coordinated list, and stopping where a new description begins
        (
            "No focal airspace consolidation, pleural effusion, or pneumothorax.",
            "chest_xray",
            {"pneumothorax": "negative"},
        ),
        ("Neither pericardial nor pleural effusion.", "chest_ct", {"pericardial effusion": "negative"}),
        ("No pleural effusion, and small bilateral nodules are present.", "chest_ct", {"lung nodule": "positive"}),
        ("No effusion; however there is a new consolidation.", "chest_xray", {"consolidation": "positive"}),
        # normal limits, "otherwise", anatomy described plainly
        ("The heart is normal in size.", "chest_xray", {"cardiomegaly": "negative"}),
        ("The spleen measures 10.5 cm, within normal limits.", "abdominal_ct", {"splenomegaly": "negative"}),
        ("Left basilar atelectasis; the lungs are otherwise clear.", "chest_xray", {"atelectasis": "positive"}),
        ("The lungs are well expanded without consolidation.", "chest_xray", {"lungs": "negative"}),
        # differential lists, versus, "no X to suggest Y", "rather than", "denies"
        ("Differential diagnosis includes metastasis, glioma, or abscess.", "brain_mri", {"abscess": "uncertain"}),
        (
            "Left basilar opacity, atelectasis versus pneumonia.",
            "chest_xray",
            {"lung opacity": "positive", "atelectasis": "uncertain"},
        ),
        ("No focal consolidation to suggest pneumonia.", "chest_xray", {"pneumonia": "negative"}),
        (
            "Likely atelectasis rather than pneumonia.",
            "chest_xray",
            {"pneumonia": "negative", "atelectasis": "uncertain"},
        ),
        ("The patient denies trauma; no rib fracture.", "chest_xray", {"rib fracture": "negative"}),
        # pseudo-negation and post-position negation
        ("No change in the small left pleural effusion.", "chest_xray", {"pleural effusion": "positive"}),
        ("The previously seen pneumothorax is no longer seen.", "chest_xray", {"pneumothorax": "negative"}),
        ("The small cyst in the right thyroid lobe is no longer seen.", "ultrasound", {"thyroid nodule": "negative"}),
        ("Ascites: none.", "abdominal_ct", {"ascites": "negative"}),
        # a generic word resolved by the organ the sentence names, British spelling, plurals
        ("A 2 cm simple cyst in the upper pole of the left kidney.", "ultrasound", {"renal cyst": "positive"}),
        ("Liver is normal in size without focal lesion.", "abdominal_ct", {"liver lesion": "negative"}),
        (
            "Small subdural haematoma without midline shift.",
            "brain_mri",
            {"subdural hematoma": "positive", "midline shift": "negative"},
        ),
    ],
)
def test_scope_rules(decomposer, text, modality, expected):
    for name, status in expected.items():
        entity = decomposer.ontology.find(name, modality)
        assert decomposer.decompose(text, modality, [entity]).status(entity.id) is MentionStatus(status), name


def test_a_bad_labelled_file_names_the_line(tmp_path):
    path = tmp_path / "labels.jsonl"
    path.write_text(json.dumps({"modality": "chest_xray", "text": "No effusion.", "labels": {"effusion": "absent"}}))
    with pytest.raises(TextFileError, match="line 1: statuses must be one of"):
        read_labelled_reports(path)
