"""The `medreco` command line: it parses and dispatches, the work is the Python API's.

Each sub-command is a pair of small functions, `_<name>_arguments(parser)` declaring its options and
`_<name>(args)` calling the API and printing the result; `COMMANDS` lists them in help order. A
failure a user can cause exits with status 2 and one line naming the file and the problem."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path


# ------------------------------------------------------------------ models
def _info_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", choices=["paper", "tiny"], help="only this size (default: all)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


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


def _export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="folder written by save_pretrained")
    parser.add_argument("--out", required=True, help="destination folder")


def _export(args: argparse.Namespace) -> int:
    """Re-save a model folder Hub-ready: model, processor, their code and the model card."""
    from .hub import export_folder

    print(export_folder(args.checkpoint, args.out))
    return 0


def _push_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "folder",
        help="a saved model or LoRA adapter folder (save_pretrained, medreco train, medreco export), "
        "or a mined folder (medreco mine), pushed as a dataset",
    )
    parser.add_argument("--repo-id", required=True, help="the Hub repository, ORG/NAME (created when missing)")
    parser.add_argument("--private", action="store_true", help="create the repository private")
    parser.add_argument("--revision", help="branch to push to (created when missing; default main)")
    parser.add_argument("--message", help="commit message")
    parser.add_argument(
        "--base-model", help="for a LoRA adapter: the Hub id of the model it applies to (local paths never go up)"
    )
    mined = parser.add_argument_group("mined folders (pushed as a dataset, pseudonymised)")
    mined.add_argument("--include-reports", action="store_true", help="also push the report text (off by default)")
    mined.add_argument(
        "--pseudonyms", help="where to keep the pseudonym table, which stays local (default: FOLDER.pseudonyms.json)"
    )


def _push(args: argparse.Namespace) -> int:
    """Upload a saved model, adapter or mined folder to the Hugging Face Hub."""
    folder = Path(args.folder)
    if (folder / "studies").is_dir():
        from .data.mining import push_mined_dataset

        pseudonyms = Path(args.pseudonyms or f"{folder.resolve()}.pseudonyms.json")
        result = push_mined_dataset(
            folder, args.repo_id, pseudonyms, args.private, args.revision, args.include_reports, args.message
        )
        print(f"pseudonym table (keep it local): {pseudonyms}")
    else:
        if args.include_reports or args.pseudonyms:
            raise ValueError(f"{folder}: --include-reports and --pseudonyms are for mined folders (medreco mine)")
        from .hub import push_to_hub

        result = push_to_hub(
            folder, args.repo_id, args.private, args.revision, args.message, base_model=args.base_model
        )
    print(f"{folder} -> {result.repo_id}@{result.revision} (commit {result.commit[:12]}): {result.url}")
    return 0


# ------------------------------------------------------------------ images
SERIES_HELP = (
    "in a folder with several series: its SeriesNumber, SeriesInstanceUID (or its start), "
    "or the key:... selector `medreco inspect FOLDER` lists"
)


def _inspect_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path")
    parser.add_argument("--series", help=SERIES_HELP)
    parser.add_argument("--volume-index", type=int, help="volume of a 4D NIfTI")
    parser.add_argument("--json", action="store_true")


def _inspect(args: argparse.Namespace) -> int:
    """What a file or folder holds: modality, shape, spacing, orientation, series, warnings."""
    from .processing import ReaderOptions, list_dicom_series, load_image

    path = Path(args.path)
    report: dict = {"path": str(path)}
    if path.is_dir():
        report["series"] = list_dicom_series(path)
        if len(report["series"]) > 1 and args.series is None:
            report["note"] = "several series: pass --series SELECTOR (listed in brackets) to inspect one"
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
                print(f"  [{item['selector']}] {item['modality']} {item['files']} file(s) {item['description']!r}")
        elif key == "warnings":
            for warning in value:
                print(f"warning: {warning}")
        elif key != "affine":
            print(f"{key}: {value}")
    return 0


def _preprocess_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path")
    parser.add_argument("--modality", required=True, help="modality family, e.g. chest_ct or chest_xray")
    parser.add_argument("--out", required=True, help="output .safetensors file")
    parser.add_argument("--series", help=SERIES_HELP)
    parser.add_argument("--volume-index", type=int)
    parser.add_argument("--nan-policy", choices=["raise", "zero"], default="raise")


def _preprocess(args: argparse.Namespace) -> int:
    """The model-ready tensor of one input, as safetensors with key `pixel_values`."""
    from .processing import ReaderOptions, load_image, write_model_input

    options = ReaderOptions(series=args.series, volume_index=args.volume_index, nan_policy=args.nan_policy)
    image = load_image(args.path, options)
    tensor = write_model_input(image, args.modality, args.out)
    for warning in image.warnings:  # assumed spacing, replaced NaNs...: the user decides if it matters
        print(f"medreco preprocess: warning: {warning}", file=sys.stderr)
    print(f"{args.out}: pixel_values {tuple(tensor.shape)}")
    return 0


def _deidentify_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", help="a DICOM file or a folder")
    parser.add_argument("destination", help="output file or folder")
    parser.add_argument(
        "--salt", default="medreco", help="secret that makes pseudonymous UIDs unguessable (set your own)"
    )


def _deidentify(args: argparse.Namespace) -> int:
    """Copy DICOM files de-identified to the DICOM PS3.15 Basic Profile (UIDs pseudonymised)."""
    from .processing import deidentify_tree

    report = deidentify_tree(args.source, args.destination, salt=args.salt)
    print(f"{len(report.written)} file(s) written under {args.destination}, {len(report.skipped)} skipped")
    for relative, reason in report.skipped:
        print(f"  skipped {relative}: {reason}")
    return 0


# ------------------------------------------------------------------ data
def _phantom_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--patients", type=int, default=20)
    parser.add_argument("--studies", type=int, default=2, help="studies per patient and modality (time points)")
    parser.add_argument(
        "--modalities",
        default="chest_xray,chest_ct",
        help="comma-separated: chest_xray, chest_ct, abdominal_ct, brain_mri, ultrasound",
    )
    parser.add_argument("--size", choices=["tiny", "small", "paper"], default="small")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


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


def _entities_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--modality", help="a modality (chest_ct) or family (CT)")
    parser.add_argument("--level", choices=["anatomy", "abnormal", "disease"])
    parser.add_argument("--extra", help="a JSON file extending the vocabulary")
    parser.add_argument(
        "--paper-only", action="store_true", help="the paper's vocabulary alone (without the shipped common findings)"
    )
    parser.add_argument("--json", action="store_true")


def _entities(args: argparse.Namespace) -> int:
    """The entity vocabulary, optionally for one modality and level."""
    from .data.reports.ontology import Ontology

    entities = Ontology.load(args.extra, paper_only=args.paper_only).entities(args.modality, args.level)
    if args.json:
        print(json.dumps([dataclasses.asdict(e) for e in entities], indent=2))
        return 0
    for entity in entities:
        where = f"  [in {entity.anatomy}]" if entity.anatomy else ""
        print(f"{entity.family:<6}{entity.level:<9}{entity.term}{where}")
    print(f"{len(entities)} entities")
    return 0


def _mine_arguments(parser: argparse.ArgumentParser) -> None:
    parser.__class__ = _merge_aware(type(parser))
    parser.add_argument(
        "manifest",
        help="CSV/JSONL with image, report, patient_id, modality (e.g. a cohort's manifest.jsonl); or `merge`: "
        "`medreco mine merge --out DIR SHARDS...` merges the shards of `--shard` runs into one mined folder",
    )
    parser.add_argument("shards", nargs="*", help=argparse.SUPPRESS)  # the shard folders of `mine merge`
    parser.add_argument("--out", required=True, help="output folder (resumes an interrupted run)")
    parser.add_argument(
        "--workers", type=int, default=1, help="processes for report decomposition (LLM server: reports in flight)"
    )
    parser.add_argument(
        "--metrics",
        default="embedding,agreement",
        help="report-similarity metrics that must all agree to label a pair: embedding, agreement, ratescore, radgraph",
    )
    parser.add_argument("--text-encoder", default="bundled:minilm", help="embedding model for report similarity")
    parser.add_argument("--positive-threshold", default="0.9", help="0.9, or per metric: embedding=0.8,agreement=0.99")
    parser.add_argument("--negative-threshold", default="0.3", help="0.3, or per metric")
    parser.add_argument(
        "--levels",
        default="abnormal,disease",
        help="entity levels to mine: anatomy, abnormal, disease (comma-separated)",
    )
    parser.add_argument(
        "--language-prior-splits",
        default="",
        help="splits whose VQA questions the language-prior filter judges (comma-separated; default none; "
        "the paper: train,validation,test); the training questions it removes go to vqa_removed",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--shard",
        help="decompose only shard I of N (I from 0) into OUT/shard-IIII-of-NNNN, then `medreco mine merge`; "
        "auto/N takes I from SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX",
    )
    parser.add_argument("--quiet", action="store_true")
    _llm_arguments(parser)


def _llm_arguments(parser: argparse.ArgumentParser) -> None:
    """The decomposer options `mine` and `score-reports` share."""
    llm = parser.add_argument_group("LLM decomposition (the paper's prompts S1-S3)")
    llm.add_argument(
        "--decomposer",
        choices=["rule", "llm"],
        help="rule (offline, default) or llm (default with --llm-url/--llm-local)",
    )
    llm.add_argument("--llm-url", help="OpenAI-compatible server, e.g. http://localhost:8000/v1 (vLLM, llama.cpp)")
    llm.add_argument("--llm-model", help="the model name the server serves")
    llm.add_argument("--llm-local", help="instead of a server: a local transformers model (path or Hub name)")
    llm.add_argument(
        "--llm-api-key-env",
        help="environment variable holding the API key (default: MEDRECO_LLM_API_KEY, used when set)",
    )
    llm.add_argument("--llm-rps", type=float, help="at most this many requests per second (all workers together)")
    llm.add_argument("--llm-timeout", type=float, default=60.0, help="seconds to wait for one answer")
    llm.add_argument("--llm-retries", type=int, default=4, help="retries on connection errors, 429 and 5xx")
    llm.add_argument("--llm-max-tokens", type=int, default=300, help="longest answer")
    llm.add_argument(
        "--llm-allow-insecure-http",
        action="store_true",
        help="allow plain http:// to a host other than loopback (reports and key unencrypted)",
    )


def _llm_decomposer_choice(args: argparse.Namespace):
    """(decomposer name, LLMSettings or None) from the shared options; a server URL that is refused
    or an unset key variable fails here, before any input is read."""
    from .data.mining import LLMSettings

    llm_given = args.llm_url or args.llm_local
    decomposer = args.decomposer or ("llm" if llm_given else "rule")
    if decomposer == "rule" and (llm_given or args.llm_model):
        raise ValueError("--llm-url/--llm-model/--llm-local are for --decomposer llm")
    if decomposer == "rule":
        return decomposer, None
    llm = LLMSettings(
        url=args.llm_url,
        model=args.llm_model,
        local=args.llm_local,
        api_key_env=args.llm_api_key_env,
        requests_per_second=args.llm_rps,
        timeout=args.llm_timeout,
        max_retries=args.llm_retries,
        max_tokens=args.llm_max_tokens,
        allow_insecure_http=args.llm_allow_insecure_http,
    )
    if args.llm_url:
        llm.backend()
    return decomposer, llm


def _merge_aware(parser_class: type[argparse.ArgumentParser]) -> type[argparse.ArgumentParser]:
    """`parser_class`, parsing `mine merge --out DIR SHARDS...` with options and shard folders in
    any order (argparse alone binds the positionals before the first option and refuses the rest)."""

    class MergeAware(parser_class):
        _intermixing = False

        def parse_known_args(self, args=None, namespace=None):
            if not args or args[0] != "merge" or self._intermixing:
                return super().parse_known_args(args, namespace)
            self._intermixing = True
            try:
                return self.parse_known_intermixed_args(args, namespace)
            finally:
                self._intermixing = False

    return MergeAware


_MINE_SETTINGS = (
    "metrics",
    "text_encoder",
    "positive_threshold",
    "negative_threshold",
    "levels",
    "language_prior_splits",
    "seed",
    "shard",
    "decomposer",
    "llm_url",
    "llm_model",
    "llm_local",
    "llm_api_key_env",
    "llm_rps",
)


def _mine(args: argparse.Namespace) -> int:
    """Supervision datasets (triplets, retrieval, longitudinal labels, VQA) from a study manifest;
    with --shard, one shard's decompositions; `mine merge`, the mined folder from all shards."""
    from .data.mining import MiningConfig, Shard, merge_shards, mine, mine_shard

    if args.manifest == "merge":
        defaults = argparse.ArgumentParser()
        _mine_arguments(defaults)
        default = vars(defaults.parse_args(["merge", "--out", "x"]))
        given = [f"--{name.replace('_', '-')}" for name in _MINE_SETTINGS if getattr(args, name) != default[name]]
        if given:
            raise ValueError(f"mine merge takes its settings from the shards; drop {', '.join(given)}")
        if not args.shards:
            raise ValueError("mine merge needs the shard folders (or the folder holding them)")
        summary = merge_shards(args.shards, args.out, progress=not args.quiet)
        print(json.dumps(summary, indent=2))
        return 0
    if args.shards:
        raise ValueError(f"unexpected arguments {' '.join(args.shards)} (shard folders go to `medreco mine merge`)")
    decomposer, llm = _llm_decomposer_choice(args)
    config = MiningConfig(
        workers=args.workers,
        metrics=_names(args.metrics),
        text_encoder=args.text_encoder,
        positive_threshold=_thresholds(args.positive_threshold),
        negative_threshold=_thresholds(args.negative_threshold),
        levels=_names(args.levels),
        language_prior_splits=_names(args.language_prior_splits),
        decomposer=decomposer,
        llm=llm,
        seed=args.seed,
    )
    if args.shard:
        summary = mine_shard(args.manifest, args.out, config, Shard.parse(args.shard), progress=not args.quiet)
    else:
        summary = mine(args.manifest, args.out, config, progress=not args.quiet)
    print(json.dumps(summary, indent=2))
    return 0


