"""Each adapter on small files written here in the dataset's real layout (see shared notes on formats)."""

import csv
import json

import pytest

from medreco.cli import main
from medreco.data import adapters
from medreco.data.mining import ManifestError, read_study_manifest


def write_csv(path, rows):
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
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
    rows = list(adapters.mimic_cxr(tmp_path, tmp_path / "meta.csv"))
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


def test_ct_rate_layout(tmp_path):
    write_csv(
        tmp_path / "reports.csv",
        [
            {
                "VolumeName": "train_1_a_1.nii.gz",
                "ClinicalInformation_EN": "",
                "Technique_EN": "",
                "Findings_EN": "No effusion.",
                "Impressions_EN": "Normal.",
            },
            {
                "VolumeName": "train_1_a_2.nii.gz",
                "ClinicalInformation_EN": "",
                "Technique_EN": "",
                "Findings_EN": "No effusion.",
                "Impressions_EN": "Normal.",
            },
            {
                "VolumeName": "valid_7_b_1.nii.gz",
                "ClinicalInformation_EN": "",
                "Technique_EN": "",
                "Findings_EN": "Emphysema.",
                "Impressions_EN": "COPD.",
            },
        ],
    )
    (tmp_path / "dataset").mkdir()  # CT-RATE's volumes folder
    rows = list(adapters.ct_rate(tmp_path, tmp_path / "reports.csv"))
    assert [r["study_id"] for r in rows] == ["train_1_a", "valid_7_b"]  # one reconstruction per scan
    assert rows[1]["image"].endswith("dataset/valid/valid_7/valid_7_b/valid_7_b_1.nii.gz")
    assert rows[1]["report"].startswith("Findings: Emphysema.") and "Impressions: COPD." in rows[1]["report"]
    write_csv(tmp_path / "bad.csv", [{"Volume": "x"}])
    with pytest.raises(ManifestError, match="missing column"):
        list(adapters.ct_rate(tmp_path, tmp_path / "bad.csv"))


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
        **{f"{f}_progression": "" for f in adapters.MS_CXR_T_FINDINGS},
        **{f"{f}_label_quality": "" for f in adapters.MS_CXR_T_FINDINGS},
    }
    row["pleural_effusion_progression"] = "worsening"
    write_csv(tmp_path / "ms.csv", [row])
    item = adapters.ms_cxr_t(tmp_path / "ms.csv")[0]
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
    question = adapters.mmxu(tmp_path / "MMXU-test.jsonl")[0]
    assert question.options[1] == "Worsened" and question.answer == "B" and question.content_type == "worsen"
    (tmp_path / "bad.jsonl").write_text('{"id": 1}\n')
    with pytest.raises(ManifestError, match="line 1"):
        adapters.mmxu(tmp_path / "bad.jsonl")


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
    questions = adapters.medical_diff_vqa(tmp_path / "q.csv", split="test")
    assert len(questions) == 1 and questions[0].reference_study_id == "4"


def test_cxr_align(tmp_path):
    data = {
        "mimic": {"c1": {"chosen": "effusion", "report": "Small effusion.", "negation": "No effusion.", "omitted": ""}}
    }
    (tmp_path / "cxr-align.json").write_text(json.dumps(data))
    case = adapters.cxr_align(tmp_path / "cxr-align.json")[0]
    assert case.entity == "effusion" and case.negated == "No effusion."
    with pytest.raises(ManifestError, match="'chexpert'"):
        adapters.cxr_align(tmp_path / "cxr-align.json", source="chexpert")
