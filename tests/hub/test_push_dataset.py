"""`medreco push` on a mined folder: a dataset repository with one configuration per table, split
by patient, pseudonymised, report text only when asked for; loaded back with `datasets` through the
real client against the stand-in Hub (hub_standin.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import datasets
import pytest
from hub_standin import StandInHub, run_client

from medreco.data.mining import SHARED_COLUMNS, push_mined_dataset, shareable_tables

LOAD = """
import datasets
from huggingface_hub import DatasetCard, hf_hub_download

tables = {}
for table in ARGS["tables"]:
    loaded = datasets.load_dataset(ARGS["repo"], table, revision=ARGS["revision"])
    tables[table] = {split: loaded[split].to_list() for split in loaded}
readme = hf_hub_download(ARGS["repo"], "README.md", repo_type="dataset", revision=ARGS["revision"])
card = DatasetCard.load(readme).data.to_dict()
print(json.dumps({"tables": tables, "card": card}))
"""


def strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def with_longitudinal_table(toy: Path, folder: Path) -> Path:
    """The toy mined folder plus a longitudinal table (patient ids of its own) with a validation split."""
    shutil.copytree(toy, folder)
    studies = datasets.load_from_disk(str(toy / "studies")).to_list()
    rows = [
        {
            "prior": a["study_id"],
            "current": b["study_id"],
            "patient_id": a["patient_id"],
            "entity_id": "cxr/abnormal/pleural-effusion@pleura",
            "label": "new",
            "attribute": "presence",
            "split": "validation" if i % 3 == 0 else a["split"],
        }
        for i, (a, b) in enumerate(zip(studies[::2], studies[1::2]))
    ]
    datasets.Dataset.from_list(rows).save_to_disk(str(folder / "longitudinal"))
    return folder


def test_a_mined_folder_goes_up_pseudonymised_by_table_and_split_and_loads_with_datasets(toy, tmp_path):
    toy = with_longitudinal_table(toy, tmp_path / "mined")
    studies = datasets.load_from_disk(str(toy / "studies")).to_list()
    secrets = {s["patient_id"] for s in studies} | {s["study_id"] for s in studies} | {s["image"] for s in studies}
    reports = {s["report"] for s in studies}
    pseudonyms = tmp_path / "kept-home.json"
    with StandInHub(tmp_path / "hub") as hub:
        code = """
            from medreco.cli import main
            print(json.dumps({"code": main(["push", ARGS["toy"], "--repo-id", "lab/toy-mined", "--revision", "v1",
                                            "--pseudonyms", ARGS["pseudonyms"], "--private"])}))
            """
        assert run_client(hub, tmp_path / "home", code, toy=str(toy), pseudonyms=str(pseudonyms))["code"] == 0
        tables = ["studies", "triplets", "retrieval", "longitudinal", "vqa"]
        loaded = run_client(hub, tmp_path / "home", LOAD, repo="lab/toy-mined", revision="v1", tables=tables)
        assert hub.private("lab/toy-mined", repo_type="dataset")
        uploaded = hub.files("lab/toy-mined", revision="v1", repo_type="dataset")
    expected = {"README.md", *(f"{t}/{s}.parquet" for t in tables for s in loaded["tables"][t])}
    assert set(uploaded) - {".gitattributes"} == expected  # the Hub makes .gitattributes itself
    for table in tables:
        original = datasets.load_from_disk(str(toy / table)).to_list()
        shared = loaded["tables"][table]
        assert {split: len(rows) for split, rows in shared.items()} == {
            split: sum(row["split"] == split for row in original) for split in {row["split"] for row in original}
        }
        assert all(set(row) <= set(SHARED_COLUMNS[table]) for rows in shared.values() for row in rows)
    assert set(loaded["tables"]["longitudinal"]) == {"train", "validation", "test"}
    assert all(
        row["patient_id"].startswith("patient-") for rows in loaded["tables"]["longitudinal"].values() for row in rows
    )
    readme = uploaded["README.md"].decode()
    assert 'load_dataset("lab/toy-mined", "vqa")' in readme
    every_value = set(strings(loaded)) | {data.decode("latin-1") for data in uploaded.values()}
    assert not any(secret in value for secret in secrets for value in every_value)  # ids and paths stayed home
    assert not any(report in value for report in reports for value in every_value)
    assert not any(
        "sentences" in json.loads(row["statements"]).get(e, {})
        for row in loaded["tables"]["studies"]["train"]
        for e in json.loads(row["statements"])
    )
    mapping = json.loads(pseudonyms.read_text())
    assert pseudonyms.stat().st_mode & 0o077 == 0  # the link back to the archive: owner-only
    back = {pseudonym: original for original, pseudonym in mapping["studies"].items()}
    original_vqa = {
        (r["study_a"], r["study_b"], r["entity_id"]) for r in datasets.load_from_disk(str(toy / "vqa")).to_list()
    }
    shared_vqa = {
        (back[r["study_a"]], back[r["study_b"]], r["entity_id"])
        for rows in loaded["tables"]["vqa"].values()
        for r in rows
    }
    assert shared_vqa == original_vqa  # the pseudonyms are consistent across tables and map back
    configs = {c["config_name"]: c for c in loaded["card"]["configs"]}
    assert set(configs) == set(tables) and loaded["card"]["license"] == "other"


def test_reports_go_up_only_when_asked_and_a_model_folder_refuses_dataset_options(toy, tmp_path, capsys):
    from medreco.cli import main

    without = shareable_tables(toy)
    with_reports = shareable_tables(toy, include_reports=True)
    assert "report" not in without.tables["studies"]["train"][0]
    assert with_reports.tables["studies"]["train"][0]["report"]
    assert "sentences" in json.loads(with_reports.tables["studies"]["train"][0]["statements"]).popitem()[1]
    assert set(without.studies.values()) == {f"study-{i:04d}" for i in range(1, len(without.studies) + 1)}
    assert without.studies != with_reports.studies or len(without.studies) < 3  # a new secret order each time
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    assert main(["push", str(tmp_path / "model"), "--repo-id", "a/b", "--include-reports"]) == 2
    assert "are for mined folders" in capsys.readouterr().err
    with pytest.raises(ValueError, match="not a mined folder"):
        shareable_tables(tmp_path / "model")
    kept = tmp_path / "kept.json"
    kept.write_text(json.dumps({"repo_id": "lab/first", "revision": "main", "patients": {}, "studies": {}}))
    with pytest.raises(ValueError, match="holds the pseudonyms of lab/first@main"):
        push_mined_dataset(toy, "lab/second", kept)  # refused before anything is read or sent
    assert json.loads(kept.read_text())["repo_id"] == "lab/first"


def test_a_folder_whose_mining_did_not_finish_is_never_pushed(toy, tmp_path):
    import shutil

    from medreco.data.mining.sharing import shareable_tables
    from medreco.errors import TrainingDataError

    unfinished = tmp_path / "mined"
    shutil.copytree(toy, unfinished)
    (unfinished / "summary.json").unlink()  # what a kill between the table swaps leaves
    with pytest.raises(TrainingDataError, match="mining did not finish"):
        shareable_tables(unfinished)
