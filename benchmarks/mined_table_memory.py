"""Memory of reading a mined table: the whole table as Python rows (`load_from_disk(...).to_list()`
and the split's rows filtered from it, what `MinedData` did) against `MinedData.rows` (a view over
the memory-mapped table: an int64 array of row positions; rows read 1,000 at a time while iterated).

It writes a mined folder with a `studies` table (one image file shared by every study) and a
`vqa` or `triplets` table of `--rows` rows in the columns `medreco mine` writes, 80% of them in the
train split and 1% naming a study the folder does not know. Each way runs in a fresh process and
iterates the train split's rows once; measured from after the imports and the studies: seconds,
peak RSS growth (`VmHWM`, reset through `/proc/self/clear_refs`; Linux), the growth of anonymous
and of file-backed resident memory at the end (`RssAnon`, `RssFile`: memory-mapped Arrow pages are
file-backed, reclaimable page cache), and, in a second fresh process (tracing slows allocation and
takes memory of its own), the peak of Python allocations (`tracemalloc`, which does not see
Arrow's mapped buffers).

    python benchmarks/mined_table_memory.py --rows 100000 --tables vqa,triplets
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ENTITIES = (
    "cxr/abnormal/pleural-effusion@pleura",
    "cxr/abnormal/cardiac-chamber-enlargement@cardiac-chambers",
    "cxr/abnormal/pulmonary-nodule@lung",
    "ct/abnormal/pneumothorax@pleura",
)
STUDIES = 10_000


def _columns(table: str, rows: int) -> dict[str, list]:
    """`rows` rows of a vqa or triplets table in the columns `medreco mine` writes."""
    study = [f"S{(i * 7919) % STUDIES:06d}" if i % 100 != 1 else f"UNKNOWN{i}" for i in range(rows)]
    other = [f"S{(i * 104729 + 1) % STUDIES:06d}" for i in range(rows)]
    entity = [ENTITIES[i % len(ENTITIES)] for i in range(rows)]
    split = ["train" if i % 5 else "test" for i in range(rows)]
    modality = ["chest_xray" if i % 3 else "chest_ct" for i in range(rows)]
    if table == "triplets":
        third = [f"S{(i * 15485863 + 2) % STUDIES:06d}" for i in range(rows)]
        return {
            "anchor": study,
            "positive": other,
            "negative": third,
            "entity_id": entity,
            "modality": modality,
            "split": split,
        }
    nouns = [e.split("/")[-1].split("@")[0].replace("-", " ") for e in entity]
    return {
        "study_a": study,
        "study_b": other,
        "entity_id": entity,
        "dimension": ["presence"] * rows,
        "question": [f"Compared with Case A, is there {n} in Case B?" for n in nouns],
        "options": [["Yes, new in Case B", "No, resolved", "Present in both", "Absent in both"]] * rows,
        "answer": ["ABCD"[i % 4] for i in range(rows)],
        "open_question": [f"Describe the {n} in Case B compared with Case A." for n in nouns],
        "open_answer": [f"A small {n} in Case B, not seen in Case A, {i % 40} mm." for i, n in enumerate(nouns)],
        "labels": [["Case A", "Case B"]] * rows,
        "split": split,
        "image_answerable": [i % 2 == 0 for i in range(rows)],
        "answerability_reason": ["" if i % 2 == 0 else "size is not measurable on this modality" for i in range(rows)],
    }


def write_mined(folder: Path, tables: list[str], rows: int) -> None:
    """A mined folder `MinedData` accepts: studies, the tables, and the summary naming them."""
    import datasets
    import numpy as np
    from PIL import Image

    from medreco.data.mining.mined import SUMMARY_FILE, table_fingerprint

    datasets.disable_progress_bars()
    (folder / "images").mkdir(parents=True)
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(folder / "images" / "shared.png")
    ids = [f"S{i:06d}" for i in range(STUDIES)]
    studies = {
        "study_id": ids,
        "patient_id": [f"P{i // 3:06d}" for i in range(STUDIES)],
        "modality": ["chest_xray"] * STUDIES,
        "image": ["../images/shared.png"] * STUDIES,  # relative to the mined folder, as `mine` writes it
        "report": ["No pleural effusion. Normal heart size."] * STUDIES,
        "split": ["train" if i % 5 else "test" for i in range(STUDIES)],
        "statements": ["{}"] * STUDIES,
    }
    mined = folder / "mined"
    datasets.Dataset.from_dict(studies).save_to_disk(str(mined / "studies"))
    for table in tables:
        datasets.Dataset.from_dict(_columns(table, rows)).save_to_disk(str(mined / table))
    names = ["studies", *tables]
    (mined / SUMMARY_FILE).write_text(json.dumps({"tables": {name: table_fingerprint(mined / name) for name in names}}))


def _resident() -> dict[str, int]:
    """This process's resident memory in kB: now (anonymous, file-backed, all) and its peak."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return {key: int(fields[key].split()[0]) for key in ("RssAnon", "RssFile", "VmRSS", "VmHWM")}


