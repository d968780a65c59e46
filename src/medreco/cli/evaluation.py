"""Evaluation: retrieval on a mined folder (`evaluate`), a public set on a VLM (`evaluate-public`), a
finished run's text scores recomputed (`rescore`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .command import Command, device_arguments, inference_device


def _evaluate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        required=True,
        help="stage-1 output folder or Hub repository (--protocol temporal: a progression model)",
    )
    parser.add_argument("--mined", required=True, help="mined folder whose benchmark is scored")
    parser.add_argument(
        "--protocol",
        choices=["retrieval", "temporal", "negation", "trend"],
        default="retrieval",
        help="retrieval: Recall@k / NDCG of the retrieval benchmark; temporal: TILA's four protocols "
        "(standard, reversed, combined, consistency) of a progression model on the longitudinal pairs; "
        "negation: CLIP-clinic's CXR-Align tasks built from the split's reports (each abnormal study's image "
        "against its report with one finding denied, and with it omitted); trend: TAMM's trend classifier on the "
        "adjacent study pairs (four protocols) and temporal sentence similarity (a stage-1 model trained with "
        "trend_weight)",
    )
    parser.add_argument(
        "--baseline",
        help="--protocol temporal or negation: another model scored on the same pairs or cases, with the "
        "patient-clustered difference",
    )
    parser.add_argument(
        "--zero-shot",
        action="store_true",
        help="--protocol temporal: read the change without a progression head, the prior-fused feature "
        "against text prompts of each class (a stage-1 model pretrained with prior-image fusion)",
    )
    parser.add_argument("--reranker", help="reranker folder: also score entity+rerank")
    parser.add_argument("--split", default="test", help="the benchmark split to score")
    parser.add_argument("--rerank-top", type=int, default=10, help="candidates the reranker rescores")
    parser.add_argument(
        "--clip-model",
        action="append",
        default=[],
        metavar="NAME_OR_PATH",
        help="also rank with a CLIP-style model's whole-image similarity (repeatable)",
    )
    parser.add_argument(
        "--probe",
        action="store_true",
        help="also fit a linear probe of the frozen entity-conditioned features for each entity's status "
        "on the train split, score it on --split, and report the presence-question accuracy it implies "
        '(text prior x probe: the ceiling for a stage 2 on these features); in --out as "probe" and '
        '"presence_ceiling"; with --protocol temporal, a linear probe of the frozen features of each pair '
        '(current - prior, current) for the progression class, and of the current study alone ("change_probe")',
    )
    parser.add_argument("--out", help="write the per-query results and summary (JSON)")
    device_arguments(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def _evaluate(args: argparse.Namespace) -> int:
    """Retrieval Recall@k / NDCG with and without the reranker against the holistic baseline; with
    `--probe`, the linear probe of the frozen features and the presence ceiling it implies."""
    from ..atomic import write_text_atomically
    from ..data.mining import MinedData
    from ..evaluation import ClipBaseline, evaluate_retrieval
    from ..inference import RerankerScorer, RetrievalEncoder

    if args.protocol == "temporal":
        return _evaluate_temporal(args)
    if args.protocol == "negation":
        return _evaluate_negation(args)
    if args.protocol == "trend":
        return _evaluate_trend(args)
    if args.baseline or args.zero_shot:
        raise ValueError("--baseline and --zero-shot belong to --protocol temporal")
    placement = inference_device(args)
    encoder = RetrievalEncoder.from_pretrained(args.model, placement)
    reranker = RerankerScorer.from_pretrained(args.reranker, placement) if args.reranker else None
    data = MinedData(args.mined)
    clip = {
        f"clip:{Path(name).name}": ClipBaseline(name, data.studies, placement=placement) for name in args.clip_model
    }
    probe = _probe(encoder, data, args) if args.probe else {}  # first: its refusals come before any ranking
    report = evaluate_retrieval(
        encoder, data, args.split, reranker, args.rerank_top, extra_systems=clip, progress=not args.quiet
    )
    report.update(probe)
    if args.out:
        write_text_atomically(args.out, json.dumps(report, indent=1))
    for modality, levels in report["summary"].items():
        for level, entry in levels.items():
            systems = {k: v for k, v in entry.items() if isinstance(v, dict) and "recall@1" in v}
            cells = "  ".join(
                f"{name} R@1/3/5 {v['recall@1']:.2f}/{v['recall@3']:.2f}/{v['recall@5']:.2f}"
                for name, v in systems.items()
            )
            print(f"{modality:<11} {level:<12} n={entry['queries']:<4} {cells}")
    if probe:
        _print_probe(probe)
    return 0


def _evaluate_negation(args: argparse.Namespace) -> int:
    """CLIP-clinic's CXR-Align tasks on the mined split (and the difference from a baseline model)."""
    from ..atomic import write_text_atomically
    from ..data.mining import MinedData
    from ..evaluation.negation import TASKS, compare_negation, evaluate_negation
    from ..inference import RetrievalEncoder

    for given, name in ((args.reranker, "--reranker"), (args.clip_model, "--clip-model"), (args.probe, "--probe")):
        if given:
            raise ValueError(f"{name} belongs to --protocol retrieval")
    if args.zero_shot:
        raise ValueError("--zero-shot belongs to --protocol temporal")
    placement = inference_device(args)
    data = MinedData(args.mined)
    report = {"model": evaluate_negation(RetrievalEncoder.from_pretrained(args.model, placement), data, args.split)}
    if args.baseline:
        report["baseline"] = evaluate_negation(
            RetrievalEncoder.from_pretrained(args.baseline, placement), data, args.split
        )
        patients = {s: data.studies[s].patient_id for s in report["model"]["case_ids"]}
        report["difference"] = compare_negation(report["model"], report["baseline"], patients)
    if args.out:
        write_text_atomically(args.out, json.dumps(report, indent=1))
    print_negation(report, (*TASKS, "statement"))
    return 0


