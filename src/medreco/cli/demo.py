"""The demo on the synthetic cohort (`demo`) and its ablation grid (`ablate`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .command import Command, names


def _demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="medreco-demo", help="output folder (a finished step is not redone)")
    parser.add_argument("--quick", action="store_true", help="a ~2-minute run (CI)")
    parser.add_argument("--patients", type=int, help="synthetic patients (default 400; quick 40)")
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the whole run: the cohort, the split and every training stage (`medreco ablate --seeds` "
        "retrains on one cohort)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


_BASELINES = (("text_only", "text-only"), ("majority", "majority"))
_SYSTEMS = (("vlm", "VLM"), ("blind_vlm", "blind VLM"), *_BASELINES)


def _demo(args: argparse.Namespace) -> int:
    """The whole system on the synthetic cohort: train, evaluate, write the report."""
    from ..demo import DemoConfig, run_demo

    config = DemoConfig(
        out_dir=args.out, quick=args.quick, patients=args.patients, seed=args.seed, progress=not args.quiet
    )
    metrics = run_demo(config)
    closed = metrics["vqa"]["closed"]
    print(f"\nMedReCo demo finished in {metrics['wall_time_seconds']['total']:.0f} s; outputs in {args.out}/")
    for modality, levels in metrics["retrieval"].items():
        entry = levels["all"]
        cells = "  ".join(
            f"{system} {entry[system]['recall@1']:.3f}"
            for system in ("entity", "entity+rerank", "holistic")
            if system in entry
        )
        print(f"  retrieval Recall@1 {modality:<11} (n={entry['queries']}): {cells}")
    follow_up = metrics["longitudinal"]
    for name, result, baselines in (
        ("closed VQA", closed["vlm"], closed.get("baselines", {})),
        ("longitudinal change", follow_up, follow_up.get("baselines", {})),
    ):
        cells = "".join(f"  {label} {baselines[key]['accuracy']:.3f}" for key, label in _BASELINES if key in baselines)
        print(f"  {name} accuracy: VLM {result['accuracy']:.3f}{cells}  (n={result['questions']})")
    for group in ("image_answerable", "report_only"):
        if group in closed:
            entry = closed[group]
            cells = "  ".join(f"{label} {entry[key]['accuracy']:.3f}" for key, label in _SYSTEMS if key in entry)
            print(f"  closed VQA, {group.replace('_', '-')} questions: {cells}  (n={entry['questions']})")
    swap = metrics["vqa"].get("swap_consistency", {})
    if "vlm" in swap and "blind_vlm" in swap:
        rates = [f"{label} {swap[key]['order_dependent']['rate']:.3f}" for key, label in _SYSTEMS[:2]]
        print(f"  swap consistency: {'  '.join(rates)}  (n={swap['vlm']['order_dependent']['questions']})")
    print(f"  report: {Path(args.out) / 'report.html'}  metrics: {Path(args.out) / 'metrics.json'}")
    return 0


def _ablate_arguments(parser: argparse.ArgumentParser) -> None:
    _demo_arguments(parser)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="training seeds (default: 0)")
    parser.add_argument(
        "--only",
        type=names,
        help="comma-separated ablations (default: all): holistic-trained, shared-mlp, no-statement-alignment, "
        "triplet, blind, no-entity-tokens",
    )


def _ablate(args: argparse.Namespace) -> int:
    """The ablation grid at the demo's scale over training seeds, in one table."""
    from ..demo import AblationConfig, DemoConfig, run_ablations

    demo = DemoConfig(
        out_dir=args.out, quick=args.quick, patients=args.patients, seed=args.seed, progress=not args.quiet
    )
    config = AblationConfig(demo, tuple(args.seeds), *((args.only,) if args.only else ()))
    result = run_ablations(config)
    for target in result["targets"]:
        for seed, check in target["seeds"].items():
            low, high = check["interval"]
            print(
                f"seed {seed} ({target['task']}): {target['method']} - {target['baseline']}: "
                f"{100 * check['difference']:+.1f} points "
                f"[{100 * low:+.1f}, {100 * high:+.1f}] ({'met' if check['met'] else 'NOT met'})"
            )
    print(f"table: {config.root / 'ablation.md'}  data: {config.root / 'ablation.json'}")
    return 0


COMMANDS = (
    Command("demo", "the whole system on the synthetic cohort: train, evaluate, report", _demo_arguments, _demo),
    Command("ablate", "the ablation grid at the demo's scale over seeds, in one table", _ablate_arguments, _ablate),
)