def _score_reports_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "labels",
        help='JSON lines of labelled report text: {"modality", "text", "labels": {finding name: '
        'positive|negative|uncertain}} (optional "id", "kind")',
    )
    parser.add_argument("--extra", help="a JSON file extending the vocabulary")
    parser.add_argument("--errors", type=int, default=20, help="list at most this many errors (default 20)")
    parser.add_argument("--cache", help="folder caching an LLM decomposer's answers (default: none)")
    parser.add_argument("--json", action="store_true", help="the whole result, every error included")
    _llm_arguments(parser)


def _score_reports(args: argparse.Namespace) -> int:
    """How well a decomposer reads your own hand-labelled reports: mention-status accuracy overall,
    per modality and per kind, vocabulary coverage, and the errors."""
    from .data.mining.scoring import score_labelled_reports
    from .data.reports.decomposition import RuleBasedDecomposer
    from .data.reports.llm import LLMDecomposer
    from .data.reports.ontology import Ontology

    if args.errors < 0:
        raise ValueError(f"--errors must be 0 or more, not {args.errors}")
    decomposer_name, llm = _llm_decomposer_choice(args)
    ontology = Ontology.load(args.extra)
    if llm is None:
        decomposer = RuleBasedDecomposer(ontology)
    else:
        decomposer = LLMDecomposer(llm.backend(), ontology=ontology, cache_dir=args.cache, max_tokens=llm.max_tokens)
    result = score_labelled_reports(decomposer, args.labels)
    if args.json:
        print(json.dumps({"decomposer": decomposer_name, **result}, indent=2))
        return 0
    print(
        f"{decomposer_name} decomposer, {result['labels']} statuses: status accuracy "
        f"{result['status_accuracy_resolved']:.1%} on the labels the vocabulary resolves "
        f"({result['vocabulary_coverage']:.1%} of them), {result['status_accuracy']:.1%} on all"
    )
    if result["labels_sharing_an_entity"]:
        print(
            f"({result['labels_sharing_an_entity']} labels named one vocabulary entity with another label of their "
            f"excerpt: scored once where they agree; {len(result['conflicts'])} entities they gave two statuses "
            "not scored, see --json)"
        )
    for table in ("by_modality", "by_kind"):
        if len(result[table]) > 1:
            print(f"{table.replace('_', ' ')}: " + ", ".join(f"{k} {v:.1%}" for k, v in result[table].items()))
    for error in result["errors"][: args.errors]:
        print(f"  {error['id']}: {error['label']}: expected {error['expected']}, read {error['got']}: {error['text']}")
    if len(result["errors"]) > args.errors:
        print(f"  ... {len(result['errors']) - args.errors} more errors (--errors N, or --json for all)")
    return 0


