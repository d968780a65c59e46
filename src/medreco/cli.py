"""The `medreco` command line. Each sub-command is one small function over the Python API."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path


def _info(args: argparse.Namespace) -> int:
    """Parameter counts of every model family at each preset size."""
    from .factory import FAMILIES, PRESETS, parameter_summary

    presets = [args.preset] if args.preset else sorted(PRESETS)
    summary = {preset: {family: parameter_summary(family, preset) for family in FAMILIES} for preset in presets}
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    for preset, families in summary.items():
        print(f"preset {preset!r}")
        for family, counts in families.items():
            active = {name: n for name, n in counts.items() if name != "total"}
            print(f"  {family:<10} total {_human(counts['total']):>8}")
            for modality, n in active.items():
                print(f"  {'':<10}   active for {modality:<13} {_human(n):>8}")
    return 0


def _export(args: argparse.Namespace) -> int:
    """Re-save a checkpoint with its code for `trust_remote_code=True` loading."""
    from transformers import AutoConfig, AutoModel, AutoModelForImageTextToText

    from .hub import export_for_remote_code

    config = AutoConfig.from_pretrained(args.checkpoint)
    auto = AutoModelForImageTextToText if config.model_type == "medreco_vlm" else AutoModel
    model = auto.from_pretrained(args.checkpoint)
    print(export_for_remote_code(model, args.out))
    return 0


def _inspect(args: argparse.Namespace) -> int:
    """What a file or folder holds: modality, shape, spacing, orientation, series, warnings."""
    from pathlib import Path

    from .processing import ReaderOptions, list_dicom_series, load_image

    path = Path(args.path)
    report: dict = {"path": str(path)}
    if path.is_dir():
        report["series"] = list_dicom_series(path)
        if len(report["series"]) > 1 and args.series is None:
            report["note"] = "several series: pass --series N to inspect one"
            return _print_report(report, args.json)
    image = load_image(path, ReaderOptions(series=args.series, volume_index=args.volume_index))
    report.update(image.describe())
    return _print_report(report, args.json)


def _print_report(report: dict, as_json: bool) -> int:
    if as_json:
        print(json.dumps(report, indent=2))
        return 0
    for key, value in report.items():
        if key == "series":
            print("series:")
            for item in value:
                print(f"  #{item['series_number']}: {item['modality']} {item['files']} file(s) {item['description']!r}")
        elif key == "warnings":
            for warning in value:
                print(f"warning: {warning}")
        elif key != "affine":
            print(f"{key}: {value}")
    return 0


def _preprocess(args: argparse.Namespace) -> int:
    """The model-ready tensor of one input, as safetensors with key `pixel_values`."""
    from safetensors.torch import save_file

    from .atomic import atomic_path
    from .processing import MedReCoImageProcessor, ReaderOptions, load_image

    processor = MedReCoImageProcessor()
    image = load_image(
        args.path, ReaderOptions(series=args.series, volume_index=args.volume_index, nan_policy=args.nan_policy)
    )
    tensor = processor.preprocess_one(image, args.modality)
    out = Path(args.out)
    metadata = {"modality": args.modality, "modality_id": str(processor.modality_id(args.modality))}
    with atomic_path(out) as temporary:
        save_file({"pixel_values": tensor.contiguous()}, temporary, metadata=metadata)
    print(f"{out}: pixel_values {tuple(tensor.shape)}")
    return 0


def _deidentify(args: argparse.Namespace) -> int:
    """Copy DICOM files with identifying attributes removed and UIDs pseudonymised."""
    from pathlib import Path

    from .processing import deidentify_file

    source, destination = Path(args.source), Path(args.destination)
    files = [p for p in source.rglob("*") if p.is_file()] if source.is_dir() else [source]
    for file in files:
        target = destination / file.relative_to(source) if source.is_dir() else destination
        deidentify_file(file, target, salt=args.salt)
    print(f"{len(files)} file(s) written under {destination}")
    return 0


def _phantom(args: argparse.Namespace) -> int:
    """Write the synthetic cohort (images, reports, manifest, ground truth)."""
    from .data.phantom import PhantomConfig, generate_cohort

    config = PhantomConfig(
        num_patients=args.patients,
        studies_per_patient=args.studies,
        modalities=tuple(args.modalities.split(",")),
        size=args.size,
        seed=args.seed,
    )
    records = generate_cohort(config, args.out, progress=not args.quiet)
    print(f"{len(records)} studies of {config.num_patients} patients written to {args.out}")
    return 0


def _entities(args: argparse.Namespace) -> int:
    """The entity vocabulary, optionally for one modality and level."""
    from .data.ontology import Ontology

    ontology = Ontology.load(args.extra)
    entities = ontology.entities(args.modality, args.level)
    if args.json:
        print(json.dumps([{**vars(e), "synonyms": list(e.synonyms)} for e in entities], indent=2))
        return 0
    for entity in entities:
        where = f"  [in {entity.anatomy}]" if entity.anatomy else ""
        print(f"{entity.family:<6}{entity.level:<9}{entity.term}{where}")
    print(f"{len(entities)} entities")
    return 0


def _mine(args: argparse.Namespace) -> int:
    """Supervision datasets (triplets, retrieval, longitudinal labels, VQA) from a study manifest."""
    from .data.mining import MiningConfig, mine

    config = MiningConfig(
        workers=args.workers,
        metrics=tuple(name.strip() for name in args.metrics.split(",") if name.strip()),
        text_encoder=args.text_encoder,
        positive_threshold=_thresholds(args.positive_threshold),
        negative_threshold=_thresholds(args.negative_threshold),
        levels=tuple(level.strip() for level in args.levels.split(",") if level.strip()),
        seed=args.seed,
    )
    summary = mine(args.manifest, args.out, config, progress=not args.quiet)
    print(json.dumps(summary, indent=2))
    return 0


def _manifest(args: argparse.Namespace) -> int:
    """A mining manifest from a public dataset's own layout."""
    from .data import adapters

    if args.dataset == "mimic-cxr":
        rows = adapters.mimic_cxr(args.root, args.metadata)
    else:
        if not args.reports:
            raise ValueError("ct-rate needs --reports (the reports CSV)")
        rows = adapters.ct_rate(args.root, args.reports)
    count = adapters.write_manifest(rows, args.out)
    print(f"{count} studies written to {args.out}")
    return 0


