"""Public paired-image evaluation sets (MMXU, MS-CXR-T, Medical-Diff-VQA) on a saved VLM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medreco.data.mining import MinedData
from medreco.evaluation.metrics import text_scores
from medreco.evaluation.text import entity_f1
from medreco.training.stage2 import Stage2Trainer
from toy_training import stage2_config


def test_public_evaluation_sets_run_on_a_saved_vlm(stage1_run, toy, tmp_path, capsys):
    """MMXU, MS-CXR-T and Medical-Diff-VQA files in their published formats, with images in the
    MIMIC-CXR-JPG layout, scored by `run_public_set` and `medreco evaluate-public`."""
    import shutil

    from medreco.cli import main
    from medreco.evaluation import PublicSetDataError, run_public_set

    _, out, _, _ = stage1_run
    Stage2Trainer(stage2_config(toy, out / "final", tmp_path / "vlm", "optimization.max_steps=2")).train()
    model = tmp_path / "vlm" / "final"
    data = MinedData(toy)
    root = tmp_path / "mimic"
    for i, study in enumerate(sorted(data.studies)[:4]):
        folder = root / "files" / "p10" / "p10000001" / f"s5000000{i}"
        folder.mkdir(parents=True)
        shutil.copy(data.studies[study].image, folder / f"dicom{i}.png")

    def write_mmxu(answers: list[str]) -> Path:
        path = tmp_path / "mmxu.jsonl"
        lines = [
            {
                "id": i,
                "question": "Has the effusion changed?",
                "options": {"A": "Larger", "B": "Smaller", "C": "Unchanged", "D": "Resolved"},
                "answer": answer,
                "cur_image_path": f"files/p10/p10000001/s5000000{i % 4}/dicom{i % 4}.png",
                "prior_image_path": f"files/p10/p10000001/s5000000{(i + 1) % 4}/dicom{(i + 1) % 4}.png",
                "content_type": "size" if i % 2 else "presence",
            }
            for i, answer in enumerate(answers)
        ]
        path.write_text("\n".join(json.dumps(line) for line in lines))
        return path

    first = run_public_set("mmxu", model, write_mmxu(["A"] * 6), root, progress=False)
    assert first["questions"] == 6 and sum(v["questions"] for v in first["by_content_type"].values()) == 6
    predicted = [p["predicted"] for p in first["predictions"]]
    assert set(predicted) <= set("ABCD")
    assert first["accuracy"] == pytest.approx(predicted.count("A") / 6)
    # Scoring follows the answer key: the model's own answers score 1, any other letter scores 0.
    assert run_public_set("mmxu", model, write_mmxu(predicted), root, progress=False)["accuracy"] == 1.0
    other = ["B" if p == "A" else "A" for p in predicted]
    assert run_public_set("mmxu", model, write_mmxu(other), root, progress=False)["accuracy"] == 0.0

    header = "subject_id,study_id,dicom_id,previous_study_id,previous_dicom_id,"
    header += ",".join(f"{f}_progression" for f in ("consolidation", "edema", "pleural_effusion", "pneumonia"))
    csv = tmp_path / "ms_cxr_t.csv"
    csv.write_text(
        f"{header}\n10000001,50000001,dicom1,50000000,dicom0,stable,,worsening,\n10000001,50000003,dicom3,50000002,dicom2,,improving,,stable\n"
    )
    progression = run_public_set("ms-cxr-t", model, csv, root, progress=False)
    matrix = progression["confusion"]["matrix"]
    assert progression["questions"] == 4 and sum(map(sum, matrix)) == 4
    assert sorted(progression["by_finding"]) == ["consolidation", "edema", "pleural_effusion", "pneumonia"]
    assert progression["accuracy"] == pytest.approx(sum(matrix[i][i] for i in range(3)) / 4)
    findings = progression["by_finding"].values()
    assert progression["mean_finding_accuracy"] == pytest.approx(sum(f["accuracy"] for f in findings) / 4)
    # one question per finding: the class-balanced accuracy of each equals its plain accuracy
    assert progression["macro_accuracy"] == pytest.approx(progression["mean_finding_accuracy"])
    csv.write_text(f"{header}\n10000001,50000001,dicom1,50000000,dicom9,stable,,,\n")
    with pytest.raises(PublicSetDataError, match="dicom9"):
        run_public_set("ms-cxr-t", model, csv, root, progress=False)

    pairs = tmp_path / "mimic_pair_questions.csv"
    question = "what has changed compared to the reference image?"
    pairs.write_text(
        "study_id,subject_id,ref_id,question_type,question,answer,split\n"
        f"50000001,10000001,50000000,difference,{question},the main image has an additional pleural effusion.,test\n"
        f"50000003,10000001,50000002,difference,{question},nothing has changed.,test\n"
        "50000003,10000001,50000002,abnormality,what abnormalities are seen in this image?,pleural effusion,test\n"
        f"50000002,10000001,50000001,difference,{question},nothing has changed.,train\n"
    )
    assert main(["evaluate-public", "medical-diff-vqa", "--model", str(model), "--data", str(pairs),
                 "--images", str(root), "--out", str(tmp_path / "diff.json"), "--quiet"]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "medical-diff-vqa (n=2): bleu" in printed and "BLEU: sacreBLEU nrefs:1|case:lc" in printed
    difference = json.loads((tmp_path / "diff.json").read_text())
    scores = difference["scores"]
    assert set(difference["unavailable_metrics"]) | (set(scores) & {"ratescore", "radgraph"}) == {
        "ratescore",
        "radgraph",
    }
    # the scores are the standard implementations' of the answers it saved, against the references
    answers = [e["answer"] for e in difference["examples"]]
    references = [e["reference"] for e in difference["examples"]]
    assert scores["questions"] == 2 and references == ["the main image has an additional pleural effusion.",
                                                       "nothing has changed."]  # fmt: skip
    expected = text_scores(answers, references)
    assert difference["bleu_signature"] == expected.pop("bleu_signature")
    assert {k: scores[k] for k in expected} == expected
    assert scores["entity_f1"] == entity_f1(answers, references, ["chest_xray"] * 2)["f1"]

    (root / "files" / "p10" / "p10000001" / "s50000000" / "dicom0.png").unlink()
    with pytest.raises(PublicSetDataError, match=r"dicom0\.png"):
        run_public_set("mmxu", model, write_mmxu(["A"]), root, progress=False)