def _manifest_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dataset", choices=["mimic-cxr", "ct-rate"])
    parser.add_argument("root", help="the dataset's root folder")
    parser.add_argument("--out", required=True, help="manifest .jsonl to write (CT-RATE: also OUT_STEM.volumes/)")
    parser.add_argument(
        "--metadata",
        nargs="+",
        help="MIMIC-CXR: mimic-cxr-2.0.0-metadata.csv(.gz) (view positions, study dates); CT-RATE: "
        "train_metadata.csv and/or validation_metadata.csv (voxel size, HU rescale). Default: the published place",
    )
    parser.add_argument(
        "--split-csv", help="MIMIC-CXR: mimic-cxr-2.0.0-split.csv(.gz), the official split (default: beside files/)"
    )
    parser.add_argument(
        "--reports", nargs="+", help="CT-RATE reports CSV(s) (default: dataset/radiology_text_reports/*_reports.csv)"
    )
    parser.add_argument(
        "--headers-fixed",
        action="store_true",
        help="CT-RATE volumes already rewritten by its fix_metadata.py: read their headers as they are",
    )


def _manifest(args: argparse.Namespace) -> int:
    """A mining manifest from a public dataset's own layout, with its official split."""
    from .data import public_datasets

    if args.dataset == "mimic-cxr":
        if args.reports or args.headers_fixed:
            raise ValueError("--reports and --headers-fixed are CT-RATE options")
        if args.metadata and len(args.metadata) > 1:
            raise ValueError("mimic-cxr takes one --metadata file (mimic-cxr-2.0.0-metadata.csv)")
        metadata = args.metadata[0] if args.metadata else None
        rows = public_datasets.mimic_cxr(args.root, metadata, split_csv=args.split_csv)
    else:
        if args.split_csv:
            raise ValueError("--split-csv is a MIMIC-CXR option (CT-RATE's split is its train/valid folders)")
        rows = public_datasets.ct_rate(args.root, args.reports, args.metadata, headers_fixed=args.headers_fixed)
    print(f"{public_datasets.write_manifest(rows, args.out)} studies written to {args.out}")
    return 0