def _thresholds(text: str) -> float | dict[str, float]:
    """ "0.9" for every metric, or "embedding=0.8,agreement=0.99" per metric."""
    if "=" not in text:
        return float(text)
    return {name.strip(): float(value) for name, value in (item.split("=") for item in text.split(","))}


def _human(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return str(n)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="medreco", description="Comparative reasoning in radiology.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress at INFO level")
    commands = parser.add_subparsers(dest="command", required=True)

    info = commands.add_parser("info", help="parameter counts of each model (total and active per modality)")
    info.add_argument("--preset", choices=["paper", "tiny"], help="only this size (default: all)")
    info.add_argument("--json", action="store_true", help="machine-readable output")
    info.set_defaults(handler=_info)

    export = commands.add_parser("export", help="save a checkpoint with its code for trust_remote_code loading")
    export.add_argument("checkpoint", help="folder written by save_pretrained")
    export.add_argument("--out", required=True, help="destination folder")
    export.set_defaults(handler=_export)

    inspect = commands.add_parser("inspect", help="describe a DICOM file or folder, NIfTI or PNG/JPEG")
    inspect.add_argument("path")
    inspect.add_argument("--series", type=int, help="series number, in a folder with several series")
    inspect.add_argument("--volume-index", type=int, help="volume of a 4D NIfTI")
    inspect.add_argument("--json", action="store_true")
    inspect.set_defaults(handler=_inspect)

    preprocess = commands.add_parser("preprocess", help="write the model-ready tensor of an image (safetensors)")
    preprocess.add_argument("path")
    preprocess.add_argument("--modality", required=True, help="modality family, e.g. chest_ct or chest_xray")
    preprocess.add_argument("--out", required=True, help="output .safetensors file")
    preprocess.add_argument("--series", type=int)
    preprocess.add_argument("--volume-index", type=int)
    preprocess.add_argument("--nan-policy", choices=["raise", "zero"], default="raise")
    preprocess.set_defaults(handler=_preprocess)

    deidentify = commands.add_parser("deidentify", help="copy DICOM files without identifying attributes")
    deidentify.add_argument("source", help="a DICOM file or a folder")
    deidentify.add_argument("destination", help="output file or folder")
    deidentify.add_argument("--salt", default="medreco", help="secret that makes pseudonymous UIDs unguessable")
    deidentify.set_defaults(handler=_deidentify)

    phantom = commands.add_parser("phantom", help="write the synthetic cohort: DICOM/NIfTI/PNG studies and reports")
    phantom.add_argument("--out", required=True, help="output folder")
    phantom.add_argument("--patients", type=int, default=20)
    phantom.add_argument("--studies", type=int, default=2, help="studies per patient and modality (time points)")
    phantom.add_argument("--modalities", default="chest_xray,chest_ct")
    phantom.add_argument("--size", choices=["tiny", "small", "paper"], default="small")
    phantom.add_argument("--seed", type=int, default=0)
    phantom.add_argument("--quiet", action="store_true", help="no progress bar")
    phantom.set_defaults(handler=_phantom)

    entities = commands.add_parser("entities", help="list the clinical entity vocabulary")
    entities.add_argument("--modality", help="a modality (chest_ct) or family (CT)")
    entities.add_argument("--level", choices=["anatomy", "abnormal", "disease"])
    entities.add_argument("--extra", help="a JSON file extending the vocabulary")
    entities.add_argument("--json", action="store_true")
    entities.set_defaults(handler=_entities)

    mine = commands.add_parser("mine", help="mine supervision datasets from a manifest of studies and reports")
    mine.add_argument(
        "manifest", help="CSV/JSONL with image, report, patient_id, modality (e.g. a cohort's manifest.jsonl)"
    )
    mine.add_argument("--out", required=True, help="output folder (resumes an interrupted run)")
    mine.add_argument("--workers", type=int, default=1, help="processes for report decomposition")
    mine.add_argument(
        "--metrics",
        default="embedding,agreement",
        help="report-similarity metrics that must all agree to label a pair: embedding, agreement, ratescore, radgraph",
    )
    mine.add_argument("--text-encoder", default="bundled:minilm", help="embedding model for report similarity")
    mine.add_argument("--positive-threshold", default="0.9", help="0.9, or per metric: embedding=0.8,agreement=0.99")
    mine.add_argument("--negative-threshold", default="0.3", help="0.3, or per metric")
    mine.add_argument(
        "--levels",
        default="abnormal,disease",
        help="entity levels to mine: anatomy, abnormal, disease (comma-separated)",
    )
    mine.add_argument("--seed", type=int, default=0)
    mine.add_argument("--quiet", action="store_true")
    mine.set_defaults(handler=_mine)

    train = commands.add_parser("train", help="train stage 1, the reranker or stage 2 from a YAML recipe")
    train.add_argument("stage", choices=["stage1", "reranker", "stage2"])
    train.add_argument("--config", required=True, help="recipe file, or a built-in recipe: tiny, paper")
    train.add_argument("--mined", help="mined data folder (sets data.mined_dir)")
    train.add_argument("--out", help="output folder (sets run.output_dir)")
    train.add_argument("--deepspeed", help="DeepSpeed JSON config (sets run.deepspeed_config)")
    train.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="override a recipe value, e.g. ranking.epochs=2"
    )
    train.set_defaults(handler=_train)

    index = commands.add_parser("index", help="encode an archive into a gallery index (resumable)")
    index.add_argument("--model", required=True, help="stage-1 output folder (model, tokenizer, image processor)")
    source = index.add_mutually_exclusive_group(required=True)
    source.add_argument("--mined", help="mined folder: index its studies")
    source.add_argument("--manifest", help="CSV/JSONL with image, modality (and study_id)")
    index.add_argument("--split", help="with --mined: only this split")
    index.add_argument("--entity", action="append", help="precompute this entity's embeddings (repeatable)")
    index.add_argument("--out", required=True, help="index folder")
    index.add_argument("--quiet", action="store_true")
    index.set_defaults(handler=_index)

    search = commands.add_parser("search", help="rank an index for a query study under an entity")
    search.add_argument("query", help="query image: DICOM file/folder, NIfTI, PNG/JPEG")
    search.add_argument("--index", required=True)
    search.add_argument("--model", required=True, help="the stage-1 model the index was built with")
    search.add_argument("--modality", required=True)
    search.add_argument("--entity", help="clinical entity text; omit for whole-image retrieval")
    search.add_argument("--reranker", help="reranker folder (rerank the top candidates)")
    search.add_argument("--top-k", type=int, default=5)
    search.add_argument("--rerank-top", type=int, default=20)
    search.add_argument("--fusion-weight", type=float, default=0.5)
    search.add_argument("--approximate", action="store_true", help="FAISS HNSW instead of exact search")
    search.add_argument("--exclude", action="append", help="study ids to leave out (e.g. the query itself)")
    search.add_argument("--plot", help="write a montage with attention heat-maps to this PNG")
    search.add_argument("--json", action="store_true")
    search.set_defaults(handler=_search)

    compare = commands.add_parser("compare", help="the comparative VLM's answer about two studies")
    compare.add_argument("first", help="prior (or query) study")
    compare.add_argument("second", help="current (or reference) study")
    compare.add_argument("--model", required=True, help="stage-2 output folder")
    compare.add_argument("--question", required=True)
    compare.add_argument("--modality", default="chest_xray")
    compare.add_argument("--labels", nargs=2, default=["Case A", "Case B"], help="names of the two images")
    compare.add_argument(
        "--entity",
        help="the finding the question is about, for a VLM with entity tokens (default: the one the question names)",
    )
    compare.set_defaults(handler=_compare)

    evaluate = commands.add_parser("evaluate", help="retrieval Recall@k/NDCG: entity, entity+rerank, holistic")
    evaluate.add_argument("--model", required=True)
    evaluate.add_argument("--mined", required=True)
    evaluate.add_argument("--reranker")
    evaluate.add_argument("--split", default="test")
    evaluate.add_argument("--rerank-top", type=int, default=10)
    evaluate.add_argument(
        "--clip-model",
        action="append",
        default=[],
        metavar="NAME_OR_PATH",
        help="also rank with a CLIP-style model's whole-image similarity (repeatable)",
    )
    evaluate.add_argument("--out", help="write the per-query results and summary (JSON)")
    evaluate.add_argument("--quiet", action="store_true")
    evaluate.set_defaults(handler=_evaluate)

    benchmark = commands.add_parser(
        "benchmark", help="a public paired-image benchmark: MMXU, MS-CXR-T, Medical-Diff-VQA"
    )
    benchmark.add_argument("name", choices=["mmxu", "ms-cxr-t", "medical-diff-vqa"])
    benchmark.add_argument("--model", required=True, help="stage-2 output folder")
    benchmark.add_argument(
        "--data", required=True, help="MMXU-test.jsonl, the MS-CXR-T CSV or mimic_pair_questions.csv"
    )
    benchmark.add_argument("--images", required=True, help="image root (MIMIC-CXR-JPG layout; MMXU: its image folder)")
    benchmark.add_argument("--limit", type=int, help="evaluate at most this many items, drawn reproducibly")
    benchmark.add_argument("--split", default="test", help="Medical-Diff-VQA split")
    benchmark.add_argument("--out", help="write the results (JSON)")
    benchmark.add_argument("--quiet", action="store_true")
    benchmark.set_defaults(handler=_benchmark)

    demo = commands.add_parser("demo", help="the whole system on the synthetic cohort: train, evaluate, report")
    demo.add_argument("--out", default="medreco-demo", help="output folder (a finished step is not redone)")
    demo.add_argument("--quick", action="store_true", help="a ~3-minute run (CI); the default takes ~15 minutes")
    demo.add_argument("--patients", type=int, help="synthetic patients (default 400; quick 40)")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--quiet", action="store_true", help="no progress bars")
    demo.set_defaults(handler=_demo)

    manifest = commands.add_parser("manifest", help="write a mining manifest from MIMIC-CXR or CT-RATE")
    manifest.add_argument("dataset", choices=["mimic-cxr", "ct-rate"])
    manifest.add_argument("root", help="the dataset's root folder")
    manifest.add_argument("--out", required=True, help="manifest .jsonl to write")
    manifest.add_argument("--metadata", help="MIMIC-CXR metadata CSV (view positions, study dates)")
    manifest.add_argument("--reports", help="CT-RATE reports CSV")
    manifest.set_defaults(handler=_manifest)
    return parser


