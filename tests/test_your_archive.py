"""docs/your-archive.md, run as written: every bash and Python block in order, in one folder, on the
synthetic archive its first command writes; then what each step promised is checked."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pydicom

PAGE = Path(__file__).resolve().parents[1] / "docs" / "your-archive.md"


def blocks() -> list[tuple[str, str]]:
    return re.findall(r"```(bash|python)\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)


def test_the_walkthrough_runs_from_an_archive_to_a_search_and_an_answer(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MEDRECO_SALT", "a secret of this hospital")
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    outputs = []
    for language, code in blocks():
        if language == "python":
            exec(compile(code, str(PAGE), "exec"), {})
            continue
        result = subprocess.run(
            ["bash", "-c", "set -euo pipefail\n" + code], capture_output=True, text=True, env=os.environ.copy()
        )
        assert result.returncode == 0, f"{code}\n{result.stdout}\n{result.stderr}"
        outputs.append(result.stdout)
    assert [language for language, _ in blocks()] == ["bash", "bash", "python", "bash", "bash", "bash", "bash"]

    header = pydicom.dcmread(tmp_path / "archive/patients/P0001/P0001-CXR1/image.dcm", stop_before_pixels=True)
    identifying = [str(header.PatientID), str(header.PatientName).split("^")[0], str(header.AccessionNumber)]
    manifest = (tmp_path / "manifest.jsonl").read_text()
    index = (tmp_path / "index" / "index.json").read_text()
    assert not [value for value in identifying if value in manifest or value in index]
    deidentified = pydicom.dcmread(tmp_path / json.loads(manifest.splitlines()[0])["image"], stop_before_pixels=True)
    assert deidentified.PatientIdentityRemoved == "YES"

    assert "modality: DX" in outputs[0] and "shape" in outputs[0]  # inspect described the file
    assert json.loads((tmp_path / "mined" / "summary.json").read_text())["studies"] > 0
    assert (tmp_path / "runs" / "stage1" / "final" / "processor_config.json").is_file()
    search = outputs[-2]
    first_study = json.loads(manifest.splitlines()[0])["study_id"]
    ranked = [line.split()[1] for line in search.splitlines() if line.strip()[:1].isdigit()]
    assert len(ranked) == 5 and first_study not in ranked and (tmp_path / "search.png").stat().st_size > 0
    answer = [line for line in outputs[-1].splitlines() if line.strip() and not line.startswith(("{", " ", "}"))]
    assert answer, outputs[-1]  # the comparative answer, in text, after stage 2's summary
