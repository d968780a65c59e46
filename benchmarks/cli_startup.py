"""Start-up time of the commands that read no model, this checkout against a baseline commit.

Each command runs as a fresh `python -m medreco ...` process, alternately from this checkout's
`src/` and from a worktree of the baseline commit (PYTHONPATH picks which), `--repeats` times each;
prints the median wall time of each and the ratio, with a bare `python -c pass` for the floor.
On the baseline every command imported torch, transformers and the models first.

    python benchmarks/cli_startup.py [--baseline 5c6933b] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def seconds(argv: list[str], source: Path | None) -> float:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if source is not None:
        env["PYTHONPATH"] = str(source)
    started = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="5c6933b", help="the commit to compare with")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        worktree = Path(folder) / "baseline"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(worktree), args.baseline], cwd=ROOT, check=True)
        try:
            image = Path(folder) / "image.png"
            sys.path.insert(0, str(ROOT / "tests"))
            from hub_ready import write_png

            write_png(image)
            commands = {
                "medreco --help": ["--help"],
                "medreco entities": ["entities"],
                "medreco info": ["info"],
                "medreco inspect image.png": ["inspect", str(image)],
            }
            floor = statistics.median(seconds([sys.executable, "-c", "pass"], None) for _ in range(args.repeats))
            print(f"python -c pass: {floor:.2f} s (median of {args.repeats})")
            print(f"| command | baseline {args.baseline} (s) | this checkout (s) | ratio |")
            print("|---|---|---|---|")
            for name, argv in commands.items():
                runs: dict[str, list[float]] = {"baseline": [], "now": []}
                for _ in range(args.repeats):  # alternated, so a slow spell of the machine hits both
                    runs["baseline"].append(seconds([sys.executable, "-m", "medreco", *argv], worktree / "src"))
                    runs["now"].append(seconds([sys.executable, "-m", "medreco", *argv], ROOT / "src"))
                before, after = statistics.median(runs["baseline"]), statistics.median(runs["now"])
                print(f"| `{name}` | {before:.2f} | {after:.2f} | {after / before:.3f}x |")
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT, check=False)


if __name__ == "__main__":
    main()