def _train(args: argparse.Namespace) -> int:
    """Run one training stage from a recipe (a YAML file or a built-in name)."""
    from .training import load_recipe, train_stage

    overrides = list(args.set or [])
    if args.mined:
        overrides.append(f"data.mined_dir={args.mined}")
    if args.out:
        overrides.append(f"run.output_dir={args.out}")
    if args.deepspeed:
        overrides.append(f"run.deepspeed_config={args.deepspeed}")
    config = load_recipe(args.config, args.stage, overrides)
    summary = train_stage(args.stage, config)
    print(json.dumps(summary, indent=2))
    return 0


def _index(args: argparse.Namespace) -> int:
    """Encode an archive (mined studies or a manifest) into a gallery index; resumes if interrupted."""
    from .data.mining import read_study_manifest
    from .retrieval import GalleryIndex, RetrievalEncoder
    from .training.data import MinedData

    encoder = RetrievalEncoder.from_pretrained(args.model)
    if args.mined:
        data = MinedData(args.mined)
        rows = [vars(s) for s in data.studies.values() if args.split in (None, s.split)]
    else:
        rows = read_study_manifest(args.manifest)
    if not rows:
        raise ValueError("no studies to index (check --split)")
    index = GalleryIndex(args.out, encoder)
    ids = [r.get("study_id") or Path(r["image"]).stem for r in rows]
    added = index.add(ids, [r["image"] for r in rows], [r["modality"] for r in rows], progress=not args.quiet)
    for modality in index.modalities():
        for entity in [None, *(args.entity or [])]:
            index.entity_features(modality, entity)
    print(json.dumps({"added": added, "studies": {m: len(index.study_ids(m)) for m in index.modalities()}}))
    return 0