def print_negation(report: dict, tasks: tuple[str, ...]) -> None:
    """The two tasks' accuracies per model (and the difference), and the text-only separation."""
    first = report["model"]
    print(f"{first['cases']} abnormal {first['split']!r} studies of {first['patients']} patients")
    for system in ("model", "baseline"):
        if system in report:
            entry = report[system]
            cells = "  ".join(f"{task} {_share(entry[task]['accuracy'], entry[task]['interval'])}" for task in tasks)
            cosine = entry["text_cosine"]
            shared, backbone = cosine["shared"], cosine["backbone"]
            print(f"  {system:<8} {cells}  cos(report, negated) {shared:.3f} (backbone {backbone:.3f})")
    for task, entry in report.get("difference", {}).items():
        low, high = entry["interval"]
        difference, p_value = entry["difference"], entry["p_value"]
        print(f"  {task}: model - baseline {difference:+.3f} [{low:+.3f}, {high:+.3f}], p = {p_value:.3g}")


def _share(value: float, interval) -> str:
    return f"{value:.3f} [{interval[0]:.3f}, {interval[1]:.3f}]"


def _evaluate_trend(args: argparse.Namespace) -> int:
    """TAMM's trend classifier (TILA's four protocols) and temporal sentence similarity on the mined split."""
    from ..atomic import write_text_atomically
    from ..data.mining import MinedData
    from ..evaluation import evaluate_trends, temporal_sentence_similarity
    from ..inference import TrendPredictor

    for given, name in ((args.reranker, "--reranker"), (args.clip_model, "--clip-model"), (args.probe, "--probe")):
        if given:
            raise ValueError(f"{name} belongs to --protocol retrieval")
    if args.zero_shot or args.baseline:
        raise ValueError("--zero-shot and --baseline belong to --protocol temporal")
    predictor = TrendPredictor.from_pretrained(args.model, inference_device(args))
    data = MinedData(args.mined)
    report = evaluate_trends(predictor, data, args.split, progress=not args.quiet)
    report["sentence_similarity"] = temporal_sentence_similarity(predictor.encoder, data, args.split)
    if args.out:
        write_text_atomically(args.out, json.dumps(report, indent=1))
    print_protocols(report)
    similarity = report["sentence_similarity"]
    print(
        f"temporal sentence similarity ({similarity['pairs']} pairs): "
        f"shared space {similarity['shared']['accuracy']:.3f}, text backbone {similarity['backbone']['accuracy']:.3f}"
    )
    return 0


