"""The mined tables, read back: what `medreco mine` (`pipeline.py`) writes, as plain Python rows.

Tables: `studies` (one row per study: image, patient, modality, split, report, entity statements),
`triplets`, `retrieval` (relevance judgements per query and entity), `longitudinal`, `vqa` and
`vqa_removed` (training questions the language-prior filter removed)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import TrainingDataError

MINED_TABLES = ("studies", "triplets", "retrieval", "longitudinal", "vqa", "vqa_removed")
SUMMARY_FILE = "summary.json"  # written last: a mined folder without it is unfinished


def has_rows(table: Path) -> bool:
    """Whether a mined table folder holds rows: a table with none is an empty folder (`datasets`
    cannot save a dataset without rows), a missing folder a table never written."""
    return table.is_dir() and any(table.iterdir())


def table_fingerprint(table: Path) -> str | None:
    """The fingerprint `datasets` gave a saved table ("" for a table without rows, None when missing)."""
    if not table.is_dir():
        return None
    state = table / "state.json"
    return json.loads(state.read_text()).get("_fingerprint", "") if state.exists() else ""


def read_mined_summary(directory: Path) -> dict:
    """The summary of a finished mining run, after checking that every table is the one it wrote.

    `mine` removes the summary before replacing any table and writes it (with each table's
    fingerprint) after the last, so a run killed in between leaves a folder refused here, never
    new tables read beside old ones. Summaries of earlier versions hold no fingerprints."""
    path = directory / SUMMARY_FILE
    if not path.exists():
        raise TrainingDataError(
            f"{directory}: mining did not finish here (no {SUMMARY_FILE}); run `medreco mine` again, "
            "it resumes from its cache"
        )
    try:
        summary = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise TrainingDataError(f"{path}: damaged ({error.msg}); run `medreco mine` again") from None
    for name, fingerprint in summary.get("tables", {}).items():
        found = table_fingerprint(directory / name)
        if found != fingerprint:
            problem = "is missing" if found is None else "is not the table this mining run wrote"
            raise TrainingDataError(f"{directory / name}: {problem}; run `medreco mine` again")
    return summary


@dataclass
class Study:
    study_id: str
    patient_id: str
    modality: str
    image: str
    split: str
    report: str = ""
    statements: dict = field(default_factory=dict)

    def status(self, entity_id: str) -> str | None:
        statement = self.statements.get(entity_id)
        return statement["status"] if statement else None


class MinedData:
    """The datasets written by `medreco mine`, read once into plain Python rows."""

    def __init__(self, mined_dir: str | Path, modalities: Sequence[str] | None = None):
        self.directory = Path(mined_dir)
        if not str(mined_dir) or not (self.directory / "studies").is_dir():
            raise TrainingDataError(
                f"{self.directory}: no mined data here (expected {self.directory / 'studies'}; run `medreco mine`)"
            )
        self.summary = read_mined_summary(self.directory)
        self._tables: dict[str, list[dict]] = {}  # each table read when first asked for
        keep = set(modalities) if modalities else None
        self.studies: dict[str, Study] = {}
        for row in self._table("studies"):
            if keep is not None and row["modality"] not in keep:
                continue
            image = self._image_path(row["image"])
            if not image.exists():
                raise TrainingDataError(f"{image}: image of study {row['study_id']} not found (moved cohort?)")
            self.studies[row["study_id"]] = Study(
                row["study_id"],
                row["patient_id"],
                row["modality"],
                str(image),
                row["split"],
                row.get("report") or "",
                json.loads(row["statements"]) if row.get("statements") else {},
            )

    def _table(self, name: str) -> list[dict]:
        if name not in self._tables:
            import datasets

            path = self.directory / name
            self._tables[name] = datasets.load_from_disk(str(path)).to_list() if has_rows(path) else []
        return self._tables[name]

    def _image_path(self, stored: str) -> Path:
        """A study's image: `mine` stores paths relative to the mined folder. Tables mined by
        earlier versions hold paths relative to the working directory of the time, tried second."""
        image = Path(stored)
        if image.is_absolute():
            return image
        beside = Path(os.path.normpath(self.directory.resolve() / image))
        return beside if beside.exists() or not image.exists() else image

    def rows(self, table: str, split: str | None = None) -> list[dict]:
        """Rows of a table whose studies are all known (and of `split` when given)."""
        keys = {"triplets": ("anchor", "positive", "negative"), "retrieval": ("query",), "vqa": ("study_a", "study_b")}
        keys["vqa_removed"] = keys["vqa"]
        keys.update(longitudinal=("prior", "current"), studies=("study_id",))
        return [
            row
            for row in self._table(table)
            if (split is None or row["split"] == split) and all(row[k] in self.studies for k in keys[table])
        ]

    def study_ids(self, split: str | None = None) -> list[str]:
        return [s for s, study in self.studies.items() if split is None or study.split == split]

    def relevance_table(self, split: str | None = None) -> dict[tuple[str, str], tuple[set[str], set[str]]]:
        """(query, entity_id) -> (judged, relevant) from the retrieval table, for training labels.

        `judged` holds the relevant studies and those the mining thresholds call irrelevant. The rest
        of the gallery is unknown, not irrelevant: a report silent on the entity ("no effusion" and
        an effusion never mentioned look the same), or statements in between the thresholds ("heart
        size is normal" against "no cardiomegaly"). Calling those negatives would teach the model
        that identical images differ. Tables mined before the `irrelevant` column existed fall back
        to the studies that mention the entity."""
        rows = self.rows("retrieval", split)
        mentioning = None if all("irrelevant" in row for row in rows) else self.mentioning(split)
        table = {}
        for row in rows:
            relevant = set(row["relevant"])
            if mentioning is None:
                judged = relevant | set(row["irrelevant"])
            else:
                judged = set(row["gallery"]) & mentioning[row["entity_id"]]
            table[(row["query"], row["entity_id"])] = (judged, relevant)
        return table

    def mentioning(self, split: str | None = None) -> dict[str, set[str]]:
        """entity_id -> the studies whose reports state something about it (queries and relevant
        studies of the retrieval table)."""
        mentioning: dict[str, set[str]] = {}
        for row in self.rows("retrieval", split):
            mentioning.setdefault(row["entity_id"], set()).update([row["query"], *row["relevant"]])
        return mentioning


__all__ = [
    "MINED_TABLES",
    "SUMMARY_FILE",
    "MinedData",
    "Study",
    "has_rows",
    "read_mined_summary",
    "table_fingerprint",
]