def _search(args: argparse.Namespace) -> int:
    """Rank an index for a query study under an entity (or whole-image), optionally reranked."""
    from .retrieval import GalleryIndex, RerankerScorer, RetrievalEncoder, Searcher, plot_montage

    encoder = RetrievalEncoder.from_pretrained(args.model)
    reranker = RerankerScorer.from_pretrained(args.reranker) if args.reranker else None
    searcher = Searcher(GalleryIndex(args.index, encoder), reranker, args.fusion_weight)
    hits, extras = searcher.search(
        args.query,
        args.modality,
        args.entity,
        args.top_k,
        args.rerank_top,
        args.approximate,
        exclude=set(args.exclude or []),
    )
    if args.json:
        print(json.dumps([h.to_dict() for h in hits], indent=2))
    else:
        print(f"{'rank':>4}  {'study':<20} {'cosine':>7} {'reranker':>8} {'fused':>6}")
        for h in hits:
            probability = "-" if h.reranker_probability is None else f"{h.reranker_probability:.3f}"
            print(f"{h.rank:>4}  {h.study_id:<20} {h.cosine:>7.3f} {probability:>8} {h.fused:>6.3f}")
    if args.plot:
        processor = encoder.image_processor
        plot_montage(
            processor.preprocess_one(args.query, args.modality),
            extras["query_attention"],
            hits,
            [processor.preprocess_one(h.image, args.modality) for h in hits],
            extras["hit_attention"],
            encoder.model.config.vision_config.patch_size,
            args.plot,
            title=f"{args.entity or 'whole image'}",
        )
        print(f"montage written to {args.plot}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    """The comparative VLM's answer to a question about two studies."""
    from .comparison import ComparativeReader

    reader = ComparativeReader.from_pretrained(args.model)
    answer = reader.answer(
        args.first, args.second, args.question, args.modality, tuple(args.labels), entity=args.entity
    )
    if not answer:
        print(f"medreco compare: the model at {args.model} generated no text (is it trained?)", file=sys.stderr)
        return 1
    print(answer)
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    """Retrieval Recall@k / NDCG with and without the reranker against the holistic baseline."""
    from .atomic import write_text_atomically
    from .evaluation import ClipBaseline, evaluate_retrieval
    from .retrieval import RerankerScorer, RetrievalEncoder
    from .training.data import MinedData

    encoder = RetrievalEncoder.from_pretrained(args.model)
    reranker = RerankerScorer.from_pretrained(args.reranker) if args.reranker else None
    data = MinedData(args.mined)
    clip = {f"clip:{Path(name).name}": ClipBaseline(name, data.studies) for name in args.clip_model}
    report = evaluate_retrieval(
        encoder, data, args.split, reranker, args.rerank_top, extra_systems=clip, progress=not args.quiet
    )
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
    return 0


def _benchmark(args: argparse.Namespace) -> int:
    """A public benchmark on a saved VLM: accuracy (closed) or text scores (open-ended)."""
    from .atomic import write_text_atomically
    from .evaluation import run_benchmark

    result = run_benchmark(
        args.name, args.model, args.data, args.images, args.limit, args.split, progress=not args.quiet
    )
    if args.out:
        write_text_atomically(args.out, json.dumps(result, indent=1))
    if "scores" in result:
        cells = "  ".join(f"{name} {value:.3f}" for name, value in result["scores"].items() if name != "questions")
        print(f"{args.name} (n={result['items']}): {cells}")
    else:
        low, high = result["ci95"]
        print(f"{args.name} accuracy {result['accuracy']:.3f} [95% CI {low:.3f}-{high:.3f}] (n={result['questions']})")
    return 0


def _demo(args: argparse.Namespace) -> int:
    """The whole system on the synthetic cohort: train, evaluate, write the report."""
    from .demo import DemoConfig, run_demo

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
    print(
        f"  closed VQA accuracy: VLM {closed['vlm']['accuracy']:.3f}  text-only {closed['text_only']['accuracy']:.3f}"
        f"  (n={closed['vlm']['questions']})"
    )
    follow_up = metrics["longitudinal"]
    print(f"  longitudinal change accuracy: {follow_up['accuracy']:.3f} (n={follow_up['questions']})")
    print(f"  report: {Path(args.out) / 'report.html'}  metrics: {Path(args.out) / 'metrics.json'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from .errors import MedReCoError

    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        return args.handler(args)
    except ModuleNotFoundError as error:
        extra = {"accelerate": "train", "trl": "train", "peft": "train", "faiss": "index", "matplotlib": "ui"}
        hint = extra.get((error.name or "").split(".")[0])
        advice = f'pip install "medreco[{hint}]"' if hint else f"pip install {error.name}"
        print(f"medreco {args.command}: error: needs the package {error.name!r} ({advice})", file=sys.stderr)
        return 2
    except (MedReCoError, ValueError) as error:
        # one line naming the file and the problem; exit code 2, like argparse's usage errors
        print(f"medreco {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