# ------------------------------------------------------------------ training
def _train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("stage", choices=["stage1", "reranker", "stage2"])
    parser.add_argument("--config", required=True, help="recipe file, or a built-in recipe: tiny, demo, paper")
    parser.add_argument("--mined", help="mined data folder (sets data.mined_dir)")
    parser.add_argument("--out", help="output folder (sets run.output_dir)")
    parser.add_argument("--deepspeed", help="DeepSpeed JSON config (sets run.deepspeed_config)")
    parser.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="override a recipe value, e.g. ranking.epochs=2"
    )


def _train(args: argparse.Namespace) -> int:
    """Run one training stage from a recipe (a YAML file or a built-in name)."""
    from .training import load_recipe, train_stage

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

    from .training.planner import PlanRequest, format_plan, parse_memory_size, plan, recommend, stages_named

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
    from .training.launch import DESCRIPTIONS, deepspeed_file_of, launch_config, write_launch_config

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


# ------------------------------------------------------------------ inference
def _index_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="stage-1 output folder (model, tokenizer, image processor)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--mined", help="mined folder: index its studies")
    source.add_argument("--manifest", help="CSV/JSONL with image, modality (and study_id)")
    parser.add_argument("--split", help="with --mined: only this split")
    parser.add_argument("--entity", action="append", help="precompute this entity's embeddings (repeatable)")
    parser.add_argument("--out", required=True, help="index folder")
    parser.add_argument(
        "--commit-every", type=int, default=64, help="studies encoded between commits (a kill loses at most these)"
    )
    parser.add_argument("--quiet", action="store_true")


