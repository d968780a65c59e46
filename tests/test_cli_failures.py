"""Every `medreco` subcommand, given a missing path, a folder where a file is expected (or a file
where a folder is), an output it cannot write and an input of the wrong kind, exits with status 2
and one line naming the path: never a traceback.

Each case is a real process (forked from one warm process, fault_runner.py), so what reaches
stderr is exactly what a user sees, logging included."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from fault_runner import WarmRunner
from hub_ready import write_png

# (subcommand, failure, argv); {missing} {folder} {file} {text} {unwritable} {png} {toy}
# {retrieval} {vlm} {index} {out} are filled in by the `places` fixture. The path the error must
# name is the placeholder's.
CASES = [
    ("export", "missing", ["export", "{missing}", "--out", "{out}"]),
    ("export", "folder", ["export", "{folder}", "--out", "{out}"]),
    ("export", "wrong kind", ["export", "{text}", "--out", "{out}"]),
    ("export", "unwritable", ["export", "{retrieval}", "--out", "{unwritable}"]),
    ("push", "missing", ["push", "{missing}", "--repo-id", "org/name"]),
    ("push", "folder", ["push", "{folder}", "--repo-id", "org/name"]),
    ("push", "wrong kind", ["push", "{text}", "--repo-id", "org/name"]),
    ("inspect", "missing", ["inspect", "{missing}"]),
    ("inspect", "folder", ["inspect", "{folder}"]),
    ("inspect", "wrong kind", ["inspect", "{text}"]),
    ("preprocess", "missing", ["preprocess", "{missing}", "--modality", "chest_xray", "--out", "{out}"]),
    ("preprocess", "folder", ["preprocess", "{folder}", "--modality", "chest_xray", "--out", "{out}"]),
    ("preprocess", "wrong kind", ["preprocess", "{text}", "--modality", "chest_xray", "--out", "{out}"]),
    ("preprocess", "unwritable", ["preprocess", "{png}", "--modality", "chest_xray", "--out", "{unwritable}"]),
    ("deidentify", "missing", ["deidentify", "{missing}", "{out}"]),
    ("deidentify", "folder", ["deidentify", "{folder}", "{out}"]),
    ("deidentify", "wrong kind", ["deidentify", "{text}", "{out}"]),
    ("phantom", "file", ["phantom", "--out", "{file}", "--patients", "1", "--size", "tiny"]),
    ("phantom", "unwritable", ["phantom", "--out", "{unwritable}", "--patients", "1", "--size", "tiny"]),
    ("entities", "missing", ["entities", "--extra", "{missing}"]),
    ("entities", "folder", ["entities", "--extra", "{folder}"]),
    ("entities", "wrong kind", ["entities", "--extra", "{png}"]),
    ("mine", "missing", ["mine", "{missing}", "--out", "{out}"]),
    ("mine", "folder", ["mine", "{folder}", "--out", "{out}"]),
    ("mine", "wrong kind", ["mine", "{png}", "--out", "{out}"]),
    ("mine", "unwritable", ["mine", "{manifest}", "--out", "{unwritable}"]),
    ("score-reports", "missing", ["score-reports", "{missing}"]),
    ("score-reports", "folder", ["score-reports", "{folder}"]),
    ("score-reports", "wrong kind", ["score-reports", "{png}"]),
    ("score-reports", "missing", ["score-reports", "{text}", "--extra", "{missing}"]),
    ("train", "missing", ["train", "stage1", "--config", "{missing}"]),
    ("train", "folder", ["train", "stage1", "--config", "{folder}"]),
    ("train", "wrong kind", ["train", "stage1", "--config", "{png}"]),
    ("train", "missing", ["train", "stage1", "--config", "tiny", "--mined", "{missing}", "--out", "{out}"]),
    ("index", "missing", ["index", "--model", "{missing}", "--mined", "{toy}", "--out", "{out}"]),
    ("index", "folder", ["index", "--model", "{folder}", "--mined", "{toy}", "--out", "{out}"]),
    ("index", "wrong kind", ["index", "--model", "{text}", "--mined", "{toy}", "--out", "{out}"]),
    ("index", "unwritable", ["index", "--model", "{retrieval}", "--mined", "{toy}", "--out", "{unwritable}"]),
    (
        "search",
        "missing",
        ["search", "{missing}", "--index", "{index}", "--model", "{retrieval}", "--modality", "chest_xray"],
    ),
    (
        "search",
        "folder",
        ["search", "{folder}", "--index", "{index}", "--model", "{retrieval}", "--modality", "chest_xray"],
    ),
    (
        "search",
        "wrong kind",
        ["search", "{text}", "--index", "{index}", "--model", "{retrieval}", "--modality", "chest_xray"],
    ),
    (
        "search",
        "missing",
        ["search", "{png}", "--index", "{missing}", "--model", "{retrieval}", "--modality", "chest_xray"],
    ),
    (
        "search",
        "unwritable",
        [
            "search",
            "{png}",
            "--index",
            "{index}",
            "--model",
            "{retrieval}",
            "--modality",
            "chest_xray",
            "--plot",
            "{unwritable}",
        ],
    ),
    ("compare", "missing", ["compare", "{png}", "{png}", "--model", "{missing}", "--question", "Any change?"]),
    ("compare", "folder", ["compare", "{png}", "{png}", "--model", "{folder}", "--question", "Any change?"]),
    ("compare", "missing", ["compare", "{missing}", "{png}", "--model", "{vlm}", "--question", "Any change?"]),
    ("compare", "wrong kind", ["compare", "{text}", "{png}", "--model", "{vlm}", "--question", "Any change?"]),
    ("evaluate", "missing", ["evaluate", "--model", "{retrieval}", "--mined", "{missing}"]),
    ("evaluate", "folder", ["evaluate", "--model", "{retrieval}", "--mined", "{folder}"]),
    ("evaluate", "wrong kind", ["evaluate", "--model", "{text}", "--mined", "{toy}"]),
    ("evaluate", "unwritable", ["evaluate", "--model", "{retrieval}", "--mined", "{toy}", "--out", "{unwritable}"]),
    (
        "evaluate-public",
        "missing",
        ["evaluate-public", "mmxu", "--model", "{vlm}", "--data", "{missing}", "--images", "{folder}"],
    ),
    (
        "evaluate-public",
        "folder",
        ["evaluate-public", "mmxu", "--model", "{vlm}", "--data", "{folder}", "--images", "{folder}"],
    ),
    (
        "evaluate-public",
        "wrong kind",
        ["evaluate-public", "mmxu", "--model", "{vlm}", "--data", "{png}", "--images", "{folder}"],
    ),
    ("rescore", "missing", ["rescore", "{missing}"]),
    ("rescore", "folder", ["rescore", "{folder}"]),
    ("rescore", "wrong kind", ["rescore", "{text}"]),
    ("rescore", "wrong kind", ["rescore", "{png}"]),
    ("demo", "file", ["demo", "--out", "{file}", "--quick"]),
    ("demo", "unwritable", ["demo", "--out", "{unwritable}", "--quick"]),
    ("ablate", "file", ["ablate", "--out", "{file}"]),
    ("manifest", "missing", ["manifest", "mimic-cxr", "{missing}", "--out", "{out}"]),
    ("manifest", "file", ["manifest", "mimic-cxr", "{file}", "--out", "{out}"]),
    ("accelerate-config", "file", ["accelerate-config", "deepspeed_zero3", "--out", "{file}"]),
    ("accelerate-config", "unwritable", ["accelerate-config", "deepspeed_zero3", "--out", "{unwritable}"]),
]
PROGRESS_BAR = re.compile(r"\d+%\||it/s\]")  # a bar on stderr is progress, not a message
NAMED = {"missing": "{missing}", "folder": "{folder}", "file": "{file}", "unwritable": "{blocker}"}


@pytest.fixture(scope="module")
def runner():
    runner = WarmRunner()
    yield runner
    runner.close()


@pytest.fixture(scope="module")
def places(toy, hub_ready, tmp_path_factory):
    """The paths the cases refer to: broken ones, and valid inputs to reach the broken output."""
    from medreco.data.mining import MinedData
    from medreco.inference import index_archive

    root = tmp_path_factory.mktemp("cli-failures")
    (root / "empty-folder").mkdir()
    (root / "a-file.txt").write_text("not a folder\n")
    (root / "notes.txt").write_text("This is a note, not an image, model, manifest or recipe.\n")
    blocker = root / "blocker"  # a file: nothing can be written under it, not even by root
    blocker.write_text("")
    data = MinedData(toy)
    manifest = root / "manifest.jsonl"
    manifest.write_text(
        "".join(
            json.dumps({k: getattr(s, k) for k in ("image", "report", "patient_id", "modality")}) + "\n"
            for s in list(data.studies.values())[:4]
        )
    )
    index = root / "index"
    index_archive(hub_ready["retrieval"], index, [vars(s) for s in data.studies.values()][:6], progress=False)
    return {
        "missing": str(root / "no-such-path"),
        "folder": str(root / "empty-folder"),
        "file": str(root / "a-file.txt"),
        "text": str(root / "notes.txt"),
        "blocker": str(blocker),
        "unwritable": str(blocker / "out"),
        "png": str(write_png(root / "image.png")),
        "toy": str(toy),
        "manifest": str(manifest),
        "retrieval": str(hub_ready["retrieval"]),
        "vlm": str(hub_ready["vlm"]),
        "index": str(index),
        "out": str(root / "out"),
    }


def _fill(text: str, places: dict) -> str:
    for name, value in places.items():
        text = text.replace("{" + name + "}", value)
    return text


@pytest.mark.parametrize(("command", "failure", "argv"), CASES, ids=[f"{c[0]}-{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_a_user_error_exits_2_with_one_line_naming_the_path(runner, places, tmp_path, command, failure, argv):
    log = tmp_path / "stderr.log"
    request = {"argv": [_fill(a, places) for a in argv], "env": {"HF_HUB_OFFLINE": "1"}}
    outcome = runner.run({**request, "stdout": str(tmp_path / "stdout.log")}, log)
    lines = [line for line in log.read_text().splitlines() if line.strip() and not PROGRESS_BAR.search(line)]
    assert outcome == {"code": 2, "signal": None}, "\n".join(lines[-30:])
    assert len(lines) == 1, "\n".join(lines)
    assert lines[0].startswith(f"medreco {command}: error: ") and "Traceback" not in lines[0]
    placeholder = NAMED.get(failure) or next(a for a in argv if a in ("{text}", "{png}"))
    assert _fill(placeholder, places) in lines[0]
    assert not Path(places["out"]).exists() or failure != "missing"


def test_a_bad_option_value_is_one_line_too(runner, tmp_path):
    log = tmp_path / "stderr.log"
    assert runner.run(
        {"argv": ["index", "--model", "m", "--mined", "x", "--out", "o", "--commit-every", "many"]}, log
    ) == {
        "code": 2,
        "signal": None,
    }
    lines = log.read_text().splitlines()
    assert len(lines) == 1 and "--commit-every" in lines[0] and "many" in lines[0]


def test_an_unknown_launch_config_is_one_line_naming_it_and_the_choices(runner, tmp_path):
    log = tmp_path / "stderr.log"
    outcome = runner.run({"argv": ["accelerate-config", "zero9"], "stdout": str(tmp_path / "stdout.log")}, log)
    assert outcome == {"code": 2, "signal": None}
    lines = log.read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("medreco accelerate-config: error: 'zero9'")
    assert "deepspeed_zero3" in lines[0] and (tmp_path / "stdout.log").read_text() == ""


def test_preprocess_shows_the_readers_warnings(runner, places, tmp_path):
    log = tmp_path / "stderr.log"
    argv = ["preprocess", places["png"], "--modality", "chest_xray", "--out", str(tmp_path / "x.safetensors")]
    assert runner.run({"argv": argv, "stdout": str(tmp_path / "stdout.log")}, log)["code"] == 0
    assert "medreco preprocess: warning: no pixel spacing in PNG/JPEG: 1 mm assumed" in log.read_text()


def test_a_broken_answerability_table_beside_the_manifest_is_one_line_naming_it(runner, places, tmp_path):
    """`medreco mine` reads `answerability.json` beside the manifest: a broken one stops it before
    anything is written, in one line naming that file."""
    folder = tmp_path / "archive"
    folder.mkdir()
    manifest = folder / "manifest.jsonl"
    manifest.write_text(Path(places["manifest"]).read_text())
    table = folder / "answerability.json"
    table.write_text('{"format": 1, "modalities": ["chest_xray"]}')
    log, out = tmp_path / "stderr.log", tmp_path / "mined"
    outcome = runner.run({"argv": ["mine", str(manifest), "--out", str(out), "--metrics", "agreement"]}, log)
    lines = [line for line in log.read_text().splitlines() if line.strip() and not PROGRESS_BAR.search(line)]
    assert outcome == {"code": 2, "signal": None}, "\n".join(lines[-30:])
    assert len(lines) == 1 and lines[0].startswith("medreco mine: error: ") and str(table) in lines[0]
    assert "modalities" in lines[0] and not (out / "cache").exists()  # refused before any report is read


def test_a_non_positive_pair_budget_is_one_line(runner, places, tmp_path):
    log = tmp_path / "stderr.log"
    argv = ["mine", places["manifest"], "--out", str(tmp_path / "mined"), "--vqa-pairs-per-study", "0"]
    assert runner.run({"argv": argv}, log) == {"code": 2, "signal": None}
    lines = log.read_text().splitlines()
    assert len(lines) == 1 and "vqa_pairs_per_study must be positive" in lines[0]


DEVICE_COMMANDS = {
    "index": ["index", "--model", "{retrieval}", "--mined", "{toy}", "--out", "{out}"],
    "search": ["search", "{png}", "--index", "{index}", "--model", "{retrieval}", "--modality", "chest_xray"],
    "compare": ["compare", "{png}", "{png}", "--model", "{vlm}", "--question", "Any change?"],
    "evaluate": ["evaluate", "--model", "{retrieval}", "--mined", "{toy}"],
    "evaluate-public": ["evaluate-public", "mmxu", "--model", "{vlm}", "--data", "{text}", "--images", "{folder}"],
}
BAD_DEVICES = [(["--device", "gpu"], "--device 'gpu': not a device"), (["--dtype", "float16"], "needs a GPU")]
if not torch.cuda.is_available():
    BAD_DEVICES.append((["--device", "cuda"], "--device cuda: CUDA is not available here"))


@pytest.mark.parametrize("command", DEVICE_COMMANDS)
@pytest.mark.parametrize(("option", "message"), BAD_DEVICES, ids=[" ".join(o) for o, _ in BAD_DEVICES])
def test_a_device_this_machine_cannot_run_is_one_line_before_anything_is_read(
    runner, places, tmp_path, command, option, message
):
    if option == ["--dtype", "float16"]:
        option = ["--device", "cpu", *option]
    log = tmp_path / "stderr.log"
    argv = [_fill(a, places) for a in DEVICE_COMMANDS[command]] + option
    assert runner.run({"argv": argv, "stdout": str(tmp_path / "stdout.log")}, log) == {"code": 2, "signal": None}
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"medreco {command}: error: ") and message in lines[0]
    assert not Path(places["out"]).exists()


BAD_VALUES = [
    (
        ["search", "{png}", "--index", "{index}", "--model", "{retrieval}", "--modality", "chest_xray", "--top-k", "0"],
        "--top-k: 0 is not at least 1",
    ),
    (["preprocess", "{png}", "--modality", "CT", "--out", "{out}"], "name the body part (chest_ct or abdominal_ct)"),
    (["compare", "{png}", "{png}", "--model", "{vlm}", "--question", "?", "--modality", "xr"], "unknown modality 'xr'"),
    (["phantom", "--out", "{out}", "--modalities", "cxr,CT"], "modality 'CT' is ambiguous"),
]


@pytest.mark.parametrize(("argv", "message"), BAD_VALUES, ids=[" ".join(a[:1] + a[-2:]) for a, _ in BAD_VALUES])
def test_a_value_no_command_accepts_is_one_line_naming_it(runner, places, tmp_path, argv, message):
    log = tmp_path / "stderr.log"
    assert runner.run({"argv": [_fill(a, places) for a in argv]}, log) == {"code": 2, "signal": None}
    lines = log.read_text().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


def test_one_modality_vocabulary_in_every_command(runner, places, tmp_path):
    """The manifest's names and aliases work wherever a modality is asked for."""
    log, out = tmp_path / "stderr.log", tmp_path / "x.safetensors"
    argv = ["preprocess", places["png"], "--modality", "CXR", "--out", str(out)]
    assert runner.run({"argv": argv, "stdout": str(tmp_path / "stdout.log")}, log)["code"] == 0 and out.is_file()
    argv = ["entities", "--modality", "chest x-ray", "--json"]
    assert runner.run({"argv": argv, "stdout": str(tmp_path / "cxr.json")}, log)["code"] == 0
    argv = ["entities", "--modality", "CT", "--json"]  # a family: chest and abdominal CT entities
    assert runner.run({"argv": argv, "stdout": str(tmp_path / "ct.json")}, log)["code"] == 0
    assert json.loads((tmp_path / "cxr.json").read_text()) and json.loads((tmp_path / "ct.json").read_text())