def _run_one(way: str, mined: str, table: str, traced: str) -> None:
    """One way of reading `table`'s train rows, in this (fresh) process; prints what it measured:
    with `traced` "1" only the peak of Python allocations (tracing slows allocation and takes memory
    of its own), else time and resident memory."""
    import datasets

    from medreco.data.mining import MinedData
    from medreco.data.mining.mined import STUDY_COLUMNS

    data = MinedData(mined)
    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) restarts from the resident set now
    before = _resident()
    if traced == "1":
        tracemalloc.start()
    start = time.perf_counter()
    if way == "to_list":
        keys = STUDY_COLUMNS[table]
        every = datasets.load_from_disk(str(Path(mined) / table)).to_list()
        rows = [r for r in every if r["split"] == "train" and all(r[k] in data.studies for k in keys)]
    else:
        rows = data.rows(table, "train")
    characters = sum(len(row[column]) for row in rows for column in STUDY_COLUMNS[table])  # every row read once
    seconds = time.perf_counter() - start
    if traced == "1":
        print(json.dumps({"traced_mb": tracemalloc.get_traced_memory()[1] / 2**20}))
        return
    after = _resident()
    result = {
        "rows": len(rows),
        "characters": characters,
        "seconds": seconds,
        "peak_rss_mb": (after["VmHWM"] - before["VmRSS"]) / 1024,
        "anon_mb": (after["RssAnon"] - before["RssAnon"]) / 1024,
        "file_mb": (after["RssFile"] - before["RssFile"]) / 1024,
    }
    print(json.dumps(result))


def _measure(way: str, mined: Path, table: str) -> dict:
    """One way's numbers, measured in fresh processes: one untraced, one under tracemalloc."""
    result = {}
    for traced in ("0", "1"):
        command = [sys.executable, __file__, "--run-one", way, str(mined), table, traced]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{way} on {table} failed:\n{done.stderr}")
        result.update(json.loads(done.stdout.strip().splitlines()[-1]))
    return result


def main() -> None:
    if sys.argv[1:2] == ["--run-one"]:
        return _run_one(*sys.argv[2:6])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--tables", default="vqa,triplets", help="comma-separated: vqa, triplets")
    args = parser.parse_args()
    tables = args.tables.split(",")
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        write_mined(Path(folder), tables, args.rows)
        mined = Path(folder) / "mined"
        sizes = {t: sum(f.stat().st_size for f in (mined / t).glob("*.arrow")) / 2**20 for t in tables}
        print(f"{args.rows:,}-row tables written in {time.perf_counter() - start:.0f} s")
        print(
            "| table (Arrow on disk) | way | train rows | s | peak RSS growth | RssAnon growth | RssFile growth "
            "| tracemalloc peak |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for table in tables:
            results = {way: _measure(way, mined, table) for way in ("to_list", "view")}
            if results["to_list"]["characters"] != results["view"]["characters"]:
                raise SystemExit(f"{table}: the two ways read different rows")
            for way, r in results.items():
                name = "`load_from_disk().to_list()` + filter" if way == "to_list" else "`MinedData.rows` view"
                print(
                    f"| {table} ({sizes[table]:.0f} MB) | {name} | {r['rows']:,} | {r['seconds']:.2f} | "
                    f"{r['peak_rss_mb']:.0f} MB | {r['anon_mb']:.0f} MB | {r['file_mb']:.0f} MB | "
                    f"{r['traced_mb']:.1f} MB |"
                )
            old, new = results["to_list"], results["view"]
            print(
                f"  {table}: view / to_list: peak RSS growth {new['peak_rss_mb'] / old['peak_rss_mb']:.3f}, "
                f"anonymous {new['anon_mb'] / old['anon_mb']:.3f}, "
                f"Python allocations {new['traced_mb'] / old['traced_mb']:.4f}, "
                f"time {new['seconds'] / old['seconds']:.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
