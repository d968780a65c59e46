"""Every Python block of the README runs as written: those on files of one's own here, those on a quick
demo's folder (`medreco-demo/...`) in tests/demo/test_demo.py, beside the demo they need. Lines
marked as needing the network are commented out in the README itself. Every relative link of the
README and docs/ names a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DEMO_FOLDER = "medreco-demo"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def demo_blocks() -> list[str]:
    """The blocks that read what `medreco demo --quick` writes."""
    return [block for block in python_blocks() if DEMO_FOLDER in block]


def run_block(block: str) -> dict:
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    return namespace


def test_the_readme_has_python_blocks_on_own_models_and_on_the_demo():
    assert len(python_blocks()) == 3 and len(demo_blocks()) == 2
    lines = [line.strip() for block in python_blocks() for line in block.splitlines()]
    assert all(line.startswith("#") for line in lines if "needs network" in line or "from the Hub" in line)


def test_the_readme_block_on_models_of_ones_own_runs(tmp_path, monkeypatch):
    import torch

    (block,) = [block for block in python_blocks() if DEMO_FOLDER not in block]
    monkeypatch.chdir(tmp_path)
    namespace = run_block(block)
    assert namespace["same"].dtype == torch.bfloat16
    assert (tmp_path / "my-retrieval" / "processor_config.json").is_file()  # saved beside the model
    assert not (tmp_path / "my-vlm" / "processor_config.json").exists()  # built from the config instead
    assert namespace["vlm_processor"].image_token_id == namespace["vlm"].config.image_token_id


def test_every_relative_link_in_the_readme_and_docs_exists():
    broken = []
    for page in [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "examples" / "README.md"]:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            path = target.split("#")[0]
            if not path or re.match(r"[a-z]+:", path):
                continue
            if not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []
