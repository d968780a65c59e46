"""Stage-1 training throughput on this machine: samples/s of the ranking step (anchor + positive +
negative, entity-conditioned, triplet loss, backward, AdamW) for 2D and 3D inputs at the paper's
size, fp32 vs bf16 autocast, and peak memory with and without gradient checkpointing.

Each configuration runs in its own process, which reports its own peak resident memory (ru_maxrss);
figures are printed as ratios against the fp32 run without checkpointing of the same input.

`--scaling` measures data-parallel scaling instead: the tiny stage-1 ranking phase on a small
synthetic cohort, run with `medreco train` under each strategy (DDP, DeepSpeed ZeRO-2/3, FSDP2),
launched as users launch it (torchrun / `accelerate launch` with the packaged configs) on 1 and on
2 processes with the same batch per process; samples/s from the loop's own timing (setup and saving
excluded), and the scaling efficiency: 2-process samples/s over twice the 1-process samples/s.

    python benchmarks/train_throughput.py               # 2D 480x480 and 3D 240x480x480, batch 2 / 1
    python benchmarks/train_throughput.py --depth 40    # a thinner volume, for a quick look
    python benchmarks/train_throughput.py --scaling     # 1 vs 2 processes per strategy
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path


def one_run(kind: str, precision: str, checkpointing: bool, batch: int, depth: int, steps: int) -> dict:
    import torch

    import medreco
    from medreco.modeling import CandidateBatch, TextBatch

    model = medreco.create_model(
        "retrieval",
        "paper",
        freeze_text_encoder=False,
        text_config={
            "model_type": "bert",
            "hidden_size": 384,
            "num_hidden_layers": 6,
            "num_attention_heads": 12,
            "intermediate_size": 1536,
            "vocab_size": 30522,
        },
    )  # MiniLM-sized text encoder (no download)
    if checkpointing:
        model.gradient_checkpointing_enable()
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    shape = (batch, 1, 1, 480, 480) if kind == "2d" else (batch, 1, depth, 480, 480)
    modality = 0 if kind == "2d" else 1
    ids = torch.full((batch,), modality)
    entity = torch.randint(1000, 2000, (batch, 8))

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = model(
                torch.rand(shape),
                ids,
                entities=TextBatch(entity),
                candidates=CandidateBatch(torch.rand((2 * batch, *shape[1:])), torch.cat([ids, ids])),
            ).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    step()  # warm-up
    start = time.perf_counter()
    for _ in range(steps):
        step()
    seconds = (time.perf_counter() - start) / steps
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # this process only (Linux: KiB)
    return {"samples_per_s": batch / seconds, "seconds_per_step": seconds, "peak_mb": peak_mb}


SCALING_STRATEGIES = {"ddp": None, "zero2": "deepspeed_zero2", "zero3": "deepspeed_zero3", "fsdp2": "fsdp"}


def scaling_run(strategy: str, processes: int, mined: Path, out: Path, steps: int, batch: int) -> dict:
    """One `medreco train stage1` ranking phase under `strategy`; its phase summary."""
    import os

    from medreco.training.launch import write_launch_config

    train = ["-m", "medreco", "train", "stage1", "--config", "tiny", "--mined", str(mined), "--out", str(out)]
    train += ["--set", "alignment.epochs=0", "--set", f"ranking.max_steps={steps}"]
    train += ["--set", f"ranking.batch_size_2d={batch}", "--set", "run.save_every=0", "--set", "run.progress=false"]
    env = dict(os.environ)
    if SCALING_STRATEGIES[strategy] is None:
        env["ACCELERATE_USE_CPU"] = "1"
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)]
    else:
        config = write_launch_config(SCALING_STRATEGIES[strategy], out.parent / "configs", processes, overwrite=True)
        command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config)]
    subprocess.run([*command, *train], env=env, capture_output=True, text=True, check=True)
    return json.loads((out / "final" / "summary.json").read_text())["stage1/ranking"]


def scaling(args: argparse.Namespace) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        cohort = ["phantom", "--out", str(root / "cohort"), "--patients", "48", "--studies", "2"]
        cohort += ["--modalities", "chest_xray", "--size", "tiny"]
        # the demo's relevance rule (status-and-attribute agreement), which yields triplets on a small cohort
        mining = ["mine", str(root / "cohort" / "manifest.jsonl"), "--out", str(root / "mined")]
        mining += ["--metrics", "agreement", "--positive-threshold", "agreement=0.99"]
        mining += ["--negative-threshold", "agreement=0.01"]
        for command in (cohort, mining):
            subprocess.run([sys.executable, "-m", "medreco", *command, "--quiet"], check=True, capture_output=True)
        print(f"stage-1 ranking, tiny recipe, {args.scaling_steps} steps of batch {args.batch} per process")
        print("| strategy | processes | samples/s | scaling efficiency |\n|---|---|---|---|")
        for strategy in args.strategies.split(","):
            rates = {}
            for processes in (1, 2):
                out = root / f"{strategy}-{processes}"
                summary = scaling_run(strategy, processes, root / "mined", out, args.scaling_steps, args.batch)
                assert summary["strategy"] in (strategy, "single"), summary
                rates[processes] = summary["steps"] * args.batch * processes / summary["seconds"]
                efficiency = rates[processes] / (processes * rates[1])
                print(f"| {strategy} | {processes} | {rates[processes]:.1f} | {efficiency:.2f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=240)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--kinds", default="2d,3d")
    parser.add_argument("--scaling", action="store_true", help="1 vs 2 processes per strategy")
    parser.add_argument("--strategies", default=",".join(SCALING_STRATEGIES))
    parser.add_argument("--scaling-steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=8, help="--scaling: batch per process")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.scaling:
        scaling(args)
        return
    if args.child:
        config = json.loads(args.child)
        print(json.dumps(one_run(**config)))
        return
    for kind in args.kinds.split(","):
        batch = 2 if kind == "2d" else 1
        baseline = None
        for precision, checkpointing in (("fp32", False), ("bf16", False), ("fp32", True)):
            config = {
                "kind": kind,
                "precision": precision,
                "checkpointing": checkpointing,
                "batch": batch,
                "depth": args.depth,
                "steps": args.steps,
            }
            output = subprocess.run(
                [sys.executable, __file__, "--child", json.dumps(config)], capture_output=True, text=True, check=True
            ).stdout
            result = json.loads(output.strip().splitlines()[-1])
            peak_mb = result["peak_mb"]
            baseline = baseline or result
            size = "480x480" if kind == "2d" else f"{args.depth}x480x480"
            print(
                f"{kind} {size} batch {batch} {precision:<4} checkpointing={checkpointing!s:<5} "
                f"{result['samples_per_s']:.3f} samples/s "
                f"({result['samples_per_s'] / baseline['samples_per_s']:.2f}x), "
                f"peak {peak_mb:.0f} MB ({peak_mb / baseline['peak_mb']:.2f}x)"
            )


if __name__ == "__main__":
    main()
