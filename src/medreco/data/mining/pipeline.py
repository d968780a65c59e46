"""`medreco mine`: from a manifest of studies (images + reports) to supervision datasets.

Steps: read the manifest -> patient-level splits -> decompose every report (in parallel, cached
on disk so an interrupted run resumes) -> retrieval triplets and test queries -> longitudinal
change labels -> comparative VQA with its filters -> Hugging Face `datasets` saved to disk.
Reports are read by the rule-based decomposer or by a language model (`MiningConfig.decomposer`,
`decomposers.LLMSettings`); decomposition can be spread over machines (`shards`: `mine_shard`,
then `merge_shards` runs the global steps and writes exactly what `mine` writes).

Manifest: CSV or JSONL with columns `image`, `report`, `patient_id`, `modality` and optionally
`study_id`, `study_date` (ISO date) or `study_day` (integer), `source` (rows whose source is
listed in `MiningConfig.external_sources` form the "external" split: never trained on) and `split`
(a dataset's official split, train/validation/test/external, on every row or none: used instead of
the patient hash). The synthetic cohort's `manifest.jsonl` is one. Output folders (each
`datasets.load_from_disk`-able):

    studies/       study_id, patient_id, modality, image (see `image_path_beside`), report, split,
                   statements (entity_id -> status, text)
    triplets/      anchor, positive, negative, entity_id, modality, split
    retrieval/     query, entity_id, modality, split, gallery, relevant, irrelevant (every split: train/validation
                   queries label the reranker's candidates and stage 1's in-batch negatives; test and
                   external queries are the test set)
    longitudinal/  prior, current, patient_id, entity_id, label, attribute, split
    vqa/           study_a, study_b, entity_id, dimension, question, options, answer, open_question,
                   open_answer, labels, split
    vqa_removed/   the training questions the language-prior filter removed (same columns), kept to fit
                   text-only baselines on the training split as it was before the filter
"""

from __future__ import annotations

import csv
import itertools
import json
import logging
import os
import shutil
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, ThreadPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

from tqdm.auto import tqdm

from ...atomic import commit_folder, remove_atomically, remove_stale_temporaries, write_text_atomically
from ...errors import MedReCoError
from ..reports.decomposition import RuleBasedDecomposer
from ..reports.ontology import UnknownModalityError, canonical_modality
from ..reports.statement import EntityStatement, MentionStatus, ReportDecomposer, ReportDecomposition
from .answerability import Answerability
from .decomposers import DECOMPOSERS, LLMSettings, build_llm_decomposer, cache_file_name, decomposer_identity
from .longitudinal import consistent_change_label
from .mined import SUMMARY_FILE, table_fingerprint
from .similarity import SIMILARITY_METRICS, ReportSimilarity, SimilarityThresholds, build_similarity_metric
from .splits import SPLIT_NAMES, assign_splits, check_patients, official_patient_splits
from .supervision import StudyInfo, build_retrieval_queries, build_triplets
from .vqa import filter_vqa, sample_pairs, vqa_over_pairs

logger = logging.getLogger(__name__)
REQUIRED_COLUMNS = ("image", "report", "patient_id", "modality")


class ManifestError(MedReCoError, ValueError):
    """A manifest that cannot be read, names the file and the problem."""


class MiningWorkerError(MedReCoError, RuntimeError):
    """The processes decomposing reports in parallel died."""


ENTITY_LEVELS = {"anatomy", "abnormal", "disease"}


