"""Run Python, or a console script such as `trl`, in a process where `import medreco` fails.

A `sitecustomize.py` on PYTHONPATH puts a finder in front of every other one that refuses
`medreco` and its submodules: what a machine without the package sees, although it is installed
in this virtualenv. The process's only medreco code is then what a model folder carries."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

BLOCKER = """
import sys
class _NoMedReCo:
    def find_spec(self, name, path=None, target=None):
        if name == "medreco" or name.startswith("medreco."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: a machine without medreco)")
        return None
sys.meta_path.insert(0, _NoMedReCo())
"""


def environment(tmp_path: Path) -> dict[str, str]:
    """The environment of a process without medreco, offline, with its own Hugging Face cache."""
    blocker = tmp_path / "no-medreco"
    blocker.mkdir(exist_ok=True)
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_"))}
    env.update(
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),  # this venv's console scripts
        PYTHONPATH=str(blocker),
        HF_HUB_OFFLINE="1",
        HF_HOME=str(tmp_path / "hf-home"),
        TRANSFORMERS_VERBOSITY="error",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        TOKENIZERS_PARALLELISM="false",
    )
    return env


def run(
    command: list[str], tmp_path: Path, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: int = 600
) -> subprocess.CompletedProcess:
    """Run `command` without medreco (in `cwd`, default `tmp_path`; `env`: more variables); it must succeed."""
    result = subprocess.run(
        command,
        env={**environment(tmp_path), **(env or {})},
        cwd=cwd or tmp_path,
        stdin=subprocess.DEVNULL,  # a prompt (e.g. "run the custom code?") fails instead of waiting
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-6000:])
    return result


def run_python(code: str, tmp_path: Path, cwd: Path | None = None, python: str | None = None, **args) -> dict:
    """Run `code` (`ARGS` holds `args`; it prints one JSON line last) without medreco, in `python`
    (default: this interpreter); returns that JSON."""
    script = "import json, sys\nARGS = json.loads(sys.argv[1])\n" + textwrap.dedent(code)
    script += "\nassert not any(m == 'medreco' or m.startswith('medreco.') for m in sys.modules)\n"
    result = run([python or sys.executable, "-c", script, json.dumps(args)], tmp_path, cwd)
    lines = result.stdout.strip().splitlines()
    assert lines, result.stderr[-3000:]
    return json.loads(lines[-1])