def test_index_and_search_edges_are_one_line_naming_what_is_wrong(runner, places, tmp_path):
    """A folder that is not an index (named before the model is read), a modality the index lacks
    (naming what it holds), an archive none of whose images can be read."""
    search = ["search", places["png"], "--model", places["retrieval"]]
    manifest = tmp_path / "unreadable.jsonl"
    manifest.write_text(json.dumps({"image": places["text"], "modality": "chest_xray", "study_id": "S1"}) + "\n")
    cases = [
        ([*search, "--index", places["folder"], "--modality", "chest_xray"], [places["folder"], "not an index"]),
        ([*search, "--index", places["index"], "--modality", "chest_ct"], ["no chest_ct studies", "holds chest_xray"]),
        (
            ["index", "--model", places["retrieval"], "--manifest", str(manifest), "--out", str(tmp_path / "empty")],
            ["no image could be read", "S1"],
        ),
    ]
    for number, (argv, expected) in enumerate(cases):
        log = tmp_path / f"stderr-{number}.log"  # the runner appends
        outcome = runner.run({"argv": argv, "stdout": str(tmp_path / f"stdout-{number}.log")}, log)
        lines = [line for line in log.read_text().splitlines() if line.strip() and not PROGRESS_BAR.search(line)]
        assert outcome == {"code": 2, "signal": None} and len(lines) == 1, lines
        assert all(text in lines[0] for text in expected) and "delete" not in lines[0], lines[0]


def test_a_query_from_the_index_leaves_its_own_study_out(runner, places, tmp_path):
    from medreco.data.mining import MinedData

    study = next(iter(MinedData(places["toy"]).studies.values()))
    log, out, again = tmp_path / "stderr.log", tmp_path / "hits.json", tmp_path / "with-itself.json"
    argv = ["search", str(study.image), "--index", places["index"], "--model", places["retrieval"]]
    argv += ["--modality", "chest_xray", "--json"]
    assert runner.run({"argv": argv, "stdout": str(out)}, log)["code"] == 0
    assert study.study_id not in [hit["study_id"] for hit in json.loads(out.read_text())]
    assert f"left out {study.study_id}, the query itself" in log.read_text()
    assert runner.run({"argv": [*argv, "--include-query"], "stdout": str(again)}, tmp_path / "again.log")["code"] == 0
    assert json.loads(again.read_text())[0]["study_id"] == study.study_id  # itself, first