def _evaluate_temporal(args: argparse.Namespace) -> int:
    """TILA's protocols of a progression model (and a baseline) on the mined longitudinal pairs."""
    from ..atomic import write_text_atomically
    from ..data.mining import MinedData
    from ..evaluation import PROTOCOLS, change_probe, evaluate_progression
    from ..inference import ProgressionPredictor, ZeroShotProgressionPredictor

    if args.reranker:
        raise ValueError("--reranker belongs to --protocol retrieval")
    if args.clip_model:
        raise ValueError("--clip-model belongs to --protocol retrieval")
    placement = inference_device(args)
    reader = ZeroShotProgressionPredictor if args.zero_shot else ProgressionPredictor
    predictor = reader.from_pretrained(args.model, placement)
    baseline = reader.from_pretrained(args.baseline, placement) if args.baseline else None
    data = MinedData(args.mined)
    report = evaluate_progression(predictor, data, args.split, baseline, progress=not args.quiet)
    if args.probe:
        report["change_probe"] = change_probe(predictor.encoder, data, args.split, progress=not args.quiet)
    if args.out:
        write_text_atomically(args.out, json.dumps(report, indent=1))
    print_protocols(report)
    if args.probe:
        for name in ("pair", "current_only"):
            cells = "  ".join(f"{p} {report['change_probe'][name][p]['value']:.3f}" for p in PROTOCOLS)
            print(f"  change probe ({name.replace('_', ' ')}): {cells}")
    return 0


def print_protocols(report: dict) -> None:
    """TILA's four protocols of a temporal report, per system (and the difference from a baseline)."""
    from ..evaluation import PROTOCOLS

    for subset in ("all", "image_answerable"):
        if subset not in report:
            continue
        scored = report[subset]
        print(f"{subset}: {scored['model']['pairs']} pairs of {scored['model']['patients']} patients (macro-accuracy)")
        for system in ("model", "baseline", "majority"):
            if system in scored:
                cells = "  ".join(
                    f"{p} {scored[system][p]['value']:.3f} [{scored[system][p]['interval'][0]:.3f}, "
                    f"{scored[system][p]['interval'][1]:.3f}]"
                    for p in PROTOCOLS
                )
                print(f"  {system:<9} {cells}")
        if "model_minus_baseline" in scored:
            cells = "  ".join(
                f"{p} {v['value']:+.3f} (p={v['p_value']:.3f})" for p, v in scored["model_minus_baseline"].items()
            )
            print(f"  model - baseline: {cells}")


def _probe(encoder, data, args: argparse.Namespace) -> dict:
    """`--probe`: the probe fitted on the train split and scored on `--split`, and the presence ceiling."""
    from ..evaluation import linear_probe, presence_ceiling

    probe = linear_probe(encoder, data, split=args.split, progress=not args.quiet)
    train_rows = data.rows("vqa", "train") + data.rows("vqa_removed", "train")
    ceiling = presence_ceiling(probe, data.rows("vqa", args.split), train_rows, data.studies)
    return {"probe": probe, "presence_ceiling": ceiling}


def _print_probe(result: dict) -> None:
    from ..evaluation import probe_table

    for row in probe_table(result["probe"]):
        print(
            f"probe {row['entity']:<60} n={row['n_test']:<4} AUC {row['auc']:.3f}  "
            f"balanced accuracy {row['balanced_accuracy']:.3f}"
        )
    ceiling = result["presence_ceiling"]
    if not ceiling["questions"]:
        print("presence ceiling: no presence question about a probed entity")
        return
    low, high = ceiling["ci95"]
    print(
        f"presence ceiling accuracy {ceiling['accuracy']:.3f} [95% CI {low:.3f}-{high:.3f}] "
        f"(n={ceiling['questions']}; text-only {ceiling['text_only']['accuracy']:.3f})"
    )


