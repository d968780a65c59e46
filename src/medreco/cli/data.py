"""Data: the synthetic cohort (`phantom`), the vocabulary (`entities`), mining supervision from
reports (`mine`) and scoring report decomposition on labelled reports (`score-reports`)."""

from __future__ import annotations

import argparse
import dataclasses
import json

from .command import Command, modalities, modality_or_family, names, positive_int


def _phantom_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--patients", type=positive_int, default=20, help="synthetic patients")
    parser.add_argument(
        "--studies", type=positive_int, default=2, help="studies per patient and modality (time points)"
    )
    parser.add_argument(
        "--modalities",
        type=modalities,
        default="chest_xray,chest_ct",
        help="comma-separated: chest_xray, chest_ct, abdominal_ct, brain_mri, ultrasound (or aliases: cxr, MR, US)",
    )
    parser.add_argument(
        "--size", choices=["tiny", "small", "paper"], default="small", help="image sizes: tiny (40 px), small, paper"
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed of the cohort")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def _phantom(args: argparse.Namespace) -> int:
    """Write the synthetic cohort (images, reports, manifest, ground truth)."""
    from ..data.phantom import PhantomConfig, generate_cohort

    config = PhantomConfig(
        num_patients=args.patients,
        studies_per_patient=args.studies,
        modalities=args.modalities,
        size=args.size,
        seed=args.seed,
    )
    records = generate_cohort(config, args.out, progress=not args.quiet)
    print(f"{len(records)} studies of {config.num_patients} patients written to {args.out}")
    return 0


def _entities_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--modality", type=modality_or_family, help="a modality (chest_ct, or an alias: cxr, MR) or family (CT)"
    )
    parser.add_argument("--level", choices=["anatomy", "abnormal", "disease"], help="only entities of this level")
    parser.add_argument("--extra", help="a JSON file extending the vocabulary")
    parser.add_argument(
        "--paper-only", action="store_true", help="the paper's vocabulary alone (without the shipped common findings)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _entities(args: argparse.Namespace) -> int:
    """The entity vocabulary, optionally for one modality and level."""
    from ..data.reports.ontology import Ontology

    entities = Ontology.load(args.extra, paper_only=args.paper_only).entities(args.modality, args.level)
    if args.json:
        print(json.dumps([dataclasses.asdict(e) for e in entities], indent=2))
        return 0
    for entity in entities:
        where = f"  [in {_shown_name(entity.anatomy)}]" if entity.anatomy else ""
        print(f"{entity.family:<6}{entity.level:<9}{_shown_name(entity.term)}{where}")
    print(f"{len(entities)} entities")
    return 0


def _shown_name(name: str) -> str:
    """The paper's vocabulary joins a structure and its part with "_" ("Trachea_Tracheal Lumen"):
    shown as "trachea / tracheal lumen" (the JSON keeps the names as they are)."""
    return " / ".join(part.strip() for part in name.split("_")).lower()


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
    parser.add_argument(
        "--vqa-pairs", type=int, default=2000, help="study pairs asked about per (modality, split), at most"
    )
    parser.add_argument(
        "--vqa-pairs-per-study",
        type=float,
        help="instead: this many pairs per study of each (modality, split), so families count by their studies",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the patient split and the question sampling")
    parser.add_argument(
        "--shard",
        help="decompose only shard I of N (I from 0) into OUT/shard-IIII-of-NNNN, then `medreco mine merge`; "
        "auto/N takes I from SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
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
    from ..data.mining import LLMSettings

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
    from ..data.mining import MiningConfig, Shard, merge_shards, mine, mine_shard

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
        metrics=names(args.metrics),
        text_encoder=args.text_encoder,
        positive_threshold=_thresholds(args.positive_threshold),
        negative_threshold=_thresholds(args.negative_threshold),
        levels=names(args.levels),
        language_prior_splits=names(args.language_prior_splits),
        vqa_pairs_per_group=args.vqa_pairs,
        vqa_pairs_per_study=args.vqa_pairs_per_study,
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


def _thresholds(text: str) -> float | dict[str, float]:
    """ "0.9" for every metric, or "embedding=0.8,agreement=0.99" per metric."""
    if "=" not in text:
        return float(text)
    return {name.strip(): float(value) for name, value in (item.split("=") for item in text.split(","))}


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
    from ..data.mining.scoring import score_labelled_reports
    from ..data.reports.decomposition import RuleBasedDecomposer
    from ..data.reports.llm import LLMDecomposer
    from ..data.reports.ontology import Ontology

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


COMMANDS = (
    Command("phantom", "write the synthetic cohort: DICOM/NIfTI/PNG studies and reports", _phantom_arguments, _phantom),
    Command("entities", "list the clinical entity vocabulary", _entities_arguments, _entities),
    Command("mine", "mine supervision datasets from a manifest of studies and reports", _mine_arguments, _mine),
    Command(
        "score-reports",
        "how well report decomposition reads your own labelled reports (status accuracy, errors)",
        _score_reports_arguments,
        _score_reports,
    ),
)
