"""The codebase passes the linter configured in pyproject.toml (so CI enforces it)."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is installed by the dev extra")
def test_ruff_is_clean():
    result = subprocess.run(["ruff", "check", "src", "tests", "benchmarks"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
