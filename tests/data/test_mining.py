import json
from pathlib import Path

import datasets
import pytest

from medreco.cli import main
from medreco.data.mining import ManifestError, MiningConfig, decompose_all, mine, read_study_manifest
from medreco.data.phantom import PhantomConfig, generate_cohort

THRESHOLDS = dict(
    positive_threshold={"embedding": 0.8, "agreement": 0.99},
    negative_threshold={"embedding": 0.75, "agreement": 0.01},
    split_fractions={"train": 0.5, "validation": 0.0, "test": 0.5},
)


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    out = tmp_path_factory.mktemp("mine")
    generate_cohort(PhantomConfig(num_patients=14, size="tiny", seed=1), out, progress=False)
    return out


def test_mine_writes_datasets_without_leakage_and_resumes(cohort, tmp_path):
    summary = mine(cohort / "manifest.jsonl", tmp_path, MiningConfig(**THRESHOLDS), progress=False)
    assert summary["decomposed_now"] == summary["studies"] == 56
    assert summary["triplets"] > 0 and summary["longitudinal"] > 0 and summary["vqa"] > 0
    studies = datasets.load_from_disk(str(tmp_path / "studies"))
    split = dict(zip(studies["study_id"], studies["split"]))
    patient = dict(zip(studies["study_id"], studies["patient_id"]))
    assert all(split[s] == split[next(x for x in split if patient[x] == patient[s])] for s in split)
    for triplet in datasets.load_from_disk(str(tmp_path / "triplets")):
        assert split[triplet["anchor"]] == split[triplet["positive"]] == split[triplet["negative"]] == triplet["split"]
    for pair in datasets.load_from_disk(str(tmp_path / "longitudinal")):
        assert patient[pair["prior"]] == patient[pair["current"]] and pair["label"] != "unable to compare"
    for question in datasets.load_from_disk(str(tmp_path / "vqa")):
        assert split[question["study_a"]] == split[question["study_b"]]
        assert len(question["options"]) == 4 and question["answer"] in "ABCD"
    for query in datasets.load_from_disk(str(tmp_path / "retrieval")):
        assert split[query["query"]] == query["split"] and set(query["relevant"]) <= set(query["gallery"])
        assert all(split[s] == query["split"] and patient[s] != patient[query["query"]] for s in query["gallery"])
    again = mine(cohort / "manifest.jsonl", tmp_path, MiningConfig(**THRESHOLDS), progress=False)
    assert again["decomposed_now"] == 0 and {k: v for k, v in again.items() if k != "decomposed_now"} == {
        k: v for k, v in summary.items() if k != "decomposed_now"
    }


def test_mined_tables_find_their_images_from_any_directory_and_after_a_move(cohort, tmp_path, monkeypatch):
    import shutil

    from medreco.data.mining import MinedData
    from medreco.errors import TrainingDataError

    project = tmp_path / "project"
    shutil.copytree(cohort, project / "cohort")
    monkeypatch.chdir(project)  # mined with a relative manifest path, as `medreco demo` does
    mine(Path("cohort/manifest.jsonl"), Path("mined"), MiningConfig(**THRESHOLDS), progress=False)
    stored = datasets.load_from_disk("mined/studies")["image"]
    assert all(image.startswith("../cohort/") for image in stored)  # relative to the mined folder
    for where in (project, tmp_path, project / "mined"):
        monkeypatch.chdir(where)
        data = MinedData(project / "mined")
        assert len(data.studies) == 56 and all(Path(s.image).exists() for s in data.studies.values())
    moved = shutil.move(project, tmp_path / "elsewhere")
    assert len(MinedData(Path(moved) / "mined").studies) == 56
    shutil.rmtree(Path(moved) / "cohort")
    with pytest.raises(TrainingDataError, match="not found"):
        MinedData(Path(moved) / "mined")
    # an archive outside the mined folder's parent keeps absolute paths: moving the run leaves it found
    mine(cohort / "manifest.jsonl", tmp_path / "runs" / "a" / "mined", MiningConfig(**THRESHOLDS), progress=False)
    assert all(
        Path(image).is_absolute() for image in datasets.load_from_disk(str(tmp_path / "runs/a/mined/studies"))["image"]
    )
    shutil.move(tmp_path / "runs" / "a", tmp_path / "b")
    assert len(MinedData(tmp_path / "b" / "mined").studies) == 56


