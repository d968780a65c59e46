"""Inference commands take a Hub repository where they take a model folder: downloaded once, with
huggingface_hub's progress bars shown (a first download is minutes, not a hang), then read from the
cache, offline too. Against the stand-in Hub (hub_standin.py) through the real client."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hub_standin import StandInHub, run_client

from hub_ready import write_png
from medreco.hub.download import ModelSourceError, model_folder, split_revision

QUESTION = "Is there pleural effusion in Case B?"


def medreco_command(hub: StandInHub, home: Path, argv: list[str], **extra_env: str) -> subprocess.CompletedProcess:
    """`medreco ...` as a user runs it, its Hub the stand-in; tqdm draws bars though stderr is a pipe."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_"))}
    env.update(HF_ENDPOINT=hub.endpoint, HF_HUB_DISABLE_XET="1", HF_HOME=str(home), TQDM_POSITION="-1")
    env.update(extra_env)
    return subprocess.run(
        [sys.executable, "-m", "medreco", *argv], env=env, capture_output=True, text=True, timeout=300
    )


def test_compare_downloads_a_hub_model_with_progress_then_runs_from_the_cache_offline(hub_ready, tmp_path):
    images = [str(write_png(tmp_path / f"{i}.png", seed=i)) for i in range(2)]
    with StandInHub(tmp_path / "hub") as hub:
        pushed = run_client(
            hub,
            tmp_path / "pusher",
            """
            from medreco.cli import main
            code = main(["push", ARGS["folder"], "--repo-id", "radiology-lab/vlm", "--revision", "v1"])
            print(json.dumps({"code": code}))
            """,
            folder=str(hub_ready["vlm"]),
        )
        assert pushed["code"] == 0
        home = tmp_path / "user"
        compare = ["compare", *images, "--question", QUESTION, "--device", "cpu"]
        first = medreco_command(hub, home, [*compare, "--model", "radiology-lab/vlm@v1"])
        assert first.returncode == 0, first.stderr[-3000:]
        assert first.stdout.strip()  # an answer
        assert re.search(r"Download.*\| \d+(\.\d+)?[kMG]B", first.stderr), first.stderr[-3000:]  # the Hub's bars
        assert "Loading weights" not in first.stderr  # transformers' bars stay hidden
        downloads = sum("/resolve/" in path for _, path in hub.requests)
        missing = medreco_command(hub, home, [*compare, "--model", "radiology-lab/no-such-model"])
    offline = medreco_command(hub, home, [*compare, "--model", "radiology-lab/vlm@v1"], HF_HUB_OFFLINE="1")
    assert offline.returncode == 0 and offline.stdout == first.stdout, offline.stderr[-3000:]
    assert downloads > 0
    assert missing.returncode == 2
    lines = [line for line in missing.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("medreco compare: error: radiology-lab/no-such-model")
    assert "no Hub model repository of that name" in lines[0]


def test_a_folder_is_used_as_it_is_and_what_is_neither_folder_nor_repository_is_refused(hub_ready, tmp_path):
    assert model_folder(hub_ready["vlm"]) == Path(hub_ready["vlm"])
    assert split_revision("lab/model@v2") == ("lab/model", "v2") and split_revision("lab/model") == ("lab/model", None)
    with pytest.raises(FileNotFoundError, match="nor a Hub repository name"):
        model_folder(tmp_path / "runs" / "stage2" / "final")
    with pytest.raises(ModelSourceError, match="not in the Hub cache"):  # HF_HUB_OFFLINE=1 in the tests
        model_folder("radiology-lab/never-downloaded")