def _index(args: argparse.Namespace) -> int:
    """Encode an archive (mined studies or a manifest) into a gallery index; resumes if interrupted."""
    from .data.mining import MinedData, read_study_manifest
    from .inference import index_archive

    if args.mined:
        studies = [vars(s) for s in MinedData(args.mined).studies.values() if args.split in (None, s.split)]
    else:
        studies = read_study_manifest(args.manifest, required=("image", "modality"))
    result = index_archive(args.model, args.out, studies, args.entity or (), not args.quiet, args.commit_every)
    print(json.dumps(result))
    if result["unreadable"]:
        print(
            f"medreco index: {len(result['unreadable'])} unreadable image(s) skipped (listed in "
            f"{Path(args.out) / 'index.json'}; fixed ones are indexed on the next run)",
            file=sys.stderr,
        )
    return 0


def _search_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("query", help="query image: DICOM file/folder, NIfTI, PNG/JPEG")
    parser.add_argument("--index", required=True)
    parser.add_argument("--model", required=True, help="the stage-1 model the index was built with")
    parser.add_argument("--modality", required=True)
    parser.add_argument("--entity", help="clinical entity text; omit for whole-image retrieval")
    parser.add_argument("--reranker", help="reranker folder (rerank the top candidates)")
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--rerank-top", type=int, default=20)
    parser.add_argument("--fusion-weight", type=float, default=0.5)
    parser.add_argument("--approximate", action="store_true", help="FAISS HNSW instead of exact search")
    parser.add_argument("--exclude", action="append", help="study ids to leave out (e.g. the query itself)")
    parser.add_argument("--plot", help="write a montage with attention heat-maps to this PNG")
    parser.add_argument("--json", action="store_true")