@dataclass
class MiningConfig:
    """Settings of a mining run; thresholds default to the paper's (0.9 / 0.3 for every metric)."""

    split_fractions: dict[str, float] = field(default_factory=lambda: {"train": 0.8, "validation": 0.1, "test": 0.1})
    split_salt: str = "medreco"
    # Report-similarity metrics that must all agree for a pair to be labelled (names: SIMILARITY_METRICS)
    metrics: tuple[str, ...] = ("embedding", "agreement")
    text_encoder: str = "bundled:minilm"  # the embedding metric's model
    positive_threshold: float | dict[str, float] = 0.9
    negative_threshold: float | dict[str, float] = 0.3
    triplets_per_anchor: int = 2
    vqa_pairs_per_group: int = 2000
    # With a value, a (modality, split) group's pair budget is this many pairs per study of the group
    # (still at most `vqa_pairs_per_group`): each family's share of the questions follows its share of
    # the studies, rather than every family having as many pairs as the largest.
    vqa_pairs_per_study: float | None = None
    # Splits whose questions the language-prior filter judges; none by default. The paper filters every
    # split (`("train", "validation", "test")`): a test set every text-only baseline loses by
    # construction. Filtering the training split alone shifts its answers away from the test split's
    # (the removed questions are the common answers), and a VLM trained on it learns the reverse of
    # the prior: docs/mining.md, "The language-prior filter".
    language_prior_splits: tuple[str, ...] = ()
    levels: tuple[str, ...] = ("abnormal", "disease")
    external_sources: tuple[str, ...] = ()  # manifest `source` values held out as the "external" split
    # "rule" (offline) or "llm" (the paper's prompts; `llm` says how to reach the model)
    decomposer: str = "rule"
    llm: LLMSettings | None = None
    # rule: processes; llm through a server: reports in flight at once (threads sharing the rate
    # limit); a local transformers model decomposes one report at a time
    workers: int = 1
    seed: int = 0

    def __post_init__(self):
        if self.decomposer not in DECOMPOSERS:
            raise ValueError(f"decomposer {self.decomposer!r} unknown; choose from {', '.join(DECOMPOSERS)}")
        if (self.decomposer == "llm") != (self.llm is not None):
            raise ValueError(
                "the llm decomposer needs LLM settings (--llm-url and --llm-model, or --llm-local)"
                if self.llm is None
                else "LLM settings were given, but the decomposer is 'rule'"
            )
        if self.vqa_pairs_per_study is not None and self.vqa_pairs_per_study <= 0:
            raise ValueError(f"vqa_pairs_per_study must be positive, not {self.vqa_pairs_per_study}")
        if self.workers < 1:
            raise ValueError(f"workers must be 1 or more, not {self.workers}")
        unknown_splits = sorted(set(self.language_prior_splits) - {"train", "validation", "test", "external"})
        if unknown_splits:
            raise ValueError(
                f"language-prior splits {unknown_splits} unknown; choose from train, validation, test, external"
            )
        unknown = sorted(set(self.levels) - ENTITY_LEVELS)
        if unknown or not self.levels:
            raise ValueError(f"entity levels {unknown or '(none)'} unknown; choose from {sorted(ENTITY_LEVELS)}")
        unknown = sorted(set(self.metrics) - set(SIMILARITY_METRICS))
        if unknown or not self.metrics:
            raise ValueError(f"similarity metrics {unknown or '(none)'} unknown; choose from {SIMILARITY_METRICS}")

    @property
    def identity(self) -> dict:
        """What determines the decompositions (`decomposers.decomposer_identity`)."""
        return decomposer_identity(self.decomposer, self.llm, self.levels)


def read_study_manifest(path: str | Path, required: tuple[str, ...] = REQUIRED_COLUMNS) -> list[dict]:
    """Rows of a CSV or JSONL manifest, with `study_id` filled in, paths made absolute and modality
    aliases (`CXR`, `DX`, `MR`, ...: `ontology.MODALITY_ALIASES`) replaced by canonical modalities.
    `required`: the columns every row must fill (indexing needs only `image` and `modality`)."""
    path = Path(path)
    if not path.exists():
        raise ManifestError(f"{path}: no such manifest")
    try:
        if path.suffix == ".csv":
            with open(path, newline="") as handle:
                rows = list(csv.DictReader(handle))
        else:
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (json.JSONDecodeError, csv.Error, UnicodeDecodeError) as error:
        raise ManifestError(f"{path}: not a readable CSV/JSONL manifest ({error.__class__.__name__})") from None
    for index, row in enumerate(rows):
        missing = [c for c in required if not row.get(c)]
        if missing:
            raise ManifestError(f"{path}: row {index + 1} lacks {', '.join(missing)}")
        try:
            row["modality"] = canonical_modality(str(row["modality"]))
        except UnknownModalityError as error:
            raise ManifestError(f"{path}: row {index + 1}: {error}") from None
        row.setdefault("study_id", f"study-{index:06d}")
        image = Path(row["image"])
        row["image"] = str(image if image.is_absolute() else path.parent / image)
    ids = [r["study_id"] for r in rows]
    if len(set(ids)) != len(ids):
        raise ManifestError(f"{path}: study_id values repeat")
    _check_split_column(rows, path)
    return rows


