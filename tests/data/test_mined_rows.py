"""`MinedData.rows`: views over the memory-mapped mined tables give the rows `to_list()` gave."""

from __future__ import annotations

import json
import random
import shutil

import datasets
import numpy as np
import pyarrow as pa
import pytest

from medreco.data.mining import ChainedRows, MinedData, MinedRows
from medreco.data.mining import mined as mined_module
from medreco.data.mining.mined import SUMMARY_FILE, has_rows, table_fingerprint
from medreco.evaluation.vqa import sample_rows
from toy_mined import write_toy_mined

TABLES = ("studies", "triplets", "retrieval", "longitudinal", "vqa", "vqa_removed")
# the studies a row refers to, as `rows` filtered them when it read whole tables
KEYS = {
    "studies": ("study_id",),
    "triplets": ("anchor", "positive", "negative"),
    "retrieval": ("query",),
    "longitudinal": ("prior", "current"),
    "vqa": ("study_a", "study_b"),
    "vqa_removed": ("study_a", "study_b"),
}


def _write(folder, name: str, rows: list[dict]) -> None:
    shutil.rmtree(folder / name, ignore_errors=True)
    if rows:  # in three files: the table is read across record batches
        datasets.Dataset.from_list(rows).save_to_disk(str(folder / name), num_shards=min(3, len(rows)))
    else:
        (folder / name).mkdir()
    summary = json.loads((folder / SUMMARY_FILE).read_text())
    summary["tables"][name] = table_fingerprint(folder / name)
    (folder / SUMMARY_FILE).write_text(json.dumps(summary))


@pytest.fixture(scope="module")
def mined(tmp_path_factory):
    """The toy mined folder with every table: longitudinal and vqa_removed added, and rows naming an
    unknown study (T999) in the tables that have rows, so the filter has something to drop."""
    folder = write_toy_mined(tmp_path_factory.mktemp("toy"))
    vqa = datasets.load_from_disk(str(folder / "vqa")).to_list()
    longitudinal = [
        {
            "prior": row["study_a"],
            "current": "T999" if i % 7 == 0 else row["study_b"],
            "entity_id": row["entity_id"],
            "label": ["worsened", "improved", "unchanged"][i % 3],
            "attribute": "size",
            "split": row["split"],
            "image_answerable": i % 2 == 0,
            "score": i / 4,
        }
        for i, row in enumerate(vqa[::5])
    ]
    _write(folder, "longitudinal", longitudinal)
    removed = [{**row, "study_b": "T999"} if i % 4 == 0 else row for i, row in enumerate(vqa[1::9])]
    _write(folder, "vqa_removed", removed)
    for name, key in (("triplets", "negative"), ("retrieval", "query"), ("vqa", "study_a")):
        rows = datasets.load_from_disk(str(folder / name)).to_list()
        _write(folder, name, [*rows, {**rows[0], key: "T999"}])
    return folder


def expected_rows(folder, data: MinedData, table: str, split: str | None) -> list[dict]:
    """What `rows` returned when it read whole tables with `to_list()` and filtered them."""
    path = folder / table
    rows = datasets.load_from_disk(str(path)).to_list() if has_rows(path) else []
    return [
        row
        for row in rows
        if (split is None or row["split"] == split) and all(row[k] in data.studies for k in KEYS[table])
    ]


def typed(rows) -> list[dict]:
    """Rows with each value's type beside it (`==` alone takes True for 1 and 1.0 for 1)."""

    def kind(value):
        return [type(x) for x in value] if isinstance(value, list) else type(value)

    return [{key: (kind(value), value) for key, value in row.items()} for row in rows]


@pytest.mark.parametrize("split", [None, "train", "test", "external"])
def test_views_give_the_rows_to_list_gave(mined, split, monkeypatch):
    data = MinedData(mined)
    monkeypatch.setattr(mined_module, "BATCH_ROWS", 7)  # several batches per table
    for table in TABLES:
        view, expected = data.rows(table, split), expected_rows(mined, data, table, split)
        assert isinstance(view, MinedRows) and len(view) == len(expected), table
        assert typed(view) == typed(expected), table
        assert [view[i] for i in range(len(view))] == expected, table
        assert bool(expected) == (split != "external"), table
        if split is None and table != "studies":  # the rows naming T999 are left out
            assert len(view) < len(datasets.load_from_disk(str(mined / table))), table


def test_no_table_is_read_whole(mined, monkeypatch):
    def whole(self):
        raise AssertionError("a mined table was read whole")

    monkeypatch.setattr(datasets.Dataset, "to_list", whole)
    data = MinedData(mined)
    assert set(data._tables) == {"studies"}  # the other tables are opened when first asked for
    assert len(data.studies) == 48
    for table in TABLES:
        assert sum(1 for _ in data.rows(table, "train")) == len(data.rows(table, "train"))
    assert data.relevance_table("train") and data.mentioning("test")


