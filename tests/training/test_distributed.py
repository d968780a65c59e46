"""Distributed training on CPUs: two DDP processes, DeepSpeed ZeRO-2/3."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from transformers import AutoModel

from toy_training import HERE, ROOT


def torchrun(nproc: int, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc)]
    return subprocess.run(
        [*command, str(HERE / "distributed_train.py"), *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.mark.parametrize("frozen_text", [False, True])
def test_two_cpu_processes_train_stage1_in_ddp_to_identical_weights(toy, tmp_path, frozen_text):
    extra = ["", "freeze_text_encoder=true", "alignment.max_steps=2"] if frozen_text else []
    result = torchrun(2, str(toy), str(tmp_path), *extra, env={"ACCELERATE_USE_CPU": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    digests = {p.read_text() for p in tmp_path.glob("rank*.sha256")}
    assert len(list(tmp_path.glob("rank*.sha256"))) == 2 and len(digests) == 1
    summary = json.loads((tmp_path / "final" / "summary.json").read_text())["stage1/ranking"]
    assert summary["processes"] == 2 and summary["steps"] == 4


@pytest.mark.parametrize("stage", ["zero2", "zero3"])
def test_deepspeed_zero_trains_on_the_cpu_and_saves_a_loadable_model(toy, tmp_path, stage):
    pytest.importorskip("deepspeed")
    result = torchrun(1, str(toy), str(tmp_path), str(ROOT / "accelerate_configs" / f"deepspeed_{stage}.json"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "ranking" / "deepspeed_checkpoint").is_dir()  # DeepSpeed's engine did the training
    model = AutoModel.from_pretrained(tmp_path / "final")
    assert all(torch.isfinite(t).all() for t in model.state_dict().values())