def _evaluate_public_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "name", choices=["mmxu", "ms-cxr-t", "medical-diff-vqa", "cxr-align"], help="the public evaluation set"
    )
    parser.add_argument(
        "--model",
        required=True,
        help="stage-2 output folder or Hub repository (ms-cxr-t: or a progression / temporal stage-1 model; "
        "cxr-align: a stage-1 model)",
    )
    parser.add_argument(
        "--data", required=True, help="MMXU-test.jsonl, the MS-CXR-T CSV, mimic_pair_questions.csv or cxr-align.json"
    )
    parser.add_argument("--images", required=True, help="image root (MIMIC-CXR-JPG layout; MMXU: its image folder)")
    parser.add_argument("--limit", type=int, help="evaluate at most this many items, drawn reproducibly")
    parser.add_argument("--split", default="test", help="Medical-Diff-VQA split; CXR-Align part (mimic, openi)")
    parser.add_argument("--out", help="write the results (JSON)")
    device_arguments(parser, device_map=True)
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def _evaluate_public(args: argparse.Namespace) -> int:
    """A public evaluation set on a saved VLM: accuracy (closed) or text scores (open-ended)."""
    from ..atomic import write_text_atomically
    from ..evaluation import run_public_set

    result = run_public_set(
        args.name,
        args.model,
        args.data,
        args.images,
        args.limit,
        args.split,
        progress=not args.quiet,
        placement=inference_device(args),
    )
    if args.out:
        write_text_atomically(args.out, json.dumps(result, indent=1))
    if "scores" in result:
        cells = "  ".join(f"{name} {value:.3f}" for name, value in result["scores"].items() if name != "questions")
        print(f"{args.name} (n={result['items']}): {cells}")
        if "bleu_signature" in result:
            print(f"BLEU: sacreBLEU {result['bleu_signature']}")
    elif args.name == "cxr-align":
        print_negation({"model": {"split": args.split, **result, "patients": result["cases"]}}, ("negated", "omitted"))
    elif "all" in result:  # MS-CXR-T on a progression model (fine-tuned or zero-shot)
        print(f"{args.name} ({result['reading']}, n={result['items']} studies)")
        print_protocols(result)
    else:
        low, high = result["ci95"]
        print(f"{args.name} accuracy {result['accuracy']:.3f} [95% CI {low:.3f}-{high:.3f}] (n={result['questions']})")
    return 0


def _rescore_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("metrics", help="a finished run's metrics.json (medreco demo)")
    parser.add_argument("--out", help="write the recomputed scores (JSON)")


def _rescore(args: argparse.Namespace) -> int:
    """A finished run's open-ended text scores, recomputed from its saved answers with the standard
    implementations (sacreBLEU, rouge-score, nltk's METEOR), without generating again."""
    from ..atomic import write_text_atomically
    from ..evaluation import rescore_open_ended

    result = rescore_open_ended(args.metrics)
    if args.out:
        write_text_atomically(args.out, json.dumps(result, indent=1))
    cells = "  ".join(f"{name} {value:.3f}" for name, value in result["scores"].items() if name != "questions")
    print(f"open-ended (n={result['scores']['questions']}): {cells}")
    print(f"BLEU: sacreBLEU {result['bleu_signature']}")
    return 0


COMMANDS = (
    Command(
        "evaluate",
        "retrieval Recall@k/NDCG: entity, entity+rerank, holistic; --probe: linear probe and presence ceiling",
        _evaluate_arguments,
        _evaluate,
    ),
    Command(
        "evaluate-public",
        "a public paired-image evaluation set: MMXU, MS-CXR-T, Medical-Diff-VQA",
        _evaluate_public_arguments,
        _evaluate_public,
    ),
    Command(
        "rescore",
        "a finished run's open-ended text scores, recomputed with sacreBLEU, rouge-score and nltk",
        _rescore_arguments,
        _rescore,
    ),
)
