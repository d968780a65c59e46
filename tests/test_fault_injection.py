"""Kill -9 at every commit step of `medreco index`, `medreco mine` and a checkpoint save: after
each kill, re-running finishes with exactly the result of an uninterrupted run, and nothing is
lost, duplicated or left behind.

`fault_point` (medreco.atomic) numbers the commit steps of a run; an uninterrupted run counts
them, then for each step a fresh run is killed with SIGKILL just before it and run again. The runs
are real processes, forked from one warm process (fault_runner.py) so that dozens stay cheap."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import datasets
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer

import medreco
from fault_runner import WarmRunner
from medreco.data.mining import MinedData
from medreco.data.phantom import PhantomConfig, generate_cohort
from medreco.errors import TrainingDataError
from medreco.factory import bundled_text_encoder_path
from medreco.processing import MedReCoImageProcessor
from toy_mined import RECIPES


@pytest.fixture(scope="module")
def runner():
    runner = WarmRunner()
    yield runner
    runner.close()


def kill_at_every_step(runner, request, workdir: Path, prepare, check) -> int:
    """Count the steps of an uninterrupted run in `workdir/reference`, then for every step: a
    fresh `prepare(folder)`, a run killed there, `check(folder, killed=True)`, a run to the end
    and `check(folder, killed=False)`. Returns the number of steps."""
    reference = workdir / "reference"
    prepare(reference)
    steps_file = workdir / "reference.steps"
    outcome = runner.run(_at(request, reference), workdir / "reference.log", count=steps_file)
    assert outcome == {"code": 0, "signal": None}, (workdir / "reference.log").read_text()[-3000:]
    steps = steps_file.read_text().splitlines()
    assert steps, "the run passed no commit step"
    for step, label in enumerate(steps, start=1):
        folder = workdir / f"kill-{step}"
        prepare(folder)
        log = workdir / f"kill-{step}.log"
        killed = runner.run(_at(request, folder), log, kill_at=step)
        assert killed["signal"] == 9, f"step {step} ({label}) was not reached: {log.read_text()[-2000:]}"
        check(folder, reference, killed=True)
        finished = runner.run(_at(request, folder), log)
        assert finished == {"code": 0, "signal": None}, f"after a kill at step {step} ({label}): {log.read_text()}"
        check(folder, reference, killed=False)
        shutil.rmtree(folder)
    return len(steps)


def _at(request: dict, folder: Path) -> dict:
    """The request with {folder} replaced by `folder`."""
    return json.loads(json.dumps(request).replace("{folder}", str(folder)))


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------ index
@pytest.fixture(scope="module")
def archive(toy, tmp_path_factory):
    """A saved (untrained) tiny retrieval model and a manifest of 9 readable studies and one
    unreadable image."""
    root = tmp_path_factory.mktemp("archive")
    data = MinedData(toy)
    torch.manual_seed(0)
    model_dir = root / "model"
    medreco.create_model("retrieval", "tiny").save_pretrained(model_dir)
    AutoTokenizer.from_pretrained(bundled_text_encoder_path()).save_pretrained(model_dir)
    MedReCoImageProcessor(recipes=RECIPES).save_pretrained(model_dir)
    rows = [{"study_id": s, "image": data.studies[s].image, "modality": "chest_xray"} for s in sorted(data.studies)]
    broken = root / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)
    rows = [*rows[:9], {"study_id": "broken", "image": str(broken), "modality": "chest_xray"}]
    manifest = root / "manifest.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return model_dir, manifest


def test_a_killed_index_build_resumes_to_exactly_the_uninterrupted_index(runner, archive, tmp_path):
    model, manifest = archive
    request = {
        "argv": [
            "index",
            "--model",
            str(model),
            "--manifest",
            str(manifest),
            "--out",
            "{folder}",
            "--entity",
            "Pleural effusion",
            "--commit-every",
            "3",
            "--quiet",
        ]
    }

    def check(folder: Path, reference: Path, killed: bool) -> None:
        if killed:  # what a kill leaves is an index of whole blocks: loadable and consistent
            meta = json.loads((folder / "index.json").read_text()) if (folder / "index.json").exists() else None
            if meta and meta["studies"]:
                rows = load_file(folder / meta["tokens"]["chest_xray"])["tokens"].shape[0]
                assert rows == len(meta["studies"]["chest_xray"]) and rows % 3 == 0
            return
        assert _files(folder).keys() == _files(reference).keys()  # nothing duplicated or left behind
        meta, expected = (json.loads((f / "index.json").read_text()) for f in (folder, reference))
        assert meta == expected and len(meta["studies"]["chest_xray"]) == 9 and list(meta["unreadable"]) == ["broken"]
        for name in _files(reference):
            if name.endswith(".safetensors"):
                a, b = load_file(folder / name), load_file(reference / name)
                assert all(torch.equal(a[key], b[key]) for key in b), name

    steps = kill_at_every_step(runner, request, tmp_path, lambda folder: None, check)
    assert steps >= 10  # 3 blocks of tokens and index.json, superseded files removed, 2 entity caches (11)


# ------------------------------------------------------------------ mine
MINE_THRESHOLDS = ["--positive-threshold", "embedding=0.8,agreement=0.99"]
MINE_THRESHOLDS += ["--negative-threshold", "embedding=0.75,agreement=0.01"]


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    out = tmp_path_factory.mktemp("cohort")
    generate_cohort(PhantomConfig(num_patients=6, size="tiny", seed=2), out, progress=False)
    return out


def _tables(folder: Path) -> dict[str, list[dict]]:
    return {
        name: datasets.load_from_disk(str(folder / name)).to_list() if any((folder / name).iterdir()) else []
        for name in ("studies", "triplets", "retrieval", "longitudinal", "vqa", "vqa_removed")
    }


def test_a_killed_mining_run_never_mixes_tables_and_resumes_to_the_uninterrupted_result(runner, cohort, tmp_path):
    """The folder holds tables mined with another seed; mining again is killed at each step. In
    between, the folder reads as the old tables, or is refused: never new tables beside old ones."""
    manifest = str(cohort / "manifest.jsonl")
    old = tmp_path / "old"
    outcome = runner.run(
        {"argv": ["mine", manifest, "--out", str(old), "--seed", "1", "--quiet", *MINE_THRESHOLDS]},
        tmp_path / "old.log",
    )
    assert outcome["code"] == 0, (tmp_path / "old.log").read_text()
    old_tables = _tables(old)
    request = {"argv": ["mine", manifest, "--out", "{folder}", "--seed", "0", "--quiet", *MINE_THRESHOLDS]}

    def prepare(folder: Path) -> None:
        shutil.copytree(old, folder)

    def check(folder: Path, reference: Path, killed: bool) -> None:
        if killed:
            try:
                MinedData(folder)
            except TrainingDataError as error:
                assert "run `medreco mine` again" in str(error)
            else:
                assert _tables(folder) in (old_tables, _tables(reference))
            return
        assert _tables(folder) == _tables(reference)
        summary, expected = (json.loads((f / "summary.json").read_text()) for f in (folder, reference))
        assert {k: v for k, v in summary.items() if k != "decomposed_now"} == {
            k: v for k, v in expected.items() if k != "decomposed_now"
        }
        assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in reference.iterdir())

    steps = kill_at_every_step(runner, request, tmp_path, prepare, check)
    assert steps >= 13  # summary removed, 6 tables swapped in and their old versions removed, summary


# ------------------------------------------------------------------ checkpoints
def test_a_killed_checkpoint_save_resumes_to_the_weights_of_an_uninterrupted_run(runner, tmp_path):
    request = {"call": "fault_runner:train_with_checkpoints", "args": ["{folder}", 4]}

    def check(folder: Path, reference: Path, killed: bool) -> None:
        checkpoints = folder / "checkpoints"
        if killed:  # the latest pointer always names a whole checkpoint
            pointer = checkpoints / "latest"
            if pointer.exists():
                assert (checkpoints / pointer.read_text().strip() / "model.safetensors").exists()
            return
        final, expected = load_file(folder / "final.safetensors"), load_file(reference / "final.safetensors")
        assert all(torch.equal(final[k], expected[k]) for k in expected)
        assert sorted(p.name for p in checkpoints.iterdir()) == ["latest", "step-000000003", "step-000000004"]

    steps = kill_at_every_step(runner, request, tmp_path, lambda folder: None, check)
    assert steps >= 10  # per save: swap in, point latest, prune the oldest
