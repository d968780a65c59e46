import json
import re

import numpy as np
import pytest

from medreco.cli import main
from medreco.data.phantom import (
    CHANGE_LABELS,
    FINDING_TYPES,
    INVERSE_CHANGE,
    PhantomConfig,
    generate_cohort,
    read_ground_truth,
)
from medreco.processing import MedReCoImageProcessor, load_image

FAKE_NAMES = [
    "Quillfeather",
    "Marrowby",
    "Thistlewood",
    "Ashcombe",
    "Pennyworth",
    "Vantablack",
    "Oakhurst",
    "Wrenfield",
]


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    out = tmp_path_factory.mktemp("cohort")
    records = generate_cohort(PhantomConfig(num_patients=6, size="tiny", seed=7), out, progress=False)
    return out, records


def test_layout_and_real_files(cohort):
    out, records = cohort
    assert len(records) == 6 * 2 * 2
    assert {r.modality for r in records} == {"chest_xray", "chest_ct"}
    for record in records:
        image = load_image(out / record.image)
        assert np.isfinite(image.array).all()
        if record.modality == "chest_ct":
            assert image.modality == "CT" and image.shape[0] > 1 and image.geometry.axes == ("S", "P", "L")
            twin = load_image(out / record.alternate_images[0])  # the NIfTI of the same study
            np.testing.assert_array_equal(twin.array, image.array)
            np.testing.assert_allclose(twin.geometry.affine, image.geometry.affine, atol=1e-3)
        else:
            assert image.modality == "DX" and image.shape[0] == 1
            assert load_image(out / record.alternate_images[0]).shape == image.shape
        assert (out / record.image).exists() and record.report


def test_spacing_varies_and_preprocessing_accepts_every_study(cohort):
    out, records = cohort
    spacings = {load_image(out / r.image).geometry.spacing for r in records if r.modality == "chest_ct"}
    assert len(spacings) > 3
    processor = MedReCoImageProcessor(
        recipes={"chest_ct": {"size": [20, 32, 32], "spacing": [14.0, 10.0, 10.0]}, "chest_xray": {"size": [1, 32, 32]}}
    )
    for record in records[:6]:
        tensor = processor.preprocess_one(out / record.image, record.modality)
        assert tensor.isfinite().all() and tensor.min() >= 0 and tensor.max() <= 1


def test_deterministic_by_seed(cohort, tmp_path):
    out, records = cohort
    again = generate_cohort(PhantomConfig(num_patients=6, size="tiny", seed=7), tmp_path / "again", progress=False)
    assert [r.report for r in again] == [r.report for r in records]
    assert (tmp_path / "again" / "manifest.jsonl").read_text() == (out / "manifest.jsonl").read_text()
    for a, b in zip(records[:4], again[:4]):
        np.testing.assert_array_equal(load_image(out / a.image).array, load_image(tmp_path / "again" / b.image).array)
    other = generate_cohort(PhantomConfig(num_patients=6, size="tiny", seed=8), tmp_path / "other", progress=False)
    assert [r.report for r in other] != [r.report for r in records]


def test_findings_co_occur_and_change(cohort):
    out, records = cohort
    present_counts, labels = [], set()
    for record in records:
        truth = read_ground_truth(out, record.study_id)
        present_counts.append(sum(f["present"] for f in truth["findings"]))
        labels |= {c["label"] for c in truth["changes_from_prior"].values()}
        for finding in truth["findings"]:
            assert finding["entity"] == FINDING_TYPES[finding["key"]].entity
    assert max(present_counts) >= 2  # several findings in one study
    assert labels <= set(CHANGE_LABELS) and len(labels) >= 3
    assert all(INVERSE_CHANGE[INVERSE_CHANGE[label]] == label for label in CHANGE_LABELS)


NEGATION = re.compile(r"\b(no|not|without|resolved|resolution|normal|within normal limits)\b", re.I)
UNCERTAINTY = re.compile(r"\b(possible|cannot be excluded|may represent)\b", re.I)
KEYWORDS = {
    "lung_nodule": r"nodul",
    "consolidation": r"consolidation",
    "pleural_effusion": r"pleural effusion",
    "cardiomegaly": r"cardiomegaly|heart|cardiac",
    "atelectasis": r"atelectasis",
    "emphysema": r"emphysema",
    "lymphadenopathy": r"lymph",
    "fatty_liver": r"liver|hepatic",
    "pericardial_effusion": r"pericardial",
}


def test_reports_parse_back_to_their_ground_truth(cohort):
    """A keyword reader recovers every written mention and its status from the report text."""
    out, records = cohort
    checked = 0
    for record in records:
        truth = read_ground_truth(out, record.study_id)
        sentences = re.split(r"(?<=\.)\s+", record.report)
        for key, mention in truth["mentions"].items():
            about = [s for s in sentences if re.search(KEYWORDS[key], s, re.I)]
            if mention["status"] == "not mentioned":
                assert not about, (record.study_id, key, about)
                continue
            assert all(s in record.report for s in mention["sentences"])
            first = mention["sentences"][0]
            if mention["status"] == "negative":
                assert NEGATION.search(first), first
            elif mention["status"] == "uncertain":
                assert UNCERTAINTY.search(first), first
            else:
                assert not NEGATION.search(first.split(",")[0]) and not UNCERTAINTY.search(first), first
            checked += 1
        for finding in truth["findings"]:
            if (
                finding["present"]
                and "size_mm" in finding
                and truth["mentions"][finding["key"]]["status"] == "positive"
            ):
                assert f"{finding['size_mm']:.0f} mm" in record.report
    assert checked > 40


def test_no_identifying_value_in_manifest_or_ground_truth(cohort):
    out, _ = cohort
    texts = (out / "manifest.jsonl").read_text() + "".join(p.read_text() for p in (out / "ground_truth").glob("*.json"))
    assert not any(name in texts for name in FAKE_NAMES)
    assert "MRN" not in texts and "Synthetic General Hospital" not in texts
    dicom_bytes = next((out / "patients").rglob("*.dcm")).read_bytes()
    assert any(name.encode() in dicom_bytes for name in FAKE_NAMES)  # the DICOM files do carry fake identities


def test_phantom_command(tmp_path):
    assert (
        main(
            [
                "phantom",
                "--out",
                str(tmp_path),
                "--patients",
                "2",
                "--size",
                "tiny",
                "--quiet",
                "--modalities",
                "chest_xray",
            ]
        )
        == 0
    )
    lines = (tmp_path / "manifest.jsonl").read_text().splitlines()
    assert len(lines) == 4 and json.loads(lines[1])["prior_study_id"] == json.loads(lines[0])["study_id"]
    with pytest.raises(ValueError, match="no \\['brain_mri'\\]"):
        PhantomConfig(modalities=("brain_mri",))
