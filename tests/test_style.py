"""The codebase passes the linter configured in pyproject.toml (so CI enforces it), and its rooms stay small."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is installed by the dev extra")
def test_ruff_is_clean():
    result = subprocess.run(["ruff", "check", "src", "tests", "benchmarks"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_room_is_small_enough_to_hold_in_ones_head():
    """No source file over 800 lines, no function over 80: a reader finds and follows any component."""
    import ast

    import medreco

    package = Path(medreco.__file__).parent
    long_files, long_functions = [], []
    for path in sorted(package.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > 800:
            long_files.append(f"{path.relative_to(package)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno >= 80:
                long_functions.append(f"{path.relative_to(package)}:{node.lineno} {node.name}")
    assert long_files == [] and long_functions == []
