"""Distributed training on two CPU ranks (gloo), launched the way users launch it: every stage
(stage 1's alignment and ranking phases, the reranker, stage 2 with and without LoRA) under DDP
(torchrun), DeepSpeed ZeRO-2 and ZeRO-3 and FSDP2 (`accelerate launch` with the packaged configs),
ZeRO-3 with CPU offload (the recipe's `run.deepspeed_config`).

Every run is held against one single-process run given the same global batches (2 ranks x batch 4
= 1 process x batch 4 x accumulation 2; dropout off): the ranks agree, the saved models load with
the Auto classes, and their weights match the single-process run's. The measure is the distance
between the two runs' final weights relative to how far the single-process run moved them from
where it started; a control run with other global batches shows that it tells runs apart."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModel, AutoModelForImageTextToText

from medreco.training.launch import deepspeed_config_path, write_launch_config
from toy_training import HERE

STAGES = ("stage1", "reranker", "stage2", "stage2_lora")
# Relative distance to the single-process run. Measured (session 18): DDP <= 0.002, ZeRO-2/3 and
# FSDP2 <= 0.043 (float reduction order; stage 2 inherits stage 1's); other global batches >= 0.76.
TOLERANCE = 0.1
# The share of parameter elements a rank holds under ZeRO-3 / FSDP2 on 2 ranks: half, plus padding.
SHARDED = 0.6
SCRIPT = str(HERE / "distributed_train.py")
# The kill-and-resume tests: the stages killed and resumed under each strategy.
KILLED = {"zero3": "stage1,stage2_lora", "fsdp2": "stage1"}


# route -> the packaged launch config `accelerate launch` is given (the other routes use torchrun)
LAUNCH_CONFIG_OF = {
    "zero2": "deepspeed_zero2",
    "zero3": "deepspeed_zero3",
    "fsdp2": "fsdp",
    "zero3_offload_config": "deepspeed_zero3_offload",
    "cpu_config": "cpu",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(strategy: str, mined: Path, out: Path, *args: str, env: dict | None = None, configs: Path | None = None):
    """tests/distributed_train.py launched by `strategy`'s route (two ranks; one for the `cpu` config)."""
    if strategy.startswith("zero"):
        pytest.importorskip("deepspeed")
    environment = {**os.environ, **(env or {})}
    if strategy in ("ddp", "zero3_offload"):  # torchrun; DDP over gloo, or DeepSpeed from the recipe
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
        if strategy == "ddp":
            environment["ACCELERATE_USE_CPU"] = "1"
        else:  # the JSON by its path, as a user passes their own
            args = (*args, "--deepspeed", str(deepspeed_config_path(strategy)))
    else:  # the packaged launch config, written as a user writes it
        name = LAUNCH_CONFIG_OF[strategy]
        processes = 1 if name == "cpu" else 2
        config = write_launch_config(name, configs or out.parent / f"{out.name}-configs", num_processes=processes)
        command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config)]
        command += ["--main_process_port", str(free_port())]
    return subprocess.run(
        [*command, SCRIPT, str(mined), str(out), *args], env=environment, capture_output=True, text=True, timeout=900
    )


def check_ran(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-5000:])


def relative_distance(reference: Path, other: Path, stage: str) -> float:
    """|other - reference| / |reference - initial| over every weight of the stage's final model."""
    final = load_file(reference / stage / "final" / "model.safetensors")
    initial = load_file(reference / stage / "initial.safetensors")
    compared = load_file(other / stage / "final" / "model.safetensors")
    assert compared.keys() == final.keys()
    names = [name for name in final if name in initial]
    moved = sum(((final[n].float() - initial[n].float()) ** 2).sum() for n in names) ** 0.5
    distance = sum(((compared[n].float() - final[n].float()) ** 2).sum() for n in names) ** 0.5
    return float(distance / moved)