def _check_split_column(rows: list[dict], path: Path) -> None:
    """A `split` column names a known split on every row, or on none."""
    with_split = [bool(row.get("split")) for row in rows]
    if any(with_split) and not all(with_split):
        raise ManifestError(
            f"{path}: row {with_split.index(False) + 1} has no split while others do (fill every row or none)"
        )
    for index, row in enumerate(rows):
        if row.get("split") and row["split"] not in SPLIT_NAMES:
            raise ManifestError(
                f"{path}: row {index + 1}: split {row['split']!r} unknown; choose from {', '.join(SPLIT_NAMES)}"
            )


def _decompose_one(args: tuple[str, str, str]) -> tuple[str, dict]:
    study_id, report, modality = args
    decomposer = _worker_decomposer()
    result = decomposer.decompose(report, modality)
    return study_id, {k: {"status": v.status.value, "sentences": v.sentences} for k, v in result.mentioned().items()}


_DECOMPOSER: RuleBasedDecomposer | None = None


def _worker_decomposer() -> RuleBasedDecomposer:
    global _DECOMPOSER  # one decomposer per worker process: building its patterns is not free
    if _DECOMPOSER is None:
        _DECOMPOSER = RuleBasedDecomposer()
    return _DECOMPOSER


def read_decomposition_cache(cache_file: Path) -> dict[str, dict]:
    """The decompositions a cache file holds (a half-written last line is skipped)."""
    done: dict[str, dict] = {}
    if cache_file.exists():
        for line in cache_file.read_text().splitlines():
            try:
                item = json.loads(line)
                done[item["study_id"]] = item["statements"]
            except (json.JSONDecodeError, KeyError, TypeError):
                logger.warning("ignoring a damaged line in %s (an interrupted write)", cache_file.name)
    return done


def decompose_all(
    rows: list[dict],
    cache_file: Path,
    workers: int = 1,
    progress: bool = True,
    decomposer: ReportDecomposer | None = None,
    levels: tuple[str, ...] | None = None,
) -> tuple[dict[str, dict], int]:
    """Decompositions of every row, reusing `cache_file` (JSONL, appended as it goes). Returns them
    and how many were computed in this call.

    decomposer: None for the rule-based one (`workers` processes); another (an `LLMDecomposer`)
    runs in `workers` threads, asked only about the entities of `levels` when given."""
    done = read_decomposition_cache(cache_file)
    todo = [(r["study_id"], r["report"], r["modality"]) for r in rows if r["study_id"] not in done]
    if todo:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        with open(cache_file, "a") as handle:

            def keep(study_id: str, statements: dict) -> None:
                done[study_id] = statements
                handle.write(json.dumps({"study_id": study_id, "statements": statements}) + "\n")
                handle.flush()  # a kill loses at most the line being written

            if decomposer is not None:
                _decompose_in_threads(todo, decomposer, levels, workers, keep, progress)
            elif workers > 1:
                try:
                    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
                        results = pool.map(_decompose_one, todo, chunksize=16)
                        for study_id, statements in tqdm(
                            results, total=len(todo), desc="reports", disable=not progress
                        ):
                            keep(study_id, statements)
                except BrokenProcessPool:
                    # spawned workers re-import the calling script; an unguarded script mines again in each
                    raise MiningWorkerError(
                        f"the {workers} report-decomposition workers died ({len(done)} reports kept in "
                        f"{cache_file}). From a Python script, call mining under "
                        "`if __name__ == '__main__':` (workers are spawned processes that import the script), "
                        "or use workers=1."
                    ) from None
            else:
                for item in tqdm(todo, desc="reports", disable=not progress):
                    keep(*_decompose_one(item))
    return done, len(todo)


class _Stopped(Exception):
    """A decomposition thread's report abandoned because the run is stopping."""