def _search(args: argparse.Namespace) -> int:
    """Rank an index for a query study under an entity (or whole-image), optionally reranked."""
    from .inference import GalleryIndex, RerankerScorer, RetrievalEncoder, Searcher

    encoder = RetrievalEncoder.from_pretrained(args.model)
    reranker = RerankerScorer.from_pretrained(args.reranker) if args.reranker else None
    searcher = Searcher(GalleryIndex(args.index, encoder), reranker, args.fusion_weight)
    search = (args.query, args.modality, args.entity, args.top_k, args.rerank_top, args.approximate)
    hits, extras = searcher.search(*search, exclude=set(args.exclude or []))
    if args.json:
        print(json.dumps([h.to_dict() for h in hits], indent=2))
    else:
        print(f"{'rank':>4}  {'study':<20} {'cosine':>7} {'reranker':>8} {'fused':>6}")
        for h in hits:
            probability = "-" if h.reranker_probability is None else f"{h.reranker_probability:.3f}"
            print(f"{h.rank:>4}  {h.study_id:<20} {h.cosine:>7.3f} {probability:>8} {h.fused:>6.3f}")
    if args.plot:
        searcher.plot(args.query, args.modality, hits, extras, args.plot, title=args.entity or "whole image")
        print(f"montage written to {args.plot}")
    return 0


def _compare_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("first", help="prior (or query) study")
    parser.add_argument("second", help="current (or reference) study")
    parser.add_argument("--model", required=True, help="stage-2 output folder")
    parser.add_argument("--question", required=True)
    parser.add_argument("--modality", default="chest_xray")
    parser.add_argument("--labels", nargs=2, default=["Case A", "Case B"], help="names of the two images")
    parser.add_argument(
        "--entity",
        help="the finding the question is about, for a VLM with entity tokens (default: the one the question names)",
    )


def _compare(args: argparse.Namespace) -> int:
    """The comparative VLM's answer to a question about two studies."""
    from .inference import ComparativeReader

    reader = ComparativeReader.from_pretrained(args.model)
    answer = reader.answer(
        args.first, args.second, args.question, args.modality, tuple(args.labels), entity=args.entity
    )
    if not answer:
        print(f"medreco compare: the model at {args.model} generated no text (is it trained?)", file=sys.stderr)
        return 1
    print(answer)
    return 0


# ------------------------------------------------------------------ evaluation
def _evaluate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True)
    parser.add_argument("--mined", required=True)
    parser.add_argument("--reranker")
    parser.add_argument("--split", default="test")
    parser.add_argument("--rerank-top", type=int, default=10)
    parser.add_argument(
        "--clip-model",
        action="append",
        default=[],
        metavar="NAME_OR_PATH",
        help="also rank with a CLIP-style model's whole-image similarity (repeatable)",
    )
    parser.add_argument("--out", help="write the per-query results and summary (JSON)")
    parser.add_argument("--quiet", action="store_true")


def _evaluate(args: argparse.Namespace) -> int:
    """Retrieval Recall@k / NDCG with and without the reranker against the holistic baseline."""
    from .atomic import write_text_atomically
    from .data.mining import MinedData
    from .evaluation import ClipBaseline, evaluate_retrieval
    from .inference import RerankerScorer, RetrievalEncoder

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


