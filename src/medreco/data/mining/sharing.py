"""Share mined supervision on the Hub as a dataset: one configuration per table, split by the
patient-level splits of `medreco mine`, with a dataset card.

What leaves the machine is decided column by column (`SHARED_COLUMNS`), never by what a table
happens to hold: patient and study identifiers become pseudonyms (`patient-0001`, `study-0001`,
numbered in an order keyed by a random secret, so neither the numbering nor a hash reveals the
originals), image paths stay home, and report text (the `report` column and the sentence behind
each entity statement) goes up only when asked for. The pseudonym table, which links back to the
archive, is written locally for the user to keep."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import DatasetCard, DatasetCardData

from ...atomic import atomic_path
from ...hub.push import HubPushError, PushResult, check_repo_id, upload_folder
from .mined import MINED_TABLES, has_rows, read_mined_summary

logger = logging.getLogger(__name__)

# The columns each table shares; any other column (a future one included) stays home.
SHARED_COLUMNS = {
    "studies": ("study_id", "patient_id", "modality", "split", "statements"),
    "triplets": ("anchor", "positive", "negative", "entity_id", "modality", "split"),
    "retrieval": ("query", "entity_id", "modality", "split", "gallery", "relevant", "irrelevant"),
    "longitudinal": ("prior", "current", "patient_id", "entity_id", "label", "attribute", "split"),
    "vqa": (
        "study_a",
        "study_b",
        "entity_id",
        "dimension",
        "question",
        "options",
        "answer",
        "open_question",
        "open_answer",
        "labels",
        "split",
    ),
}
SHARED_COLUMNS["vqa_removed"] = SHARED_COLUMNS["vqa"]
STUDY_COLUMNS = {"study_id", "anchor", "positive", "negative", "query", "gallery", "relevant", "irrelevant"}
STUDY_COLUMNS |= {"prior", "current", "study_a", "study_b"}


@dataclass(frozen=True)
class SharedDataset:
    """The shareable tables (table -> split -> rows) and the pseudonyms (original -> pseudonym)."""

    tables: dict[str, dict[str, list[dict]]]
    patients: dict[str, str]
    studies: dict[str, str]
    include_reports: bool


def _pseudonyms(originals: set[str], prefix: str, key: bytes) -> dict[str, str]:
    order = sorted(originals, key=lambda value: hashlib.blake2b(value.encode(), key=key).hexdigest())
    width = max(4, len(str(len(order))))
    return {original: f"{prefix}-{index:0{width}d}" for index, original in enumerate(order, start=1)}


def shareable_tables(mined_dir: str | Path, include_reports: bool = False) -> SharedDataset:
    """Read the tables `medreco mine` wrote and keep what may be shared (see the module docstring)."""
    import datasets

    mined_dir = Path(mined_dir)
    if not (mined_dir / "studies").is_dir():
        raise HubPushError(f"{mined_dir}: not a mined folder (no studies/ table; run `medreco mine`)")
    read_mined_summary(mined_dir)  # a folder whose mining was interrupted is never pushed
    raw = {
        name: datasets.load_from_disk(str(mined_dir / name)).to_list()
        for name in MINED_TABLES
        if has_rows(mined_dir / name)
    }
    key = secrets.token_bytes(32)  # never stored: the numbering cannot be recomputed from the originals
    patients = _pseudonyms(
        {row["patient_id"] for rows in raw.values() for row in rows if "patient_id" in row}, "patient", key
    )
    study_ids = {row["study_id"] for row in raw["studies"]}
    studies = _pseudonyms(study_ids, "study", key)
    columns = {
        name: [*SHARED_COLUMNS[name], *(["report"] if include_reports and name == "studies" else [])] for name in raw
    }
    tables: dict[str, dict[str, list[dict]]] = {}
    for name, rows in raw.items():
        for row in rows:
            try:
                shared = {
                    column: _share(column, row[column], patients, studies, include_reports)
                    for column in columns[name]
                    if column in row
                }
            except KeyError as error:
                raise HubPushError(f"{mined_dir / name}: study {error} is not in the studies table") from None
            tables.setdefault(name, {}).setdefault(row["split"], []).append(shared)
    order = random.Random(key)
    for splits in tables.values():  # the archive's row order (by MRN, by date, ...) does not go up either
        for rows in splits.values():
            order.shuffle(rows)
    dropped = {name: sorted(set(rows[0]) - set(columns[name])) for name, rows in raw.items() if rows}
    logger.info("kept home: %s", {name: cols for name, cols in dropped.items() if cols})
    return SharedDataset(tables, patients, studies, include_reports)


def _share(column: str, value, patients: dict[str, str], studies: dict[str, str], include_reports: bool):
    if column == "patient_id":
        return patients[value]
    if column in STUDY_COLUMNS:
        return [studies[v] for v in value] if isinstance(value, list) else studies[value]
    if column == "statements" and not include_reports:
        statements = json.loads(value) if value else {}
        return json.dumps({entity: {"status": s["status"]} for entity, s in statements.items()}, sort_keys=True)
    return value


def dataset_card(shared: SharedDataset, repo_id: str) -> DatasetCard:
    """The card: one configuration per table with its splits, what each holds, and the privacy terms."""
    configs = [
        {
            "config_name": table,
            "data_files": [{"split": split, "path": f"{table}/{split}.parquet"} for split in sorted(splits)],
        }
        for table, splits in shared.tables.items()
    ]
    metadata = DatasetCardData(
        license="other",
        pretty_name=repo_id.split("/")[-1],
        tags=["medreco", "radiology", "medical-imaging", "comparative-reasoning", "pseudonymised"],
        task_categories=["visual-question-answering", "image-feature-extraction"],
        configs=configs,
    )
    counts = "\n".join(
        f"| {table} | " + ", ".join(f"{split} {len(rows)}" for split, rows in sorted(splits.items())) + " |"
        for table, splits in shared.tables.items()
    )
    reports = (
        "It **includes report text** (the `report` column and each statement's sentence), shared on purpose."
        if shared.include_reports
        else "Report text is not included: entity statements carry their status (present, absent, ...) only."
    )
    text = f"""