def _decompose_in_threads(
    todo: list[tuple[str, str, str]],
    decomposer: ReportDecomposer,
    levels: tuple[str, ...] | None,
    workers: int,
    keep: Callable[[str, dict], None],
    progress: bool,
) -> None:
    """Decompose `todo` with `decomposer` in `workers` threads (an LLM server answers several
    requests at once; the backend's rate limit is shared), keeping each report as it finishes. On
    the first failure or an interruption the reports not started are cancelled, those under way
    stop after their current request, and the failure is raised; finished reports are kept, and
    every answer already given sits in the LLM answer cache."""
    stop = threading.Event()

    def one(item: tuple[str, str, str]) -> tuple[str, dict]:
        study_id, report, modality = item
        if levels is None:
            entities = decomposer.ontology.entities(modality)
        else:
            entities = [e for level in levels for e in decomposer.ontology.entities(modality, level)]
        statements = {}
        for entity in entities:  # one entity at a time, so that a stopping run stops between requests
            if stop.is_set():
                raise _Stopped
            mentioned = decomposer.decompose(report, modality, [entity]).mentioned()
            statements.update({k: {"status": v.status.value, "sentences": v.sentences} for k, v in mentioned.items()})
        return study_id, statements

    bar = tqdm(total=len(todo), desc="reports", disable=not progress)
    pool = ThreadPoolExecutor(workers, thread_name_prefix="decompose")
    try:
        pending = {pool.submit(one, item) for item in todo}
        while pending:
            finished, pending = wait(pending, return_when=FIRST_EXCEPTION)
            for future in finished:
                if future.exception() is None:
                    keep(*future.result())
                    bar.update()
            for future in finished:
                if future.exception() is not None:
                    raise future.exception()
    finally:
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        bar.close()


def run_decomposer(
    rows: list[dict], cache_dir: Path, config: MiningConfig, progress: bool = True
) -> tuple[dict[str, dict], int]:
    """Decompose `rows` with the configured decomposer into `cache_dir` (resumable); returns the
    decompositions and how many were computed now."""
    cache_file = cache_dir / cache_file_name(config.identity)
    if config.decomposer == "rule":
        return decompose_all(rows, cache_file, config.workers, progress)
    if not any(r["study_id"] not in read_decomposition_cache(cache_file) for r in rows):
        return decompose_all(rows, cache_file, progress=False)  # all cached: no backend to build (or load)
    if config.llm is None:  # MiningConfig refuses this; kept for configs changed after construction
        raise ValueError("the llm decomposer needs LLM settings (--llm-url and --llm-model, or --llm-local)")
    workers = config.workers if config.llm.url else 1  # one local model generates one report at a time
    if workers != config.workers:
        logger.info("a local model decomposes one report at a time (workers=%d ignored)", config.workers)
    decomposer = build_llm_decomposer(config.llm, cache_dir / "llm")
    return decompose_all(rows, cache_file, workers, progress, decomposer, config.levels)


def mine(manifest: str | Path, out_dir: str | Path, config: MiningConfig | None = None, progress: bool = True) -> dict:
    """Run the whole pipeline; returns counts of what was written (also in `summary.json`)."""
    config = config or MiningConfig()
    out = Path(out_dir)
    rows = read_study_manifest(manifest)
    answerability = Answerability.beside(manifest)  # a broken table stops the run before any work
    out.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(out)
    split_studies(rows, config)  # the leakage checks, before any report is read
    raw, computed = run_decomposer(rows, out / "cache", config, progress)
    return write_mined_tables(rows, raw, out, config, computed, answerability=answerability)


