"""Scale-out mining: `medreco mine --shard I/N` on each machine, then `medreco mine merge`, gives
the tables of one `medreco mine` run; every set of shards that could not give them is refused."""

import json
from collections import defaultdict

import datasets
import pytest

from medreco.cli import main
from medreco.data.mining import MINED_TABLES, Shard, ShardError
from medreco.data.mining.mined import has_rows
from medreco.data.mining.shards import INDEX_VARIABLES
from medreco.data.phantom import PhantomConfig, generate_cohort

# the demo's relevance (agreement alone): the global steps in full, without the embedding model's time
SETTINGS = ["--quiet", "--metrics", "agreement", "--positive-threshold", "0.99", "--negative-threshold", "0.01"]


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    out = tmp_path_factory.mktemp("shards")
    generate_cohort(PhantomConfig(num_patients=14, size="tiny", seed=1), out, progress=False)
    return out


def _rows(folder, table: str) -> list[dict]:
    return datasets.load_from_disk(str(folder / table)).to_list() if has_rows(folder / table) else []


def _summary(folder) -> dict:
    return json.loads((folder / "summary.json").read_text())


def test_sharded_mining_equals_a_single_run(cohort, tmp_path, monkeypatch):
    manifest = str(cohort / "manifest.jsonl")
    assert main(["mine", manifest, "--out", str(tmp_path / "single"), *SETTINGS]) == 0
    shards = str(tmp_path / "shards")
    for name in (*INDEX_VARIABLES, "SLURM_ARRAY_TASK_COUNT"):
        monkeypatch.delenv(name, raising=False)
    assert main(["mine", manifest, "--out", shards, "--shard", "0/3", *SETTINGS]) == 0
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")  # a SLURM job array (--array=0-2)
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "3")
    assert main(["mine", manifest, "--out", shards, "--shard", "auto", *SETTINGS]) == 0
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID")
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "2")  # a Kubernetes indexed job
    assert main(["mine", manifest, "--out", shards, "--shard", "auto/3", *SETTINGS]) == 0

    # every study in exactly one shard; a patient's studies spread over shards
    shard_of, patient_shards = {}, defaultdict(set)
    patients = {r["study_id"]: r["patient_id"] for r in map(json.loads, (cohort / "manifest.jsonl").open())}
    for index in range(3):
        folder = tmp_path / "shards" / f"shard-{index:04d}-of-0003"
        record = json.loads((folder / "shard.json").read_text())
        assert (record["shard"], record["shards"]) == (index, 3) and record["studies"] > 0
        for line in (folder / "cache" / "decompositions.jsonl").read_text().splitlines():
            study = json.loads(line)["study_id"]
            assert study not in shard_of
            shard_of[study] = index
            patient_shards[patients[study]].add(index)
    assert set(shard_of) == set(patients) and max(map(len, patient_shards.values())) > 1

    assert main(["mine", "merge", "--out", str(tmp_path / "merged"), shards, "--quiet"]) == 0
    single, merged = tmp_path / "single", tmp_path / "merged"
    assert all(_rows(single, table) for table in ("triplets", "retrieval", "longitudinal", "vqa"))
    for table in MINED_TABLES:
        assert _rows(single, table) == _rows(merged, table), table
    expected = {k: v for k, v in _summary(single).items() if k not in ("decomposed_now", "tables")}
    assert {k: v for k, v in _summary(merged).items() if k not in ("decomposed_now", "tables", "merged_shards")} == (
        expected
    )
    # the merged folder is a finished run: mining there again decomposes nothing
    assert main(["mine", manifest, "--out", str(merged), *SETTINGS]) == 0
    assert _summary(merged)["decomposed_now"] == 0 and _rows(merged, "vqa") == _rows(single, "vqa")


def _fails(capsys, argv: list[str], message: str) -> None:
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1 and "Traceback" not in error, error


def test_incomplete_or_mismatched_shards_are_refused(tmp_path, capsys, monkeypatch):
    lines = ["image,report,patient_id,modality"]
    lines += [
        f"s{i}.png,FINDINGS: {'Small' if i % 2 else 'No'} pleural effusion.,P{i // 2},chest_xray" for i in range(8)
    ]
    manifest = tmp_path / "m.csv"
    manifest.write_text("\n".join(lines) + "\n")
    fast = ["--quiet", "--metrics", "agreement"]
    shards = tmp_path / "shards"

    def shard(spec: str, out=shards, source=manifest, *extra) -> list[str]:
        return ["mine", str(source), "--out", str(out), "--shard", spec, *fast, *extra]

    for name in (*INDEX_VARIABLES, "SLURM_ARRAY_TASK_COUNT"):
        monkeypatch.delenv(name, raising=False)
    _fails(capsys, shard("2/2"), "the index runs from 0 to 1")
    _fails(capsys, shard("one/2"), "expected I/N")
    _fails(capsys, shard("auto/2"), "neither SLURM_ARRAY_TASK_ID nor JOB_COMPLETION_INDEX is set")
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "0")
    _fails(capsys, shard("auto"), "SLURM_ARRAY_TASK_COUNT is not set")
    assert main(shard("auto/2")) == 0
    capsys.readouterr()

    merged = ["mine", "merge", "--out", str(tmp_path / "merged"), "--quiet"]
    _fails(capsys, [*merged, str(shards)], "shard 1 of 2 missing")
    _fails(capsys, merged, "needs the shard folders")
    _fails(capsys, [*merged, str(shards), "--levels", "disease"], "takes its settings from the shards; drop --levels")
    _fails(capsys, [*merged, str(tmp_path / "nowhere")], "no such shard folder")
    first = shards / "shard-0000-of-0002"
    _fails(capsys, [*merged, str(first), str(first)], "shard 0/2 given twice")

    (shards / "shard-0001-of-0002").mkdir()  # a shard that was killed before it finished
    _fails(capsys, [*merged, str(shards)], "shard-0001-of-0002: this shard did not finish")
    assert main(shard("1/2", shards, manifest, "--levels", "disease")) == 0
    _fails(capsys, [*merged, str(shards)], "another mining settings (levels)")

    other = tmp_path / "other.csv"
    other.write_text("\n".join(lines[:-1]) + "\n")
    assert main(shard("1/2", tmp_path / "elsewhere", other)) == 0
    _fails(capsys, [*merged, str(first), str(tmp_path / "elsewhere")], "another manifest")

    assert main(shard("1/2")) == 0  # the shard again, with the settings of shard 0: a complete set
    capsys.readouterr()
    manifest.write_text("\n".join(lines[:-1]) + "\n")  # the manifest changed after mining
    _fails(capsys, [*merged, str(shards)], "changed since the shards were mined")
    _fails(capsys, ["mine", str(other), "stray", "--out", str(tmp_path / "o"), *fast], "unexpected arguments stray")


def test_shard_specifications():
    assert Shard.parse("3/8") == Shard(3, 8) and str(Shard(3, 8)) == "3/8"
    assert Shard.parse("auto/4", {"SLURM_ARRAY_TASK_ID": "2"}) == Shard(2, 4)
    assert Shard.parse("auto", {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "5"}) == Shard(1, 5)
    assert Shard(0, 1).owns("anything") and Shard(1, 4).folder_name == "shard-0001-of-0004"
    owners = [sum(Shard(i, 4).owns(f"study-{n}") for i in range(4)) for n in range(200)]
    assert owners == [1] * 200
    with pytest.raises(ShardError, match="0/0"):
        Shard(0, 0)