def _evaluate_public_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=["mmxu", "ms-cxr-t", "medical-diff-vqa"])
    parser.add_argument("--model", required=True, help="stage-2 output folder")
    parser.add_argument("--data", required=True, help="MMXU-test.jsonl, the MS-CXR-T CSV or mimic_pair_questions.csv")
    parser.add_argument("--images", required=True, help="image root (MIMIC-CXR-JPG layout; MMXU: its image folder)")
    parser.add_argument("--limit", type=int, help="evaluate at most this many items, drawn reproducibly")
    parser.add_argument("--split", default="test", help="Medical-Diff-VQA split")
    parser.add_argument("--out", help="write the results (JSON)")
    parser.add_argument("--quiet", action="store_true")


def _evaluate_public(args: argparse.Namespace) -> int:
    """A public evaluation set on a saved VLM: accuracy (closed) or text scores (open-ended)."""
    from .atomic import write_text_atomically
    from .evaluation import run_public_set

    result = run_public_set(
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


# ------------------------------------------------------------------ demo
def _demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="medreco-demo", help="output folder (a finished step is not redone)")
    parser.add_argument("--quick", action="store_true", help="a ~3-minute run (CI); the default takes ~15 minutes")
    parser.add_argument("--patients", type=int, help="synthetic patients (default 400; quick 40)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


_BASELINES = (("text_only", "text-only"), ("majority", "majority"))


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
    follow_up = metrics["longitudinal"]
    for name, result, baselines in (
        ("closed VQA", closed["vlm"], closed.get("baselines", {})),
        ("longitudinal change", follow_up, follow_up.get("baselines", {})),
    ):
        cells = "".join(f"  {label} {baselines[key]['accuracy']:.3f}" for key, label in _BASELINES if key in baselines)
        print(f"  {name} accuracy: VLM {result['accuracy']:.3f}{cells}  (n={result['questions']})")
    print(f"  report: {Path(args.out) / 'report.html'}  metrics: {Path(args.out) / 'metrics.json'}")
    return 0


def _ablate_arguments(parser: argparse.ArgumentParser) -> None:
    from .demo.ablation import ABLATIONS

    _demo_arguments(parser)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="training seeds (default: 0)")
    parser.add_argument(
        "--only", type=_names, help=f"comma-separated ablations (default: all: {', '.join(a.name for a in ABLATIONS)})"
    )


def _ablate(args: argparse.Namespace) -> int:
    """The ablation grid at the demo's scale over training seeds, in one table."""
    from .demo import AblationConfig, DemoConfig, run_ablations

    demo = DemoConfig(
        out_dir=args.out, quick=args.quick, patients=args.patients, seed=args.seed, progress=not args.quiet
    )
    config = AblationConfig(demo, tuple(args.seeds), *((args.only,) if args.only else ()))
    result = run_ablations(config)
    for target in result["targets"]:
        for seed, check in target["seeds"].items():
            low, high = check["interval"]
            print(
                f"seed {seed}: {target['method']} - {target['baseline']}: {100 * check['difference']:+.1f} points "
                f"[{100 * low:+.1f}, {100 * high:+.1f}] ({'met' if check['met'] else 'NOT met'})"
            )
    print(f"table: {config.root / 'ablation.md'}  data: {config.root / 'ablation.json'}")
    return 0


# ------------------------------------------------------------------ parsing helpers
def _names(text: str) -> tuple[str, ...]:
    """ "a, b" -> ("a", "b")"""
    return tuple(name.strip() for name in text.split(",") if name.strip())


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