def write_mined_tables(
    rows: list[dict],
    raw: dict[str, dict],
    out: Path,
    config: MiningConfig,
    computed: int,
    identity: dict | None = None,
    extra: dict | None = None,
    answerability: Answerability | None = None,
) -> dict:
    """The global steps over every study's decomposition (splits, triplets, retrieval,
    longitudinal labels, VQA), committed to `out`; returns the summary. `identity`: the
    decomposer that gave `raw` (default: the config's); `extra`: more summary entries;
    `answerability`: what the archive's images show, copied into the question tables."""
    studies = split_studies(rows, config)
    ontology = _worker_decomposer().ontology
    decompositions = _as_decompositions(rows, raw, ontology)
    entity_ids = sorted(
        {e.id for m in {r["modality"] for r in rows} for level in config.levels for e in ontology.entities(m, level)}
    )

    similarity = ReportSimilarity(
        [build_similarity_metric(name, config.text_encoder) for name in config.metrics],
        SimilarityThresholds(config.positive_threshold, config.negative_threshold),
    )
    triplets = build_triplets(decompositions, studies, entity_ids, similarity, config.triplets_per_anchor, config.seed)
    retrieval = [
        query
        for split in ("train", "validation", "test", "external")
        for query in build_retrieval_queries(decompositions, studies, entity_ids, similarity, split=split)
    ]
    longitudinal = longitudinal_labels(rows, decompositions, studies, entity_ids, answerability)
    vqa, report = comparative_vqa(decompositions, studies, entity_ids, ontology, config)

    tables = {
        "studies": [
            {
                **{k: r[k] for k in ("study_id", "patient_id", "modality", "report")},
                "image": image_path_beside(r["image"], out),
                "split": studies[r["study_id"]].split,
                "statements": json.dumps(raw[r["study_id"]]),
            }
            for r in rows
        ],
        "triplets": [t.to_dict() for t in triplets],
        "retrieval": [vars(q) for q in retrieval],
        "longitudinal": longitudinal,
        "vqa": vqa_rows(vqa, studies, answerability),
        "vqa_removed": vqa_rows(report.removed_by_language_prior, studies, answerability),
    }
    summary = {name: len(table) for name, table in tables.items()}
    summary.update(
        decomposed_now=computed,
        decomposer=identity or config.identity,
        vqa_generated=report.generated,
        vqa_language_prior_removed_share=round(report.language_prior_removed_share, 4),
        vqa_filters=report.removed(),  # every filter's removals (the bias filter reorders, removes none)
        vqa_language_prior_splits=list(config.language_prior_splits),
        levels=list(config.levels),
        answerability=answerability.summary() if answerability else None,
        **(extra or {}),
    )
    summary["tables"] = _commit_tables(tables, out, summary)
    return summary


def vqa_rows(samples, studies: dict[str, StudyInfo], answerability: Answerability | None = None) -> list[dict]:
    """VQA samples as rows of the mined `vqa` (or `vqa_removed`) table, with whether an image can
    answer each when the archive records it."""
    rows = []
    for s in samples:
        row = {**{k: v for k, v in s.to_dict().items() if k != "meta"}, "labels": list(s.labels)}
        row["split"] = studies[s.study_a].split
        if answerability is not None:
            modality = studies[s.study_a].modality
            row.update(answerability.columns(modality, s.entity_id, s.dimension, s.meta.get("attribute")))
        rows.append(row)
    return rows


def image_path_beside(image: str | Path, mined_dir: Path) -> str:
    """Where the studies table records `image`: relative to the mined folder when the image lies
    under the folder that holds it (a project folder with `cohort/` and `mined/`, which then works
    from any working directory and after being moved whole); absolute otherwise (an archive
    elsewhere stays where it is when the mined folder moves)."""
    image = Path(image).resolve()
    try:
        relative = os.path.relpath(image, mined_dir.resolve())
    except ValueError:  # another drive (Windows)
        return str(image)
    return str(image) if relative.startswith(os.path.join(os.pardir, os.pardir)) else relative


def split_studies(rows: list[dict], config: MiningConfig) -> dict[str, StudyInfo]:
    """Patient-level splits before any pairing; external cohorts form their own split (Table S2).
    A manifest with a `split` column (a dataset's official split) keeps it, patient by patient;
    otherwise patients are split by a salted hash (`config.split_fractions`)."""
    external = {r["patient_id"] for r in rows if r.get("source") in config.external_sources}
    internal = [r for r in rows if r["patient_id"] not in external]
    if rows and all(r.get("split") for r in rows):
        patient_splits = official_patient_splits(internal)
    else:
        patient_splits = assign_splits([r["patient_id"] for r in internal], config.split_fractions, config.split_salt)
    patient_splits.update({patient: "external" for patient in external})
    studies = {
        r["study_id"]: StudyInfo(r["study_id"], r["patient_id"], r["modality"], patient_splits[r["patient_id"]])
        for r in rows
    }
    check_patients({s: i.patient_id for s, i in studies.items()}, {s: i.split for s, i in studies.items()})
    return studies


def _as_decompositions(rows: list[dict], raw: dict[str, dict], ontology) -> dict[str, ReportDecomposition]:
    """The cached JSON statements back as decomposition objects."""
    decompositions = {}
    for row in rows:
        statements = {
            entity_id: EntityStatement(entity_id, MentionStatus(item["status"]), item["sentences"])
            for entity_id, item in raw[row["study_id"]].items()
        }
        decompositions[row["study_id"]] = ReportDecomposition(ontology.family_of(row["modality"]), {}, statements)
    return decompositions


