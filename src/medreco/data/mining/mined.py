"""The mined tables, read back: what `medreco mine` (`pipeline.py`) writes, as memory-mapped row views.

Tables: `studies` (one row per study: image, patient, modality, split, report, entity statements),
`triplets`, `retrieval` (relevance judgements per query and entity), `longitudinal`, `vqa` and
`vqa_removed` (training questions the language-prior filter removed)."""

from __future__ import annotations

import bisect
import copy
import functools
import itertools
import json
import operator
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ...errors import TrainingDataError

if TYPE_CHECKING:
    import pyarrow as pa

MINED_TABLES = ("studies", "triplets", "retrieval", "longitudinal", "vqa", "vqa_removed")
SUMMARY_FILE = "summary.json"  # written last: a mined folder without it is unfinished
BATCH_ROWS = 1_000  # rows a view reads at a time while iterated
# the studies each table's rows refer to: `MinedData.rows` keeps a row only when all are known
STUDY_COLUMNS = {
    "studies": ("study_id",),
    "triplets": ("anchor", "positive", "negative"),
    "retrieval": ("query",),
    "longitudinal": ("prior", "current"),
    "vqa": ("study_a", "study_b"),
    "vqa_removed": ("study_a", "study_b"),
}


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


class _Rows(Sequence[dict]):
    """Read-only rows; `+` with any sequence of rows chains them without copying either."""

    def __add__(self, other: Sequence[dict]) -> ChainedRows:
        return ChainedRows((self, other)) if isinstance(other, Sequence) else NotImplemented

    def __radd__(self, other: Sequence[dict]) -> ChainedRows:
        return ChainedRows((other, self)) if isinstance(other, Sequence) else NotImplemented


class MinedRows(_Rows):
    """Some rows of a mined table, memory-mapped as `datasets` saved it: the Arrow table and the
    positions of the rows (`indices`, int64), no rows. Rows are read when asked for, as the dicts
    `Dataset.to_list()` gives (Arrow's `to_pylist`; medreco's tables have no `Json` columns);
    iteration reads `BATCH_ROWS` at a time, a slice is another view."""

    def __init__(self, table: pa.Table | None, indices: np.ndarray | None = None):
        self.table = table
        size = 0 if table is None else table.num_rows
        self.indices = np.arange(size, dtype=np.int64) if indices is None else np.asarray(indices, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, item):
        if isinstance(item, slice):
            view = copy.copy(self)  # the same table (and record batches, once found)
            view.indices = self.indices[item]
            return view
        position = int(self.indices[operator.index(item)])  # IndexError out of range, negatives counted back
        return self.table.slice(position, 1).to_pylist()[0]  # a zero-copy slice

    def __iter__(self) -> Iterator[dict]:
        for start in range(0, len(self.indices), BATCH_ROWS):
            yield from self._read(self.indices[start : start + BATCH_ROWS])

    @functools.cached_property
    def _batches(self) -> tuple[list[pa.RecordBatch], np.ndarray]:
        """The table's record batches (zero-copy) and the position of each one's first row."""
        batches = self.table.to_batches()
        return batches, np.cumsum([0, *(batch.num_rows for batch in batches)])

    def _read(self, positions: np.ndarray) -> list[dict]:
        """The rows at `positions`, taken from each record batch in turn: a take over the whole
        table would concatenate its chunks first, a copy of the table for every read."""
        batches, starts = self._batches
        chunk = np.searchsorted(starts, positions, side="right") - 1
        runs = np.flatnonzero(np.diff(chunk, prepend=-1))  # where the rows move to another batch
        rows = []
        for begin, end in zip(runs, [*runs[1:], len(positions)]):
            batch = chunk[begin]
            rows += batches[batch].take(positions[begin:end] - starts[batch]).to_pylist()
        return rows

    def __repr__(self) -> str:
        return f"MinedRows({len(self)} rows)"


