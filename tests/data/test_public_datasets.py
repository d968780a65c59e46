"""Each adapter on small files written here in the dataset's real layout (see shared notes on formats)."""

import csv
import gzip
import json

import nibabel as nib
import numpy as np
import pytest
import torch

from medreco.cli import main
from medreco.data import public_datasets
from medreco.data.mining import ManifestError, MiningConfig, read_study_manifest, split_studies
from medreco.data.mining.splits import LeakageError
from medreco.errors import InvalidSpacingError, UnreadableImageError
from medreco.processing import MedReCoImageProcessor, content_digest, load_image, read_nifti


def write_csv(path, rows, fieldnames=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wt", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fieldnames or list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_mimic_cxr_layout_and_manifest(tmp_path):
    study = tmp_path / "files" / "p10" / "p10000032" / "s50414267"
    study.mkdir(parents=True)
    (study / "02aa804e.dcm").write_bytes(b"lateral")
    (study / "174413ec.dcm").write_bytes(b"pa")
    (study.parent / "s50414267.txt").write_text("FINDINGS: No pleural effusion.\nIMPRESSION: Normal.")
    write_csv(
        tmp_path / "meta.csv",
        [
            {
                "dicom_id": "02aa804e",
                "subject_id": "10000032",
                "study_id": "50414267",
                "ViewPosition": "LATERAL",
                "StudyDate": "21800506",
            },
            {
                "dicom_id": "174413ec",
                "subject_id": "10000032",
                "study_id": "50414267",
                "ViewPosition": "PA",
                "StudyDate": "21800506",
            },
        ],
    )
    rows = list(public_datasets.mimic_cxr(tmp_path, tmp_path / "meta.csv"))
    assert rows == [
        {
            "study_id": "s50414267",
            "patient_id": "p10000032",
            "modality": "chest_xray",
            "image": str(study / "174413ec.dcm"),
            "report": "FINDINGS: No pleural effusion.\nIMPRESSION: Normal.",
            "study_date": "2180-05-06",
        }
    ]
    assert (
        main(
            [
                "manifest",
                "mimic-cxr",
                str(tmp_path),
                "--metadata",
                str(tmp_path / "meta.csv"),
                "--out",
                str(tmp_path / "m.jsonl"),
            ]
        )
        == 0
    )
    assert read_study_manifest(tmp_path / "m.jsonl")[0]["patient_id"] == "p10000032"


def mimic_tree(root, studies):
    """MIMIC-CXR-JPG's layout: files/pXX/pSUBJECT/sSTUDY.txt and sSTUDY/DICOM_ID.jpg."""
    for subject, study, dicom_id in studies:
        folder = root / "files" / f"p{subject[:2]}" / f"p{subject}" / f"s{study}"
        folder.mkdir(parents=True)
        (folder / f"{dicom_id}.jpg").write_bytes(b"jpg")
        (folder.parent / f"s{study}.txt").write_text("FINDINGS: No effusion.")


def test_mimic_cxr_official_split(tmp_path, capsys):
    studies = [
        ("10000032", "50414267", "174413ec"),
        ("10000032", "53189527", "2a2277a9"),
        ("10000898", "50771383", "6ad03ed1"),
    ]
    mimic_tree(tmp_path, studies)
    splits = {"174413ec": "train", "2a2277a9": "train", "6ad03ed1": "validate"}
    split_rows = [{"dicom_id": d, "study_id": st, "subject_id": su, "split": splits[d]} for su, st, d in studies]
    write_csv(tmp_path / "mimic-cxr-2.0.0-split.csv.gz", split_rows)  # its published name and place
    rows = list(public_datasets.mimic_cxr(tmp_path))
    assert {r["study_id"]: r["split"] for r in rows} == {
        "s50414267": "train",
        "s53189527": "train",
        "s50771383": "validation",
    }
    out = tmp_path / "m.jsonl"
    write_csv(tmp_path / "elsewhere.csv", [{**split_rows[0], "split": "test"}, *split_rows[1:]])
    assert (
        main(
            ["manifest", "mimic-cxr", str(tmp_path), "--split-csv", str(tmp_path / "elsewhere.csv"), "--out", str(out)]
        )
        == 0
    )
    assert [r["split"] for r in read_study_manifest(out)] == ["test", "train", "validation"]
    # a patient in two official splits is refused by mining (its pairs would cross them)
    with pytest.raises(LeakageError, match="p10000032 in both test and train"):
        split_studies(read_study_manifest(out), MiningConfig())
    problems = {
        "no_column.csv": ([{k: v for k, v in r.items() if k != "split"} for r in split_rows], "missing column.*split"),
        "bad_value.csv": ([{**split_rows[0], "split": "holdout"}, *split_rows[1:]], "line 2: split 'holdout'"),
        "partial.csv": (split_rows[:2], "no split for study s50771383"),
    }
    for name, (content, message) in problems.items():
        write_csv(tmp_path / name, content)
        assert (
            main(["manifest", "mimic-cxr", str(tmp_path), "--split-csv", str(tmp_path / name), "--out", str(out)]) == 2
        )
        error = capsys.readouterr().err
        assert name in error and "\n" not in error.strip()
        with pytest.raises(ManifestError, match=message):
            list(public_datasets.mimic_cxr(tmp_path, split_csv=tmp_path / name))


def test_mining_keeps_a_manifests_official_split(tmp_path):
    rows = [
        {
            "image": "a.png",
            "report": "r",
            "patient_id": f"p{i % 3}",
            "modality": "chest_xray",
            "study_id": f"s{i}",
            "split": ["train", "validation", "test"][i % 3],
        }
        for i in range(9)
    ]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    studies = split_studies(read_study_manifest(manifest), MiningConfig())
    assert {s: info.split for s, info in studies.items()} == {r["study_id"]: r["split"] for r in rows}
    config = MiningConfig(external_sources=("other",))  # an external cohort stays external
    external = split_studies([{**rows[0], "source": "other"}, *rows[1:3]], config)
    assert external["s0"].split == "external" and external["s1"].split == "validation"
    for problem, broken, message in [
        ("partial", [rows[0], {**rows[1], "split": ""}], "row 2 has no split while others do"),
        ("unknown", [{**rows[0], "split": "validate"}], "row 1: split 'validate' unknown"),
    ]:
        path = tmp_path / f"{problem}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in broken))
        with pytest.raises(ManifestError, match=f"{path.name}: {message}"):
            read_study_manifest(path)


def report_row(name, findings="No effusion.", impressions="Normal."):
    return {
        "VolumeName": name,
        "ClinicalInformation_EN": "",
        "Technique_EN": "",
        "Findings_EN": findings,
        "Impressions_EN": impressions,
    }


def metadata_row(name, xy="[0.75, 0.8]", z="2.5", slope="1.0", intercept="-1024.0", **extra):
    # CT-RATE's metadata CSVs hold more DICOM-derived columns (some identifying-looking): never copied
    return {
        "VolumeName": name,
        "Manufacturer": "ACME",
        "PatientAge": "061Y",
        "XYSpacing": xy,
        "ZSpacing": z,
        "RescaleSlope": slope,
        "RescaleIntercept": intercept,
        **extra,
    }


def test_ct_rate_layout(tmp_path):
    write_csv(
        tmp_path / "reports.csv",
        [
            report_row("train_1_a_1.nii.gz"),
            report_row("train_1_a_2.nii.gz"),
            report_row("valid_7_b_1.nii.gz", "Emphysema.", "COPD."),
        ],
    )
    write_csv(tmp_path / "meta.csv", [metadata_row(n) for n in ("train_1_a_1.nii.gz", "valid_7_b_1.nii.gz")])
    (tmp_path / "dataset").mkdir()  # CT-RATE's volumes folder
    rows = list(public_datasets.ct_rate(tmp_path, tmp_path / "reports.csv", tmp_path / "meta.csv"))
    assert [r["study_id"] for r in rows] == ["train_1_a", "valid_7_b"]  # one reconstruction per scan
    assert [r["split"] for r in rows] == ["train", "test"]  # CT-RATE's valid set is the paper's test set
    assert rows[1]["image"].endswith("dataset/valid/valid_7/valid_7_b/valid_7_b_1.nii.gz")
    assert rows[1]["report"].startswith("Findings: Emphysema.") and "Impressions: COPD." in rows[1]["report"]
    assert rows[0]["spacing"] == [0.75, 0.8, 2.5] and rows[0]["rescale_intercept"] == -1024.0
    assert not {"PatientAge", "Manufacturer"} & set(rows[0])
    write_csv(tmp_path / "bad.csv", [{"Volume": "x"}])
    with pytest.raises(ManifestError, match=r"bad\.csv: missing column"):
        list(public_datasets.ct_rate(tmp_path, tmp_path / "bad.csv", tmp_path / "meta.csv"))


def test_ct_rate_metadata_errors_name_the_file_and_column(tmp_path):
    (tmp_path / "dataset").mkdir()
    write_csv(tmp_path / "reports.csv", [report_row("train_1_a_1.nii.gz")])
    reports = tmp_path / "reports.csv"
    with pytest.raises(ManifestError, match=r"need the metadata CSV.*--headers-fixed"):
        list(public_datasets.ct_rate(tmp_path, reports))  # none given, none at the published place
    cases = {
        "ZSpacing": ([{k: v for k, v in metadata_row("train_1_a_1.nii.gz").items() if k != "ZSpacing"}], "ZSpacing"),
        "malformed": ([metadata_row("train_1_a_1.nii.gz", xy="[0.75]")], "train_1_a_1.nii.gz: column XYSpacing"),
        "not numbers": ([metadata_row("train_1_a_1.nii.gz", slope="n/a")], "column RescaleSlope"),
        "zero spacing": ([metadata_row("train_1_a_1.nii.gz", z="0")], "spacing .* not positive"),
        "absent": ([metadata_row("train_2_a_1.nii.gz")], "no metadata row for train_1_a_1.nii.gz"),
    }
    for name, (rows, message) in cases.items():
        path = tmp_path / f"{name.replace(' ', '_')}.csv"
        write_csv(path, rows)
        with pytest.raises(ManifestError, match=f"{path.name}.*{message}"):
            list(public_datasets.ct_rate(tmp_path, reports, path))
    assert (
        main(
            [
                "manifest",
                "ct-rate",
                str(tmp_path),
                "--reports",
                str(reports),
                "--out",
                str(tmp_path / "m.jsonl"),
                "--metadata",
                str(tmp_path / "absent.csv"),
            ]
        )
        == 2
    )
    assert not (tmp_path / "m.jsonl").exists() and not (tmp_path / "m.volumes").exists()
    # volumes already rewritten by CT-RATE's fix_metadata.py: read as they are
    assert (
        main(
            [
                "manifest",
                "ct-rate",
                str(tmp_path),
                "--reports",
                str(reports),
                "--headers-fixed",
                "--out",
                str(tmp_path / "m.jsonl"),
            ]
        )
        == 0
    )
    row = read_study_manifest(tmp_path / "m.jsonl")[0]
    assert row["image"].endswith("train_1_a_1.nii.gz") and "spacing" not in row and row["split"] == "train"


def test_ct_rate_metadata_gives_the_volume_in_hu_with_its_true_geometry(tmp_path):
    """A NIfTI as CT-RATE publishes it (raw stored values, a header whose voxel size and directions are
    wrong) read through the manifest's volume file equals the same volume written with the truth."""
    rng = np.random.default_rng(0)
    hu = rng.integers(-1000, 1500, size=(6, 5, 4)).astype(np.float32)  # (i, j, k) = columns, rows, slices
    spacing, origin = (0.75, 0.8, 2.5), (-150.0, -160.0, -300.0)
    stored = ((hu + 1024.0) / 2.0).astype(np.int16)  # RescaleSlope 2, RescaleIntercept -1024
    volume = tmp_path / "ct" / "dataset" / "train" / "train_1" / "train_1_a" / "train_1_a_1.nii.gz"
    volume.parent.mkdir(parents=True)
    nib.save(nib.Nifti1Image(stored, np.diag([1.0, -1.0, 1.0, 1.0])), volume)  # wrong size and direction
    # the truth: LPS directions of ImageOrientationPatient [1,0,0,0,1,0], in RAS; values in HU
    truth_affine = np.diag([-spacing[0], -spacing[1], spacing[2], 1.0])
    truth_affine[:3, 3] = (-origin[0], -origin[1], origin[2])
    nib.save(nib.Nifti1Image(stored * 2.0 - 1024.0, truth_affine), tmp_path / "truth.nii.gz")
    root = tmp_path / "ct"
    write_csv(root / public_datasets.CT_RATE_REPORTS[0], [report_row("train_1_a_1.nii.gz")])
    write_csv(
        root / public_datasets.CT_RATE_METADATA[0],
        [
            metadata_row(
                "train_1_a_1.nii.gz",
                "[0.75, 0.8]",
                "2.5",
                "2",
                "-1024",
                ImageOrientationPatient="[1, 0, 0, 0, 1, 0]",
                ImagePositionPatient="[-150, -160, -300]",
            )
        ],
    )
    out = tmp_path / "work" / "manifest.jsonl"
    assert main(["manifest", "ct-rate", str(root), "--out", str(out)]) == 0  # CSVs from the published layout
    row = read_study_manifest(out)[0]
    assert row["image"].endswith("manifest.volumes/train_1_a_1.volume.json") and row["volume"] == str(volume)
    assert row["split"] == "train" and "PatientAge" not in out.read_text()
    corrected, truth = load_image(row["image"]), read_nifti(tmp_path / "truth.nii.gz")
    np.testing.assert_allclose(corrected.array, truth.array, atol=1e-3)
    np.testing.assert_allclose(corrected.geometry.affine, truth.geometry.affine, atol=1e-6)
    assert corrected.geometry.spacing == pytest.approx((2.5, 0.8, 0.75))  # (D, H, W)
    assert corrected.array.min() >= -1000 and corrected.array.max() < 1500  # HU, not stored values
    # what training and indexing read: the processor (and its tensor cache) on the manifest's image
    recipe = {"chest_ct": {"size": [8, 8, 8], "spacing": [2.0, 1.0, 1.0]}}
    processor = MedReCoImageProcessor(recipes=recipe, tensor_cache_dir=str(tmp_path / "cache"))
    expected = MedReCoImageProcessor(recipes=recipe).preprocess_one(tmp_path / "truth.nii.gz", "chest_ct")
    for _ in range(2):  # cold, then from the cache
        torch.testing.assert_close(processor.preprocess_one(row["image"], "chest_ct"), expected, atol=2e-3, rtol=0)
    # the cache key follows the volume the file names, not only the file
    settings = {"modality": "chest_ct"}
    before = content_digest(row["image"], settings)
    nib.save(nib.Nifti1Image(stored + 1, np.eye(4)), volume)
    assert content_digest(row["image"], settings) != before


def test_volume_files_with_problems_are_refused_naming_them(tmp_path):
    def volume_file(name, **content):
        path = tmp_path / f"{name}.volume.json"
        path.write_text(
            json.dumps({"format": "medreco.volume/1", "image": "x.nii.gz", "spacing": [1, 1, 1], **content})
        )
        return path

    nib.save(nib.Nifti1Image(np.zeros((2, 2, 2), np.int16), np.eye(4)), tmp_path / "x.nii.gz")
    assert load_image(volume_file("fine")).shape == (2, 2, 2)  # the image is relative to the volume file
    (tmp_path / "garbled.volume.json").write_text("{not json")
    problems = {
        tmp_path / "garbled.volume.json": (UnreadableImageError, "not a readable volume file"),
        volume_file("missing", image="absent.nii.gz"): (UnreadableImageError, "does not exist: .*absent.nii.gz"),
        volume_file("zero", spacing=[1, 0, 1]): (InvalidSpacingError, "spacing"),
        volume_file("short", spacing=[1, 1]): (InvalidSpacingError, "spacing"),
        volume_file("slope", rescale_slope=0): (UnreadableImageError, "rescale_slope"),
        volume_file("skew", orientation=[1, 0, 0, 1, 0, 0]): (InvalidSpacingError, "orthogonal"),
        volume_file("other", format="something"): (UnreadableImageError, "not a volume file"),
    }
    for path, (error, message) in problems.items():
        with pytest.raises(error, match=message) as raised:
            load_image(path)
        assert str(path) in str(raised.value)


@pytest.mark.parametrize("dataset", ["mimic-cxr", "ct-rate"])
def test_a_missing_or_empty_dataset_folder_is_refused_and_writes_nothing(tmp_path, capsys, dataset):
    """`medreco manifest` on a wrong path exits 2 with one line naming it (it wrote an empty manifest
    and exited 0)."""
    out = tmp_path / "manifest.jsonl"
    extra = ["--reports", str(tmp_path / "reports.csv")] if dataset == "ct-rate" else []
    for root in (tmp_path / "nonexistent", tmp_path / "empty"):
        (tmp_path / "empty").mkdir(exist_ok=True)
        assert main(["manifest", dataset, str(root), "--out", str(out), *extra]) == 2
        error = capsys.readouterr().err.strip()
        assert str(root) in error and "\n" not in error and not out.exists()
    (tmp_path / "empty" / "files" / "p10" / "p10000001").mkdir(parents=True)  # a MIMIC-CXR tree with no study
    if dataset == "mimic-cxr":
        assert main(["manifest", dataset, str(tmp_path / "empty"), "--out", str(out)]) == 2
        assert "no study" in capsys.readouterr().err and not out.exists()


def test_ms_cxr_t(tmp_path):
    row = {
        "subject_id": "1",
        "study_id": "2",
        "dicom_id": "files/p1/s2/abc.dcm",
        "previous_study_id": "3",
        "previous_dicom_id": "def",
        **{f"{f}_progression": "" for f in public_datasets.MS_CXR_T_FINDINGS},
        **{f"{f}_label_quality": "" for f in public_datasets.MS_CXR_T_FINDINGS},
    }
    row["pleural_effusion_progression"] = "worsening"
    write_csv(tmp_path / "ms.csv", [row])
    item = public_datasets.ms_cxr_t(tmp_path / "ms.csv")[0]
    assert item.dicom_id == "abc" and item.labels == {"pleural_effusion": "worsening"}


def test_mmxu(tmp_path):
    item = {
        "id": 7,
        "content_type": "worsen",
        "question": "How has the effusion changed?",
        "options": {"A": "Improved", "B": "Worsened", "C": "No change", "D": "Resolved"},
        "answer": "B",
        "cur_image_path": "files/p1/s2/a.jpg",
        "prior_image_path": "files/p1/s1/b.jpg",
    }
    (tmp_path / "MMXU-test.jsonl").write_text(json.dumps(item) + "\n")
    question = public_datasets.mmxu(tmp_path / "MMXU-test.jsonl")[0]
    assert question.options[1] == "Worsened" and question.answer == "B" and question.content_type == "worsen"
    (tmp_path / "bad.jsonl").write_text('{"id": 1}\n')
    with pytest.raises(ManifestError, match="line 1"):
        public_datasets.mmxu(tmp_path / "bad.jsonl")


def test_medical_diff_vqa(tmp_path):
    write_csv(
        tmp_path / "q.csv",
        [
            {
                "study_id": "5",
                "subject_id": "1",
                "ref_id": "4",
                "question_type": "difference",
                "question": "what has changed compared to the reference image?",
                "answer": "nothing has changed.",
                "split": "test",
            },
            {
                "study_id": "5",
                "subject_id": "1",
                "ref_id": "4",
                "question_type": "presence",
                "question": "is there effusion?",
                "answer": "no",
                "split": "test",
            },
        ],
    )
    questions = public_datasets.medical_diff_vqa(tmp_path / "q.csv", split="test")
    assert len(questions) == 1 and questions[0].reference_study_id == "4"


def test_cxr_align(tmp_path):
    data = {
        "mimic": {"c1": {"chosen": "effusion", "report": "Small effusion.", "negation": "No effusion.", "omitted": ""}}
    }
    (tmp_path / "cxr-align.json").write_text(json.dumps(data))
    case = public_datasets.cxr_align(tmp_path / "cxr-align.json")[0]
    assert case.entity == "effusion" and case.negated == "No effusion."
    with pytest.raises(ManifestError, match="'chexpert'"):
        public_datasets.cxr_align(tmp_path / "cxr-align.json", source="chexpert")
