import copy
import json
import re

import numpy as np
import pytest

from medreco.cli import main
from medreco.data.phantom import (
    DRAWN_CHANGE_LABELS,
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
    assert labels <= set(DRAWN_CHANGE_LABELS) and len(labels) >= 3
    assert all(INVERSE_CHANGE[INVERSE_CHANGE[label]] == label for label in DRAWN_CHANGE_LABELS)


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
    with pytest.raises(ValueError, match="no \\['knee_mri'\\]"):
        PhantomConfig(modalities=("knee_mri",))


# ------------------------------------------------------------------ brain MRI, abdominal CT, ultrasound

FAMILY_MODALITIES = ("brain_mri", "abdominal_ct", "ultrasound")


@pytest.fixture(scope="module")
def families(tmp_path_factory):
    out = tmp_path_factory.mktemp("families")
    config = PhantomConfig(num_patients=5, studies_per_patient=2, modalities=FAMILY_MODALITIES, size="tiny", seed=11)
    return out, generate_cohort(config, out, progress=False)


def test_family_studies_are_real_files_in_scanner_layouts(families):
    out, records = families
    assert {r.modality for r in records} == set(FAMILY_MODALITIES) and len(records) == 5 * 2 * 3
    processor = MedReCoImageProcessor(
        recipes={
            "brain_mri": {"size": [6, 24, 24], "spacing": [15.0, 8.0, 8.0]},
            "abdominal_ct": {"size": [10, 24, 24], "spacing": [24.0, 14.0, 14.0]},
            "ultrasound": {"size": [1, 32, 32]},
        }
    )
    for record in records:
        image = load_image(out / record.image)
        assert np.isfinite(image.array).all() and record.report
        if record.modality == "brain_mri":  # the FLAIR series; T1 and T2 series and a FLAIR NIfTI beside it
            assert record.image.endswith("AX_FLAIR") and image.modality == "MR" and image.shape[0] > 1
            t1, t2, nifti = (load_image(out / path) for path in record.alternate_images)
            assert t1.shape == t2.shape == image.shape and t1.modality == "MR"
            np.testing.assert_array_equal(nifti.array, image.array)
            csf = t2.array > 1050  # CSF: bright on T2, dark on T1 and FLAIR
            assert csf.any() and image.array[csf].mean() < 500 and t1.array[csf].mean() < 500
        elif record.modality == "abdominal_ct":
            assert image.modality == "CT" and image.shape[0] > 1 and image.geometry.axes == ("S", "P", "L")
            np.testing.assert_array_equal(load_image(out / record.alternate_images[0]).array, image.array)
        else:  # a single frame (RGB or palette) and a multi-frame cine loop, spacing from the US regions
            assert image.modality == "US" and image.shape[0] == 1 and image.geometry.spacing_known
            cine = load_image(out / record.alternate_images[0])
            assert cine.shape[0] == 1 and cine.geometry.spacing == image.geometry.spacing
        tensor = processor.preprocess_one(image, record.modality)
        assert tensor.shape[0] == 1 and tensor.isfinite().all()


def test_family_ground_truth_changes_and_exact_reports(families):
    from medreco.data.mining.scoring import phantom_entity, score_decomposition
    from medreco.data.phantom import FAMILIES
    from medreco.data.reports.decomposition import RuleBasedDecomposer

    out, records = families
    decomposer = RuleBasedDecomposer()
    changes = set()
    for record in records:
        truth = read_ground_truth(out, record.study_id)
        keys = {f["key"] for f in truth["findings"]}
        assert keys == set(truth["mentions"]) and keys <= {t.key for t in FAMILIES[record.modality].types}
        for key in keys:
            assert phantom_entity(decomposer.ontology, key, record.modality) is not None
        if record.prior_study_id is not None:
            assert record.prior_study_id.rsplit("-", 1)[0] == record.study_id.rsplit("-", 1)[0]
            changes.update(c["label"] for c in truth["changes_from_prior"].values())
        else:
            assert "COMPARISON:  None." in record.report
    assert {"new", "stable"} <= changes and changes <= set(DRAWN_CHANGE_LABELS)
    exams = {read_ground_truth(out, r.study_id)["findings"][0]["key"] for r in records if r.modality == "ultrasound"}
    assert exams & {"thyroid_nodule"} or exams & {"us_gallstones"}  # one examination kind per patient
    scores = score_decomposition(decomposer, out)
    assert scores["status_accuracy"] == 1.0 and scores["span_precision"] == scores["span_recall"] == 1.0, scores


def _difference(render, present_key, sample, rng_seed=0):
    """How much one finding changes a rendering (mean absolute difference where it changes anything)."""
    base = [sample(key, np.random.default_rng(1), False) for key in present_key[1]]
    with_finding = [f if f.key != present_key[0] else _present(copy.deepcopy(f)) for f in base]
    a, b = render(base, np.random.default_rng(rng_seed)), render(with_finding, np.random.default_rng(rng_seed))
    changed = np.abs(a - b) > 1e-3
    return float(np.abs(a - b)[changed].mean()) if changed.any() else 0.0


def _present(finding):
    finding.present = True
    return finding


def test_every_family_finding_is_visible_at_the_small_size():
    from medreco.data.phantom import abdomen, brain, ultrasound
    from medreco.data.phantom.render import Grid

    def grid(field, spacing, centre):
        shape = tuple(max(2, round(f / s)) for f, s in zip(field, spacing))
        return Grid(shape, spacing, tuple(c - (n - 1) * s / 2 for c, n, s in zip(centre, shape, spacing)))

    brain_grid = grid(brain.FIELD_OF_VIEW, brain.SPACING["small"], (15.0, 0.0, 0.0))
    keys = [t.key for t in brain.TYPES]
    for key in keys:
        difference = _difference(
            lambda f, rng: brain.render_sequences(brain_grid, f, {"head_scale": 1.0}, rng)["FLAIR"],
            (key, keys),
            brain.sample,
        )
        assert difference > 100, key  # FLAIR noise is 18
    abdomen_grid = grid(abdomen.FIELD_OF_VIEW, abdomen.SPACING["small"], (0.0, 0.0, 0.0))
    keys = [t.key for t in abdomen.TYPES]
    for key in keys:
        difference = _difference(
            lambda f, rng: abdomen.render_abdomen_hu(abdomen_grid, f, {"body_scale": 1.0, "liver_shift": 0.0}, rng),
            (key, keys),
            abdomen.sample,
        )
        assert difference > 20, key  # HU noise is 12
    for exam, keys in ultrasound.EXAMS.items():
        for key in keys:
            difference = _difference(
                lambda f, rng, exam=exam: ultrasound.render_frames(exam, f, 128, rng, 1.0)[0][0],
                (key, keys),
                ultrasound.sample,
            )
            assert difference > 0.1, key


def test_cli_phantom_accepts_every_family(tmp_path, capsys):
    assert main(["phantom", "--out", str(tmp_path), "--patients", "1", "--studies", "1", "--size", "tiny",
                 "--modalities", "brain_mri,ultrasound", "--quiet"]) == 0  # fmt: skip
    assert "2 studies" in capsys.readouterr().out
    with pytest.raises(ValueError, match="abdominal_ct"):
        PhantomConfig(modalities=("knee_mri",))
    assert PhantomConfig().modalities == ("chest_xray", "chest_ct")