class ChainedRows(_Rows):
    """Sequences of rows one after the other (what `+` on row views gives), none of them copied.
    A slice with step 1 is another chain; any other step gives a list."""

    def __init__(self, parts: Sequence[Sequence[dict]]):
        self.parts = tuple(p for part in parts for p in (part.parts if isinstance(part, ChainedRows) else (part,)))
        self._ends = list(itertools.accumulate(len(p) for p in self.parts))

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def __getitem__(self, item):
        if isinstance(item, slice):
            wanted = range(len(self))[item]
            if wanted.step != 1:
                return [self[i] for i in wanted]
            start, stop = wanted.start, wanted.stop
            spans = zip(self.parts, [0, *self._ends[:-1]], self._ends)
            return ChainedRows(
                [p[max(start - begin, 0) : stop - begin] for p, begin, end in spans if begin < stop and start < end]
            )
        position = range(len(self))[operator.index(item)]  # IndexError out of range, negatives counted back
        part = bisect.bisect_right(self._ends, position)
        return self.parts[part][position - (self._ends[part - 1] if part else 0)]

    def __iter__(self) -> Iterator[dict]:
        return itertools.chain.from_iterable(self.parts)

    def __repr__(self) -> str:
        return f"ChainedRows({len(self)} rows in {len(self.parts)} parts)"


class MinedData:
    """The datasets written by `medreco mine`: the studies read into `studies`, the other tables kept
    memory-mapped and read through row views (`rows`)."""

    def __init__(self, mined_dir: str | Path, modalities: Sequence[str] | None = None):
        self.directory = Path(mined_dir)
        if not str(mined_dir) or not (self.directory / "studies").is_dir():
            raise TrainingDataError(
                f"{self.directory}: no mined data here (expected {self.directory / 'studies'}; run `medreco mine`)"
            )
        self.summary = read_mined_summary(self.directory)
        self._tables: dict[str, pa.Table | None] = {}  # each table opened (memory-mapped) when first asked for
        keep = set(modalities) if modalities else None
        self.studies: dict[str, Study] = {}
        for row in MinedRows(self._table("studies")):
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

    def _table(self, name: str) -> pa.Table | None:
        """The table's rows as saved, memory-mapped (None for a table without rows)."""
        if name not in self._tables:
            import datasets

            path = self.directory / name
            # `load_from_disk` maps the Arrow files and gives no indices mapping: `.data.table` is the rows
            self._tables[name] = datasets.load_from_disk(str(path)).data.table if has_rows(path) else None
        return self._tables[name]

    def _image_path(self, stored: str) -> Path:
        """A study's image: `mine` stores paths relative to the mined folder. Tables mined by
        earlier versions hold paths relative to the working directory of the time, tried second."""
        image = Path(stored)
        if image.is_absolute():
            return image
        beside = Path(os.path.normpath(self.directory.resolve() / image))
        return beside if beside.exists() or not image.exists() else image

    def rows(self, table: str, split: str | None = None) -> MinedRows:
        """Rows of a table whose studies are all known (and of `split` when given), as a view over
        the memory-mapped table: the filter reads only the columns it tests, column-wise."""
        import pyarrow as pa
        import pyarrow.compute as pc

        columns, arrow = STUDY_COLUMNS[table], self._table(table)
        if arrow is None:
            return MinedRows(None)
        known = pa.array(list(self.studies), pa.string())
        tests = [pc.is_in(arrow.column(name), value_set=known) for name in columns]
        if split is not None:
            tests.append(pc.equal(arrow.column("split"), split))
        keep = np.ones(arrow.num_rows, dtype=bool)
        for test in tests:
            keep &= pc.fill_null(test, False).to_numpy(zero_copy_only=False)
        return MinedRows(arrow, np.flatnonzero(keep))

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
        mentioning = self.mentioning(split) if rows and "irrelevant" not in rows[0] else None  # one schema per table
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
    "ChainedRows",
    "MinedData",
    "MinedRows",
    "Study",
    "has_rows",
    "read_mined_summary",
    "table_fingerprint",
]