def test_external_cohorts_never_reach_training(cohort, tmp_path):
    rows = [json.loads(line) for line in (cohort / "manifest.jsonl").read_text().splitlines()]
    for row in rows:
        row["source"] = "hospital-b" if row["patient_id"] in ("P0001", "P0002", "P0003", "P0004") else "hospital-a"
        row["image"] = str(cohort / row["image"])
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = MiningConfig(**THRESHOLDS, external_sources=("hospital-b",))
    mine(tmp_path / "m.jsonl", tmp_path / "out", config, progress=False)
    studies = datasets.load_from_disk(str(tmp_path / "out" / "studies"))
    split = dict(zip(studies["study_id"], studies["split"]))
    assert {s for s, p in zip(studies["study_id"], studies["patient_id"]) if p in ("P0001", "P0004")} <= {
        s for s, v in split.items() if v == "external"
    }
    for triplet in datasets.load_from_disk(str(tmp_path / "out" / "triplets")):
        if triplet["split"] == "train":
            assert all(split[triplet[k]] == "train" for k in ("anchor", "positive", "negative"))


def test_parallel_decomposition_matches_serial(cohort, tmp_path):
    rows = read_study_manifest(cohort / "manifest.jsonl")[:12]
    serial, _ = decompose_all(rows, tmp_path / "a.jsonl", workers=1, progress=False)
    parallel, _ = decompose_all(rows, tmp_path / "b.jsonl", workers=2, progress=False)
    assert serial == parallel


def test_parallel_mining_from_an_unguarded_script_says_how_to_fix_it(cohort, tmp_path):
    import subprocess
    import sys

    script = tmp_path / "unguarded.py"
    script.write_text(
        "from pathlib import Path\n"
        "from medreco.data.mining import decompose_all, read_study_manifest\n"
        f"rows = read_study_manifest(Path({str(cohort / 'manifest.jsonl')!r}))[:40]\n"
        f"decompose_all(rows, Path({str(tmp_path / 'cache.jsonl')!r}), workers=2, progress=False)\n"
    )
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("medreco.data.mining.pipeline.MiningWorkerError") and "if __name__ == '__main__':" in last


def test_interrupted_cache_line_is_ignored(cohort, tmp_path):
    rows = read_study_manifest(cohort / "manifest.jsonl")[:4]
    decompose_all(rows, tmp_path / "c.jsonl", progress=False)
    text = (tmp_path / "c.jsonl").read_text().splitlines()
    (tmp_path / "c.jsonl").write_text("\n".join(text[:-1]) + "\n" + text[-1][:20])  # a half-written last line
    done, computed = decompose_all(rows, tmp_path / "c.jsonl", progress=False)
    assert computed == 1 and len(done) == 4


def test_bad_manifests(tmp_path):
    (tmp_path / "m.csv").write_text("image,report,patient_id\na.dcm,No effusion.,P1\n")
    with pytest.raises(ManifestError, match=r"m\.csv: row 1 lacks modality"):
        read_study_manifest(tmp_path / "m.csv")
    with pytest.raises(ManifestError, match="no such manifest"):
        read_study_manifest(tmp_path / "absent.jsonl")
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    assert main(["mine", str(tmp_path / "bad.jsonl"), "--out", str(tmp_path / "o"), "--quiet"]) == 2


def test_mine_command(cohort, tmp_path, capsys):
    args = [
        "mine",
        str(cohort / "manifest.jsonl"),
        "--out",
        str(tmp_path),
        "--quiet",
        "--positive-threshold",
        "embedding=0.8,agreement=0.99",
        "--negative-threshold",
        "embedding=0.75,agreement=0.01",
    ]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["studies"] == 56 and (tmp_path / "summary.json").exists()
    # agreement alone (the demo's relevance): paraphrased statements of one fact become positives
    agreement = [*args[:3], str(tmp_path / "agreement"), "--quiet", "--metrics", "agreement"]
    agreement += ["--positive-threshold", "0.99", "--negative-threshold", "0.01"]
    assert main(agreement) == 0
    alone = json.loads(capsys.readouterr().out)
    assert alone["studies"] == 56 and alone["vqa"] == summary["vqa"]
    positives = {
        name: sum(len(r["relevant"]) for r in datasets.load_from_disk(str(folder / "retrieval")))
        for name, folder in (("both", tmp_path), ("agreement", tmp_path / "agreement"))
    }
    assert positives["agreement"] > positives["both"]
    assert main([*agreement[:-6], "--metrics", "bleu"]) == 2


def test_anatomy_level_mining_gives_anatomy_retrieval_queries(cohort, tmp_path):
    """The demo mines findings only; `levels` adds anatomy, which the evaluation reports as its own level."""
    from medreco.evaluation.retrieval import entity_level

    config = MiningConfig(**THRESHOLDS, levels=("anatomy", "abnormal"))
    mine(cohort / "manifest.jsonl", tmp_path, config, progress=False)
    levels = {entity_level(row["entity_id"]) for row in datasets.load_from_disk(str(tmp_path / "retrieval"))}
    assert {"anatomy", "abnormality"} <= levels
    with pytest.raises(ValueError, match="findings"):
        MiningConfig(levels=("anatomy", "findings"))