Command = tuple[str, str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]
COMMANDS: list[Command] = [
    ("info", "parameter counts of each model (total and active per modality)", _info_arguments, _info),
    ("export", "re-save a model folder Hub-ready: model, processor, code, model card", _export_arguments, _export),
    ("push", "upload a model, LoRA adapter or mined dataset to the Hugging Face Hub", _push_arguments, _push),
    ("inspect", "describe a DICOM file or folder, NIfTI or PNG/JPEG", _inspect_arguments, _inspect),
    ("preprocess", "write the model-ready tensor of an image (safetensors)", _preprocess_arguments, _preprocess),
    ("deidentify", "copy DICOM files without identifying attributes", _deidentify_arguments, _deidentify),
    ("phantom", "write the synthetic cohort: DICOM/NIfTI/PNG studies and reports", _phantom_arguments, _phantom),
    ("entities", "list the clinical entity vocabulary", _entities_arguments, _entities),
    ("mine", "mine supervision datasets from a manifest of studies and reports", _mine_arguments, _mine),
    (
        "score-reports",
        "how well report decomposition reads your own labelled reports (status accuracy, errors)",
        _score_reports_arguments,
        _score_reports,
    ),
    ("train", "train stage 1, the reranker or stage 2 from a YAML recipe", _train_arguments, _train),
    ("plan", "GPU memory per rank of each stage and distributed strategy, and which fits", _plan_arguments, _plan),
    (
        "accelerate-config",
        "print or write a packaged Accelerate launch config (DDP, DeepSpeed, FSDP, multi-node)",
        _accelerate_config_arguments,
        _accelerate_config,
    ),
    ("index", "encode an archive into a gallery index (resumable)", _index_arguments, _index),
    ("search", "rank an index for a query study under an entity", _search_arguments, _search),
    ("compare", "the comparative VLM's answer about two studies", _compare_arguments, _compare),
    ("evaluate", "retrieval Recall@k/NDCG: entity, entity+rerank, holistic", _evaluate_arguments, _evaluate),
    (
        "evaluate-public",
        "a public paired-image evaluation set: MMXU, MS-CXR-T, Medical-Diff-VQA",
        _evaluate_public_arguments,
        _evaluate_public,
    ),
    ("demo", "the whole system on the synthetic cohort: train, evaluate, report", _demo_arguments, _demo),
    ("ablate", "the ablation grid at the demo's scale over seeds, in one table", _ablate_arguments, _ablate),
    ("manifest", "write a mining manifest from MIMIC-CXR or CT-RATE", _manifest_arguments, _manifest),
]


class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors in one line (like every other failure) instead of the usage text."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="medreco", description="Comparative reasoning in radiology.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress at INFO level")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, help_text, add_arguments, handler in COMMANDS:
        command = commands.add_parser(name, help=help_text)
        add_arguments(command)
        command.set_defaults(handler=handler)
    return parser


def failure_line(error: BaseException) -> str:
    """One line naming the path and the problem, for an expected failure."""
    if isinstance(error, ModuleNotFoundError):
        extra = {"accelerate": "train", "trl": "train", "peft": "train", "faiss": "index", "matplotlib": "ui"}
        hint = extra.get((error.name or "").split(".")[0])
        advice = f'pip install "medreco[{hint}]"' if hint else f"pip install {error.name}"
        return f"needs the package {error.name!r} ({advice})"
    if isinstance(error, OSError) and error.filename is not None:
        paths = " -> ".join(str(p) for p in (error.filename, error.filename2) if p is not None)
        text = f"{paths}: {error.strerror or error.__class__.__name__}"
    else:
        text = str(error) or error.__class__.__name__
    return " ".join(text.split())  # messages listing several items fold into the one line


OUTPUT_ARGUMENTS = ("out", "plot", "destination", "pseudonyms")


def check_output_paths(args: argparse.Namespace) -> None:
    """Refuse an output that cannot be written before any work is done: its nearest existing
    ancestor must be a writable folder (a file there, or a read-only folder, is found in a second,
    not after an hour of encoding)."""
    import errno
    import os

    for name in OUTPUT_ARGUMENTS:
        value = getattr(args, name, None)
        if not value:
            continue
        ancestor = Path(value).absolute().parent
        while not ancestor.exists() and ancestor != ancestor.parent:
            ancestor = ancestor.parent
        if not ancestor.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "a file, so nothing can be written under it", str(ancestor))
        if not os.access(ancestor, os.W_OK):
            raise PermissionError(errno.EACCES, "not writable", str(ancestor))


def _hide_library_progress_bars() -> None:
    """Hugging Face's own bars ("Loading weights", "Writing model shards") say nothing a user acts
    on; ours (encoding, training, mining) stay. `-v` shows them all."""
    import os

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read when the libraries are imported
    if "transformers" in sys.modules:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()


def main(argv: list[str] | None = None) -> int:
    """The `medreco` command: every failure a user can cause (a bad argument, a missing, damaged or
    unwritable path, a missing package) ends with exit status 2 and one line on stderr naming the
    path and the problem; an interruption with 130. Anything else is a bug and shows its traceback."""
    from .errors import MedReCoError

    args = build_parser().parse_args(argv)
    if not args.verbose:
        _hide_library_progress_bars()
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        check_output_paths(args)
        return args.handler(args)
    except (MedReCoError, ValueError, OSError, ImportError) as error:
        print(f"medreco {args.command}: error: {failure_line(error)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            f"medreco {args.command}: interrupted (what was committed is kept; run it again to resume)", file=sys.stderr
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())
