"""Scale-out mining: decompose a manifest in N shards on any scheduler, then merge.

Report decomposition is the expensive, independent step; everything after it (patient splits,
triplets, retrieval, longitudinal labels, VQA) needs every study at once. So `mine_shard`
decomposes only the studies whose id hashes to its index (stable under reordering of the
manifest; every study in exactly one shard; a patient's studies may land in several, since
splits are computed at the merge) into `OUT/shard-IIII-of-NNNN/`, resumable like `mine`, and
commits `shard.json` last (manifest path and fingerprint, index, count, settings and their
fingerprint). `merge_shards` checks that all N shards are there, finished, of one manifest and
one set of settings, then runs the global steps: the tables are those `mine` writes in one run."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from ...atomic import remove_atomically, remove_stale_temporaries, write_text_atomically
from ...errors import MedReCoError
from .answerability import Answerability
from .decomposers import cache_file_name
from .pipeline import (
    MiningConfig,
    read_decomposition_cache,
    read_study_manifest,
    run_decomposer,
    split_studies,
    write_mined_tables,
)

SHARD_FILE = "shard.json"  # written last: a shard folder without it did not finish
SHARD_FORMAT = 1
INDEX_VARIABLES = ("SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX")  # SLURM job arrays, Kubernetes indexed jobs
COUNT_VARIABLE = "SLURM_ARRAY_TASK_COUNT"
_FOLDER = re.compile(r"shard-\d+-of-\d+")


class ShardError(MedReCoError, ValueError):
    """A shard specification, shard folder or set of shards that cannot be used; names it and why."""


def shard_of(study_id: str, count: int) -> int:
    """The shard a study belongs to: its id's hash modulo `count` (not its manifest position)."""
    return int.from_bytes(hashlib.sha256(study_id.encode()).digest()[:8], "big") % count


@dataclass(frozen=True)
class Shard:
    """Shard `index` (from 0) of `count`."""

    index: int
    count: int

    def __post_init__(self):
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ShardError(
                f"shard {self.index}/{self.count}: the index runs from 0 to {self.count - 1} "
                f"(a SLURM job array: --array=0-{self.count - 1})"
            )

    @classmethod
    def parse(cls, text: str, environ: Mapping[str, str] | None = None) -> Shard:
        """`I/N`; `auto/N` (the index from SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX); or `auto`
        (also the count, from SLURM_ARRAY_TASK_COUNT)."""
        environ = os.environ if environ is None else environ
        index, _, count = text.strip().partition("/")
        if index == "auto":
            found = [environ[name] for name in INDEX_VARIABLES if environ.get(name)]
            if not found:
                raise ShardError(f"--shard {text}: neither {' nor '.join(INDEX_VARIABLES)} is set")
            index = found[0]
            if not count:
                count = environ.get(COUNT_VARIABLE, "")
                if not count:
                    raise ShardError(f"--shard auto: {COUNT_VARIABLE} is not set; give the count, e.g. --shard auto/8")
        if not (index.isdigit() and count.isdigit()):
            raise ShardError(f"--shard {text}: expected I/N (e.g. 0/8), auto/N or auto")
        return cls(int(index), int(count))

    @property
    def folder_name(self) -> str:
        return f"shard-{self.index:04d}-of-{self.count:04d}"

    def owns(self, study_id: str) -> bool:
        return shard_of(study_id, self.count) == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def file_fingerprint(path: Path) -> str:
    """SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def settings_record(config: MiningConfig) -> dict:
    """Every setting that shapes the mined tables, as JSON (not the workers, the LLM's address,
    key, rate or timeout: shards may run on different machines against different replicas)."""
    settings = {
        f.name: getattr(config, f.name) for f in fields(config) if f.name not in ("workers", "decomposer", "llm")
    }
    settings["decomposer"] = config.identity
    return json.loads(json.dumps(settings))  # key order kept: the split fractions' order shapes the splits


def _fingerprint(value) -> str:
    return hashlib.sha256(json.dumps(value).encode()).hexdigest()


def _ids_fingerprint(study_ids: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(sorted(study_ids)).encode()).hexdigest()


def mine_shard(
    manifest: str | Path, out_dir: str | Path, config: MiningConfig, shard: Shard, progress: bool = True
) -> dict:
    """Decompose this shard's studies into `out_dir/shard-IIII-of-NNNN/` (resumes); returns its record."""
    manifest = Path(manifest).absolute()
    rows = read_study_manifest(manifest)
    split_studies(rows, config)  # the manifest's leakage checks fail here, not after the last shard
    folder = Path(out_dir) / shard.folder_name
    folder.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(folder)
    remove_atomically(folder / SHARD_FILE)  # until this run finishes, the folder is not a finished shard
    owned = [r for r in rows if shard.owns(r["study_id"])]
    _, computed = run_decomposer(owned, folder / "cache", config, progress)
    settings = settings_record(config)
    record = {
        "format": SHARD_FORMAT,
        "shard": shard.index,
        "shards": shard.count,
        "manifest": str(manifest),
        "manifest_sha256": file_fingerprint(manifest),
        "studies": len(owned),
        "study_ids_sha256": _ids_fingerprint([r["study_id"] for r in owned]),
        "settings": settings,
        "settings_sha256": _fingerprint(settings),
    }
    write_text_atomically(folder / SHARD_FILE, json.dumps(record, indent=2))
    return {**{k: v for k, v in record.items() if k != "settings"}, "decomposed_now": computed, "folder": str(folder)}