@pytest.fixture(scope="module")
def reference(toy, tmp_path_factory) -> Path:
    """Every stage in one process, with 2 micro-batches per optimiser step."""
    out = tmp_path_factory.mktemp("single")
    result = subprocess.run(
        [sys.executable, SCRIPT, str(toy), str(out), "--accumulation", "2"], capture_output=True, text=True, timeout=900
    )
    check_ran(result)
    return out


@pytest.fixture(scope="module")
def launched(toy, tmp_path_factory):
    """strategy -> the output folder of its two-rank run of every stage (each launched once). The
    commit steps of the main process are logged (tests/test_fault_injection.py's mechanism)."""
    runs: dict[str, Path] = {}

    def run(strategy: str) -> Path:
        if strategy not in runs:
            out = tmp_path_factory.mktemp(strategy)
            log = {"MEDRECO_FAULT_LOG": str(out.parent / f"{out.name}.steps")}
            checkpoints = ["--save-every", "1"] if strategy in KILLED else []  # the killed runs' baselines
            check_ran(launch(strategy, toy, out, *checkpoints, env=log))
            runs[strategy] = out
        return runs[strategy]

    return run


def phase_summaries(folder: Path) -> list[dict]:
    summary = json.loads((folder / "summary.json").read_text())
    return [summary] if "phase" in summary else list(summary.values())


@pytest.mark.parametrize("strategy", ["ddp", "zero2", "zero3", "fsdp2"])
def test_every_stage_trains_on_two_ranks_to_the_single_process_weights(strategy, reference, launched):
    check_every_stage(launched(strategy), reference, strategy, processes=2)


def check_every_stage(out: Path, reference: Path, strategy: str, processes: int) -> None:
    """Every stage of a launched run: the ranks agree, the run used `strategy` on `processes`, ZeRO-3
    and FSDP2 in fact sharded the parameters, the final folders load and match the reference run."""
    for stage in STAGES:
        digests = [json.loads(p.read_text())["digest"] for p in (out / stage / "ranks").glob("rank*.json")]
        assert len(digests) == processes and len(set(digests)) == 1, f"{stage}: the ranks' whole models differ"
        for summary in phase_summaries(out / stage / "final"):
            assert (summary["strategy"], summary["processes"]) == (strategy, processes), (stage, summary)
            # the parameters were in fact sharded (ZeRO-3 partitions, FSDP2 DTensors), not whole copies
            if strategy in ("zero3", "fsdp2"):
                assert summary["parameter_share"] <= SHARDED, (stage, summary)
            else:
                assert summary["parameter_share"] == 1.0, (stage, summary)
        auto = AutoModelForImageTextToText if stage.startswith("stage2") else AutoModel
        model = auto.from_pretrained(out / stage / "final")
        assert all(torch.isfinite(t).all() for t in model.state_dict().values())
        distance = relative_distance(reference, out, stage)
        assert distance < TOLERANCE, f"{strategy} {stage}: {distance:.3f} from the single-process run"
    assert (out / "stage2_lora" / "adapter" / "adapter_model.safetensors").is_file()


@pytest.mark.parametrize(
    ("route", "strategy", "processes", "extra"),
    [("zero3_offload_config", "zero3", 2, ()), ("cpu_config", "single", 1, ("--accumulation", "2"))],
)
def test_the_other_packaged_launch_configs_train_every_stage(
    route, strategy, processes, extra, toy, reference, tmp_path
):
    """`accelerate launch` with the offload and the one-process CPU configs, as a user writes them
    (`multi_gpu` and `multi_node_deepspeed_zero3` need GPUs or machines: checked by Accelerate's loader)."""
    check_ran(launch(route, toy, tmp_path / "run", *extra))
    check_every_stage(tmp_path / "run", reference, strategy, processes)


def test_other_global_batches_are_told_apart(toy, reference, tmp_path):
    """The control: one process with half the global batch ends far from the reference."""
    result = subprocess.run(
        [sys.executable, SCRIPT, str(toy), str(tmp_path), "--stages", "stage1"], capture_output=True, text=True
    )
    check_ran(result)
    assert relative_distance(reference, tmp_path, "stage1") > 5 * TOLERANCE


