"""Stage-1 training throughput on this machine: samples/s of the ranking step (anchor + positive +
negative, entity-conditioned, triplet loss, backward, AdamW) for 2D and 3D inputs at the paper's
size, fp32 vs bf16 autocast, and peak memory with and without gradient checkpointing.

Each configuration runs in its own process, which reports its own peak resident memory (ru_maxrss);
figures are printed as ratios against the fp32 run without checkpointing of the same input.

    python benchmarks/train_throughput.py               # 2D 480x480 and 3D 240x480x480, batch 2 / 1
    python benchmarks/train_throughput.py --depth 40    # a thinner volume, for a quick look
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def one_run(kind: str, precision: str, checkpointing: bool, batch: int, depth: int, steps: int) -> dict:
    import torch

    import medreco

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
                entity_input_ids=entity,
                candidate_pixel_values=torch.rand((2 * batch, *shape[1:])),
                candidate_modality_ids=torch.cat([ids, ids]),
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=240)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--kinds", default="2d,3d")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
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