def longitudinal_labels(
    rows: list[dict],
    decompositions: dict[str, ReportDecomposition],
    studies: dict[str, StudyInfo],
    entity_ids: list[str],
    answerability: Answerability | None = None,
) -> list[dict]:
    """Change labels for consecutive studies of each patient and modality (bidirectionally checked),
    with whether the images show each change when the archive records it."""
    timelines: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        timelines.setdefault((row["patient_id"], row["modality"]), []).append(row)
    labels = []
    for members in timelines.values():
        members.sort(key=lambda r: (r.get("study_date") or "", int(r.get("study_day") or 0)))
        for prior, current in itertools.pairwise(members):
            for entity_id in entity_ids:
                a = decompositions[prior["study_id"]].statements.get(entity_id)
                b = decompositions[current["study_id"]].statements.get(entity_id)
                label = consistent_change_label(a, b) if a is not None and b is not None else None
                if label is not None:
                    labels.append(
                        {
                            "prior": prior["study_id"],
                            "current": current["study_id"],
                            "patient_id": prior["patient_id"],
                            "entity_id": entity_id,
                            "label": label.label,
                            "attribute": label.attribute,
                            "split": studies[current["study_id"]].split,
                        }
                    )
                    if answerability is not None:
                        labels[-1].update(
                            answerability.columns(current["modality"], entity_id, "change", label.attribute)
                        )
    return labels


def pair_budget(config: MiningConfig, studies: int) -> int:
    """How many study pairs a (modality, split) group of `studies` studies asks questions about."""
    if config.vqa_pairs_per_study is None:
        return config.vqa_pairs_per_group
    return min(config.vqa_pairs_per_group, round(config.vqa_pairs_per_study * studies))


def comparative_vqa(
    decompositions, studies: dict[str, StudyInfo], entity_ids: list[str], ontology, config: MiningConfig
):
    """Questions over pairs of studies of one modality and split (drawn at random, no study or
    patient in more than its share: `sample_pairs`), then the filters of Table S4."""
    entity_map = {e.id: e for e in ontology.entities()}
    family_entities = {
        family: [entity_map[e] for e in entity_ids if entity_map[e].family == family] for family in ontology.families
    }
    groups: dict[tuple[str, str], list[str]] = {}
    for study_id, info in studies.items():
        groups.setdefault((info.modality, info.split), []).append(study_id)
    patient_of = {study_id: info.patient_id for study_id, info in studies.items()}
    pairs = (
        (a, b, studies[a].patient_id == studies[b].patient_id)
        for (modality, split), members in sorted(groups.items())
        for a, b in sample_pairs(
            members, patient_of, pair_budget(config, len(members)), f"{config.seed}:{modality}:{split}"
        )
    )
    statements = {s: d.statements for s, d in decompositions.items()}
    samples = vqa_over_pairs(
        pairs, statements, lambda study: family_entities[ontology.family_of(studies[study].modality)], config.seed
    )
    splits = set(config.language_prior_splits)
    return filter_vqa(samples, statements, entity_map, config.seed, lambda s: studies[s.study_a].split in splits)


def _commit_tables(tables: dict[str, list[dict]], out: Path, summary: dict) -> dict[str, str]:
    """Write every table aside, then swap them in between removing and rewriting `summary.json`,
    the folder's commit point (`mined.read_mined_summary` refuses a folder without it). Returns
    each table's fingerprint, as recorded in the summary."""
    import datasets

    staged = {}
    for name, table in tables.items():
        staged[name] = out / f".{name}.tmp"
        shutil.rmtree(staged[name], ignore_errors=True)
        if table:
            datasets.Dataset.from_list(table).save_to_disk(str(staged[name]))
        else:  # `datasets` cannot save a table without rows
            staged[name].mkdir(parents=True)
    remove_atomically(out / SUMMARY_FILE)
    for name, folder in staged.items():
        commit_folder(folder, out / name)
    fingerprints = {name: table_fingerprint(out / name) for name in tables}
    write_text_atomically(out / SUMMARY_FILE, json.dumps({**summary, "tables": fingerprints}, indent=2))
    return fingerprints


__all__ = [
    "ManifestError",
    "MiningConfig",
    "MiningWorkerError",
    "comparative_vqa",
    "decompose_all",
    "longitudinal_labels",
    "mine",
    "read_decomposition_cache",
    "read_study_manifest",
    "run_decomposer",
    "split_studies",
    "write_mined_tables",
]