def test_torchrun_with_a_deepspeed_json_trains_every_stage_sharded(toy, reference, tmp_path):
    """The route without a launcher config: `torchrun ... --deepspeed JSON` (the recipe's
    `run.deepspeed_config`), here ZeRO-3 with CPU offload given by the JSON's path."""
    check_ran(launch("zero3_offload", toy, tmp_path))
    check_every_stage(tmp_path, reference, "zero3", processes=2)


def test_deepspeed_beside_accelerate_use_cpu_is_refused_in_one_line(toy, tmp_path):
    """ACCELERATE_USE_CPU=1 makes Accelerate run plain DDP: with DeepSpeed asked for, stage 1 trained
    unsharded without a word and stage 2 crashed inside TRL; now every stage refuses, in one line."""
    for stage in ("stage1", "stage2"):
        command = [sys.executable, "-m", "medreco", "train", stage, "--config", "tiny", "--mined", str(toy)]
        command += ["--out", str(tmp_path / stage), "--deepspeed", "zero3"]
        command += ["--set", f"vision_model={tmp_path}"] if stage == "stage2" else []
        env = {**os.environ, "ACCELERATE_USE_CPU": "1"}
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 2, (stage, result.stderr[-2000:])
        assert "ACCELERATE_USE_CPU=1 makes Accelerate run plain DDP" in result.stderr
        assert "Traceback" not in result.stderr and not (tmp_path / stage / "final").exists()


@pytest.mark.parametrize(("strategy", "stages"), [("zero3", KILLED["zero3"]), ("fsdp2", KILLED["fsdp2"])])
def test_a_killed_run_resumes_to_the_uninterrupted_weights(strategy, stages, toy, launched, tmp_path):
    """Stage 1 killed (SIGKILL) just before its ranking phase commits step 3's checkpoint, then
    resumed; under ZeRO-3 the resumed run goes on to stage 2 + LoRA, whose first rank is killed once
    the SFTTrainer's step-2 checkpoint is written, and is resumed again."""
    uninterrupted = launched(strategy)
    steps = (uninterrupted.parent / f"{uninterrupted.name}.steps").read_text().splitlines()
    checkpoint_folder = {"zero3": "deepspeed_checkpoint", "fsdp2": "fsdp_checkpoint"}[strategy]
    commits = [i + 1 for i, label in enumerate(steps) if label == f"commit {checkpoint_folder}"]
    # stage 1 commits after alignment steps 1, 2 and ranking steps 1-4: kill before ranking step 3's
    out, kill_at = tmp_path / "run", commits[4]
    env = {"MEDRECO_FAULT_LOG": str(tmp_path / "steps"), "MEDRECO_KILL_AT_STEP": str(kill_at)}
    settings = ["--stages", stages, "--save-every", "1"]
    assert launch(strategy, toy, out, *settings, env=env).returncode != 0
    checkpoint = json.loads((out / "stage1" / "ranking" / checkpoint_folder / "medreco_state.json").read_text())
    assert checkpoint["step"] == 2 and not (out / "stage1" / "final").exists()
    if "stage2_lora" in stages:
        assert launch(strategy, toy, out, *settings, "--resume", "--kill-after-save", "2").returncode != 0
        checkpoints = sorted(p.name for p in (out / "stage2_lora" / "trainer").glob("checkpoint-*"))
        assert checkpoints == ["checkpoint-1", "checkpoint-2"] and not (out / "stage2_lora" / "final").exists()
    check_ran(launch(strategy, toy, out, *settings, "--resume"))
    for stage in stages.split(","):
        resumed = load_file(out / stage / "final" / "model.safetensors")
        expected = load_file(uninterrupted / stage / "final" / "model.safetensors")
        assert resumed.keys() == expected.keys()
        worst = max((resumed[k] - expected[k]).abs().max().item() for k in expected)
        assert worst <= 1e-6, (stage, worst)
