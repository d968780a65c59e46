"""Training: `train` a stage, `plan` its GPU memory, `accelerate-config` for launching it."""

from __future__ import annotations

import argparse
import json

from .command import Command


def _train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("stage", choices=["stage1", "reranker", "stage2", "progression"], help="the stage to train")
    parser.add_argument("--config", required=True, help="recipe file, or a built-in recipe: tiny, demo, paper")
    parser.add_argument("--mined", help="mined data folder (sets data.mined_dir)")
    parser.add_argument("--out", help="output folder (sets run.output_dir)")
    parser.add_argument("--deepspeed", help="DeepSpeed JSON config (sets run.deepspeed_config)")
    parser.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="override a recipe value, e.g. ranking.epochs=2"
    )


def _train(args: argparse.Namespace) -> int:
    """Run one training stage from a recipe (a YAML file or a built-in name)."""
    from ..training import load_recipe, train_stage

    overrides = list(args.set or [])
    for key, value in (("data.mined_dir", args.mined), ("run.output_dir", args.out)):
        if value:
            overrides.append(f"{key}={value}")
    if args.deepspeed:
        overrides.append(f"run.deepspeed_config={args.deepspeed}")
    summary = train_stage(args.stage, load_recipe(args.config, args.stage, overrides))
    print(json.dumps(summary, indent=2))
    return 0


def _plan_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="recipe file, or a built-in recipe: tiny, demo, paper")
    parser.add_argument("--gpus", type=int, required=True, help="GPUs per node")
    parser.add_argument("--gpu-memory", required=True, help="memory per GPU: 80GB (10^9 bytes) or 80GiB (2^30 bytes)")
    parser.add_argument("--nodes", type=int, default=1, help="nodes (default 1)")
    parser.add_argument(
        "--stage",
        choices=["stage1", "stage1/alignment", "stage1/ranking", "reranker", "stage2"],
        help="only this stage (stage1: both phases; default: every stage)",
    )
    parser.add_argument(
        "--text-tokens", type=int, default=256, help="stage 2: text tokens per sample besides the images (default 256)"
    )
    parser.add_argument("--cpu-memory", help="CPU RAM per node, checked for zero3_offload (e.g. 1TB)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _plan(args: argparse.Namespace) -> int:
    """Per-rank GPU memory of each training stage under each distributed strategy, and which fits."""
    from dataclasses import asdict

    from ..training.planner import PlanRequest, format_plan, parse_memory_size, plan, recommend, stages_named

    request = PlanRequest(
        args.config,
        args.gpus,
        parse_memory_size(args.gpu_memory, "--gpu-memory"),
        nodes=args.nodes,
        stages=stages_named(args.stage),
        text_tokens=args.text_tokens,
        cpu_memory_bytes=parse_memory_size(args.cpu_memory, "--cpu-memory") if args.cpu_memory else None,
    )
    estimates = plan(request)
    if args.json:
        document = {
            "request": asdict(request),
            "estimates": [asdict(e) for e in estimates],
            "recommendation": recommend(estimates),
        }
        print(json.dumps(document, indent=2, default=str))
        return 0
    print(format_plan(estimates, request))
    return 0


def _accelerate_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", help="a packaged launch config (see --list)")
    parser.add_argument("--list", action="store_true", help="list the packaged launch configs")
    parser.add_argument("--out", help="folder to write NAME.yaml (and its DeepSpeed JSON) into (default: print)")
    parser.add_argument("--num-processes", type=int, help="processes over all machines (sets num_processes)")
    parser.add_argument("--num-machines", type=int, help="machines (sets num_machines)")
    parser.add_argument("--force", action="store_true", help="overwrite different files already in --out")


def _accelerate_config(args: argparse.Namespace) -> int:
    """Print or write a packaged Accelerate launch config, its DeepSpeed JSON named by absolute path."""
    from ..training.launch import DESCRIPTIONS, deepspeed_file_of, launch_config, write_launch_config

    if args.list or not args.name:
        for name, description in DESCRIPTIONS.items():
            print(f"{name:<28} {description}")
        return 0
    if not args.out:
        print(launch_config(args.name, args.num_processes, args.num_machines), end="")
        return 0
    written = write_launch_config(args.name, args.out, args.num_processes, args.num_machines, overwrite=args.force)
    deepspeed_file = deepspeed_file_of(written)
    print("\n".join(str(path) for path in (deepspeed_file, written) if path is not None))
    return 0


COMMANDS = (
    Command(
        "train",
        "train stage 1, the reranker, stage 2 or the progression model from a YAML recipe",
        _train_arguments,
        _train,
    ),
    Command(
        "plan", "GPU memory per rank of each stage and distributed strategy, and which fits", _plan_arguments, _plan
    ),
    Command(
        "accelerate-config",
        "print or write a packaged Accelerate launch config (DDP, DeepSpeed, FSDP, multi-node)",
        _accelerate_config_arguments,
        _accelerate_config,
    ),
)