def test_vqa_pairs_are_drawn_at_random_with_no_patient_dominating(cohort, tmp_path):
    """A budget below the number of pairs: the old sampling took the first combinations in sorted
    order, so the first study sat on one side of every question of its group (12 of 12 here)."""
    import math
    from collections import Counter, defaultdict

    budget = 12
    mine(cohort / "manifest.jsonl", tmp_path, MiningConfig(**THRESHOLDS, vqa_pairs_per_group=budget), progress=False)
    studies = {s["study_id"]: s for s in datasets.load_from_disk(str(tmp_path / "studies")).to_list()}
    questions = datasets.load_from_disk(str(tmp_path / "vqa")).to_list()
    groups = defaultdict(set)  # (modality, split) -> the pairs asked about
    for q in questions:
        first = studies[q["study_a"]]
        groups[(first["modality"], first["split"])].add(tuple(sorted((q["study_a"], q["study_b"]))))  # swaps too
    assert len(groups) == 4  # two modalities, two splits
    for key, pairs in groups.items():
        patients = {s["patient_id"] for s in studies.values() if (s["modality"], s["split"]) == key}
        sides = Counter(studies[study]["patient_id"] for pair in pairs for study in pair)
        assert max(sides.values()) <= math.ceil(2 * budget / len(patients)) + 1, (key, sides)
    answers = defaultdict(set)  # one reference answer per (pair, open question)
    for q in questions:
        answers[(q["study_a"], q["study_b"], q["open_question"])].add(q["open_answer"])
    assert all(len(found) == 1 for found in answers.values())


def test_the_language_prior_filter_judges_only_the_splits_asked_for(cohort, tmp_path):
    """By default no question is filtered. Filtering the training split leaves the test split alone
    (a text-only model never deletes a test question) and keeps the removed questions apart."""
    from medreco.data.mining import MinedData

    summary = mine(
        cohort / "manifest.jsonl",
        tmp_path,
        MiningConfig(**THRESHOLDS, language_prior_splits=("train",)),
        progress=False,
    )
    data = MinedData(tmp_path)
    removed = data.rows("vqa_removed")
    assert removed and {r["split"] for r in removed} == {"train"}
    assert summary["vqa_removed"] == len(removed) and summary["vqa_language_prior_splits"] == ["train"]
    prior = summary["vqa_filters"]["language_prior"]
    assert prior["removed"] == len(removed) and prior["reached"] == len(removed) + len(data.rows("vqa", "train"))
    # by default every question the earlier filters passed is in the table, in every split
    everything = mine(cohort / "manifest.jsonl", tmp_path / "all", MiningConfig(**THRESHOLDS), progress=False)
    assert everything["vqa_removed"] == 0 and everything["vqa_language_prior_splits"] == []
    unfiltered = MinedData(tmp_path / "all")
    assert len(data.rows("vqa", "test")) == len(unfiltered.rows("vqa", "test"))
    assert len(unfiltered.rows("vqa", "train")) == len(data.rows("vqa", "train")) + len(removed)


def test_manifest_modality_aliases_become_canonical_names(tmp_path):
    """CXR, DICOM codes (CR, DX, MR, US) and spelled-out names are mapped; CT names no body part."""
    aliases = {
        "P1": ("cxr", "chest_xray"),
        "P2": ("DX", "chest_xray"),
        "P3": ("Chest X-Ray", "chest_xray"),
        "P4": ("CR", "chest_xray"),
        "P5": ("MR", "brain_mri"),
        "P6": ("us", "ultrasound"),
        "P7": ("Chest CT", "chest_ct"),
    }
    lines = ["image,report,patient_id,modality"]
    lines += [
        f"{patient}.dcm,FINDINGS: Small left pleural effusion.,{patient},{alias}"
        for patient, (alias, _) in aliases.items()
    ]
    (tmp_path / "m.csv").write_text("\n".join(lines) + "\n")
    config = MiningConfig(metrics=("agreement",), split_fractions={"train": 1.0, "validation": 0.0, "test": 0.0})
    mine(tmp_path / "m.csv", tmp_path / "out", config, progress=False)
    studies = datasets.load_from_disk(str(tmp_path / "out" / "studies"))
    assert dict(zip(studies["patient_id"], studies["modality"])) == {p: c for p, (_, c) in aliases.items()}

    (tmp_path / "ct.csv").write_text(lines[0] + "\n" + lines[1] + "\na.dcm,No effusion.,P9,CT\n")
    with pytest.raises(ManifestError, match=r"ct\.csv: row 2: modality 'CT' is ambiguous.*chest_ct or abdominal_ct"):
        read_study_manifest(tmp_path / "ct.csv")
    (tmp_path / "pet.jsonl").write_text(json.dumps({"image": "a", "report": "r", "patient_id": "P", "modality": "PET"}))
    with pytest.raises(
        ManifestError, match=r"pet\.jsonl: row 1: unknown modality 'PET'; allowed: chest_xray.*ultrasound"
    ):
        read_study_manifest(tmp_path / "pet.jsonl")