# {repo_id.split("/")[-1]}

Supervision mined from radiology reports by `medreco mine` (MedReCo: comparative reasoning in
radiology): entity statements per study, retrieval triplets and relevance judgements, longitudinal
change labels and comparative visual questions. Splits are patient-level: no patient appears in
two splits.

| table | rows per split |
|---|---|
{counts}

```python
from datasets import load_dataset
vqa = load_dataset("{repo_id}", "vqa")  # or {", ".join(t for t in shared.tables if t != "vqa")}
```

## Privacy

Patients and studies are pseudonyms (`patient-0001`, `study-0001`), numbered in an order keyed by
a secret that was never stored, and rows are shuffled; image paths are not included. {reports}
The questions, options and answers are generated from the reports' statements and carry their
clinical facts (side, size, margins), not report text. The table linking pseudonyms to the
archive's identifiers stayed with whoever pushed this dataset. The images are not part of it.

## Licence

The data's terms are those of the archive it was mined from (`license: other`).
"""
    return DatasetCard(f"---\n{metadata.to_yaml()}\n---\n{text}")


def push_mined_dataset(
    mined_dir: str | Path,
    repo_id: str,
    pseudonyms_file: str | Path,
    private: bool = False,
    revision: str | None = None,
    include_reports: bool = False,
    commit_message: str | None = None,
    token: str | None = None,
) -> PushResult:
    """Upload the mined tables of `mined_dir` as the dataset repository `repo_id` (parquet per table
    and split, and a dataset card); the pseudonym table goes to `pseudonyms_file` (local, owner-only),
    in place once the upload succeeded. A pseudonym table of another repository or revision is never
    overwritten: the link to what is already on the Hub would be lost."""
    import datasets

    check_repo_id(repo_id)
    pseudonyms_file = Path(pseudonyms_file)
    revision = revision or "main"
    if pseudonyms_file.exists():
        earlier = json.loads(pseudonyms_file.read_text())
        if (earlier.get("repo_id"), earlier.get("revision")) != (repo_id, revision):
            raise HubPushError(
                f"{pseudonyms_file}: holds the pseudonyms of {earlier.get('repo_id')}@{earlier.get('revision')}; "
                "choose another --pseudonyms file"
            )
    shared = shareable_tables(mined_dir, include_reports)
    if include_reports:
        logger.warning(
            "%s: pushing report text to %s (include_reports); share it only as your data agreements allow",
            mined_dir,
            repo_id,
        )
    mapping = {"repo_id": repo_id, "revision": revision, "patients": shared.patients, "studies": shared.studies}
    try:
        with atomic_path(pseudonyms_file, mode=0o600) as pending, tempfile.TemporaryDirectory() as temporary:
            pending.write_text(json.dumps(mapping, indent=2, sort_keys=True) + "\n")
            os.chmod(pending, 0o600)  # private from the start, not only once in place
            folder = Path(temporary) / repo_id.split("/")[-1]
            for table, splits in shared.tables.items():
                for split, rows in splits.items():
                    (folder / table).mkdir(parents=True, exist_ok=True)
                    datasets.Dataset.from_list(rows).to_parquet(str(folder / table / f"{split}.parquet"))
            dataset_card(shared, repo_id).save(folder / "README.md")
            # the pseudonym table is renamed into place only after the upload succeeded
            return upload_folder(folder, repo_id, "dataset", private, revision, commit_message, token)
    except OSError as error:
        raise HubPushError(f"{pseudonyms_file}: cannot write the pseudonym table ({error.strerror or error})") from None


__all__ = ["SHARED_COLUMNS", "SharedDataset", "dataset_card", "push_mined_dataset", "shareable_tables"]