def test_indexing_slicing_and_sampling(mined):
    data = MinedData(mined)
    view = data.rows("vqa", "train")
    rows = list(view)
    assert view[0] == rows[0] and view[-1] == rows[-1] and view[-len(rows)] == rows[0]
    with pytest.raises(IndexError):
        view[len(rows)]
    with pytest.raises(IndexError):
        view[-len(rows) - 1]
    with pytest.raises(TypeError):
        view[1.0]
    for part in (slice(None, 5), slice(3, None), slice(-4, None), slice(2, 30, 3), slice(None, None, -1), slice(9, 2)):
        assert isinstance(view[part], MinedRows) and list(view[part]) == rows[part], part
    max_samples = 0  # the trainers' `rows[: max_train_samples or None]`
    assert list(view[: max_samples or None]) == rows and list(view[:0]) == []
    assert list(view[10:40][5:][::-2]) == rows[10:40][5:][::-2]
    assert sample_rows(view, 12, seed=3) == sample_rows(rows, 12, seed=3)
    assert random.Random(1).sample(view, 5) == random.Random(1).sample(rows, 5)
    assert sorted(view, key=lambda r: r["study_b"]) == sorted(rows, key=lambda r: r["study_b"])
    assert {r["entity_id"] for r in view} == {r["entity_id"] for r in rows}
    assert view and view[3] in view and view.count(view[3]) == rows.count(rows[3])


def test_concatenation_chains_without_copying(mined):
    data = MinedData(mined)
    vqa, removed, extra = data.rows("vqa", "train"), data.rows("vqa_removed", "train"), [{"question": "extra"}]
    both = vqa + removed
    assert isinstance(both, ChainedRows) and both.parts == (vqa, removed)
    assert list(both) == list(vqa) + list(removed) and len(both) == len(vqa) + len(removed)
    longer = both + extra
    assert longer.parts == (vqa, removed, extra) and longer[-1] == extra[0]
    assert list(extra + vqa) == extra + list(vqa)
    rows = list(longer)
    for i in (0, len(vqa) - 1, len(vqa), -1, -len(rows)):
        assert longer[i] == rows[i], i
    with pytest.raises(IndexError):
        longer[len(rows)]
    edges = (len(vqa) - 3, len(vqa), len(vqa) + 2)
    for part in (slice(None), slice(*edges[:2]), slice(edges[0], edges[2]), slice(5, -1), slice(-2, None), slice(7, 3)):
        assert isinstance(longer[part], ChainedRows) and list(longer[part]) == rows[part], part
    assert longer[1::4] == rows[1::4] and longer[::-1] == rows[::-1]
    assert sample_rows(longer, 9, seed=2) == sample_rows(rows, 9, seed=2)


def test_views_hold_positions_not_rows(mined):
    allocated = pa.total_allocated_bytes()
    data = MinedData(mined)
    views = [data.rows(table, "train") for table in TABLES]
    assert sum(len(list(v)) for v in views) > 0
    # the tables stay memory-mapped: reading them allocated no Arrow memory
    assert pa.total_allocated_bytes() - allocated < sum(v.table.nbytes for v in views) / 10
    view = data.rows("triplets", "train")
    assert set(vars(view)) == {"table", "indices"}
    assert list(view) and set(vars(view)) == {"table", "indices", "_batches"}  # the record batches, found once
    batches, starts = view._batches
    assert all(isinstance(b, pa.RecordBatch) for b in batches) and starts[-1] == view.table.num_rows
    assert len(batches) >= 3
    assert view.indices.dtype == np.int64 and view.indices.nbytes == 8 * len(view)
    assert view[2:9].table is view.table and view[2:9].indices.base is not None  # a numpy view, no copy
    assert all(isinstance(v, MinedRows) for v in (view + data.rows("vqa")).parts)


def test_tables_without_rows_or_never_written(mined, tmp_path):
    folder = tmp_path / "mined"
    shutil.copytree(mined, folder)
    _write(folder, "vqa_removed", [])  # an empty table is an empty folder
    shutil.rmtree(folder / "longitudinal")
    summary = json.loads((folder / SUMMARY_FILE).read_text())
    del summary["tables"]["longitudinal"]
    (folder / SUMMARY_FILE).write_text(json.dumps(summary))
    data = MinedData(folder)
    for table in ("vqa_removed", "longitudinal"):
        view = data.rows(table, "train")
        assert len(view) == 0 and list(view) == [] and not view and list(view[:3]) == []
        with pytest.raises(IndexError):
            view[0]
    assert list(data.rows("vqa", "train") + data.rows("vqa_removed", "train")) == list(data.rows("vqa", "train"))


def test_unknown_modalities_leave_every_view_empty(mined):
    data = MinedData(mined, modalities=["brain_mri"])
    assert not data.studies
    assert all(len(data.rows(table)) == 0 for table in TABLES)
    assert data.relevance_table() == {}