def find_shard_folders(paths: Sequence[str | Path]) -> list[Path]:
    """The shard folders among `paths`: each is a shard folder or a folder holding them."""
    found: list[Path] = []
    for path in map(Path, paths):
        if (path / SHARD_FILE).exists():
            found.append(path)
        elif path.is_dir():
            inside = sorted(p for p in path.iterdir() if p.is_dir() and _FOLDER.fullmatch(p.name))
            if not inside:
                raise ShardError(f"{path}: neither a shard folder ({SHARD_FILE}) nor a folder of shard-*-of-* folders")
            for folder in inside:
                if not (folder / SHARD_FILE).exists():
                    raise ShardError(f"{folder}: this shard did not finish (no {SHARD_FILE}); run it again, it resumes")
            found += inside
        else:
            raise ShardError(f"{path}: no such shard folder")
    return found


def _read_record(folder: Path) -> dict:
    path = folder / SHARD_FILE
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ShardError(f"{path}: damaged ({error.msg}); run the shard again") from None
    if not isinstance(record, dict) or record.get("format") != SHARD_FORMAT:
        raise ShardError(f"{path}: not a shard record this version of medreco writes (format {SHARD_FORMAT})")
    return record


def check_shards(folders: Sequence[Path]) -> list[tuple[Path, dict]]:
    """The shards' records after checking they are one complete set: the same count, manifest and
    settings, every index exactly once. Sorted by index."""
    shards = [(folder, _read_record(folder)) for folder in folders]
    first_folder, first = shards[0]
    for folder, record in shards[1:]:
        for key, what in (
            ("shards", "shard count"),
            ("manifest_sha256", "manifest"),
            ("settings_sha256", "mining settings"),
        ):
            if record.get(key) != first.get(key):
                difference = ""
                if key == "settings_sha256":
                    names = sorted(
                        name
                        for name in {*record["settings"], *first["settings"]}
                        if record["settings"].get(name) != first["settings"].get(name)
                    )
                    difference = f" ({', '.join(names)})"
                raise ShardError(f"{folder}: another {what}{difference} than {first_folder}; mine every shard alike")
    count = first["shards"]
    by_index: dict[int, Path] = {}
    for folder, record in shards:
        if record["shard"] in by_index:
            raise ShardError(f"shard {record['shard']}/{count} given twice: {by_index[record['shard']]} and {folder}")
        by_index[record["shard"]] = folder
    missing = sorted(set(range(count)) - set(by_index))
    if missing:
        raise ShardError(
            f"shard{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} of {count} missing "
            f"(found {len(by_index)}: {first_folder.parent})"
        )
    return sorted(shards, key=lambda item: item[1]["shard"])


def _config_from_settings(settings: dict, where: Path) -> MiningConfig:
    """The global steps' settings back from a shard record (decomposition is done: rule stands in)."""
    tuples = {f.name for f in fields(MiningConfig) if "tuple" in str(f.type)}
    values = {
        k: tuple(v) if k in tuples and isinstance(v, list) else v for k, v in settings.items() if k != "decomposer"
    }
    try:
        return MiningConfig(**values)
    except TypeError as error:
        raise ShardError(f"{where}: settings this version of medreco does not know ({error})") from None


def merge_shards(
    shard_paths: Sequence[str | Path], out_dir: str | Path, progress: bool = True, manifest: str | Path | None = None
) -> dict:
    """Check the shards (`check_shards`), gather their decompositions and write the mined tables
    to `out_dir`, as `mine` would from the same manifest and settings. `manifest`: where the
    manifest is now, when not at the path the shards recorded (its content must be the same)."""
    shards = check_shards(find_shard_folders(shard_paths))
    first_folder, first = shards[0]
    manifest = Path(manifest or first["manifest"])
    if not manifest.exists():
        raise ShardError(f"{manifest}: the manifest the shards were mined from is not there")
    if file_fingerprint(manifest) != first["manifest_sha256"]:
        raise ShardError(f"{manifest}: changed since the shards were mined (another SHA-256); mine them again")
    rows = read_study_manifest(manifest)
    answerability = Answerability.beside(manifest)
    config = _config_from_settings(first["settings"], first_folder / SHARD_FILE)
    identity = first["settings"]["decomposer"]
    raw: dict[str, dict] = {}
    for folder, record in shards:
        shard = Shard(record["shard"], record["shards"])
        owned = [r["study_id"] for r in rows if shard.owns(r["study_id"])]
        if _ids_fingerprint(owned) != record.get("study_ids_sha256"):
            raise ShardError(f"{folder}: holds other studies than shard {shard} of this manifest")
        cache = read_decomposition_cache(folder / "cache" / cache_file_name(identity))
        absent = [s for s in owned if s not in cache]
        if absent:
            raise ShardError(f"{folder}: {len(absent)} of its {len(owned)} studies have no decomposition; run it again")
        raw.update((s, cache[s]) for s in owned)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(out)
    _write_merged_cache(out / "cache" / cache_file_name(identity), rows, raw)
    return write_mined_tables(
        rows,
        raw,
        out,
        config,
        computed=0,
        identity=identity,
        extra={"merged_shards": len(shards)},
        answerability=answerability,
    )


def _write_merged_cache(cache_file: Path, rows: list[dict], raw: dict[str, dict]) -> None:
    """Every decomposition in the merged folder's cache (as a single run leaves it, so `medreco
    mine` there resumes with nothing to decompose); what the file held before is kept."""
    kept = read_decomposition_cache(cache_file)
    kept.update(raw)
    order = [r["study_id"] for r in rows] + [s for s in kept if s not in raw]
    lines = (json.dumps({"study_id": s, "statements": kept[s]}) + "\n" for s in order)
    write_text_atomically(cache_file, "".join(lines))


__all__ = [
    "INDEX_VARIABLES",
    "SHARD_FILE",
    "Shard",
    "ShardError",
    "check_shards",
    "find_shard_folders",
    "merge_shards",
    "mine_shard",
    "settings_record",
    "shard_of",
]
