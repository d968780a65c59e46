"""What users look for beside the code: a licence matching the package metadata, a citation file
that parses, and type information (PEP 561)."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import yaml

import medreco

ROOT = Path(__file__).resolve().parents[1]


def test_the_licence_file_is_the_one_the_metadata_names():
    installed = metadata.metadata("medreco")
    assert installed["License-Expression"] == "Apache-2.0" and installed.get_all("License-File") == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text


def test_the_citation_file_cites_the_paper_and_the_package():
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0" and citation["version"] == medreco.__version__
    assert citation["license"] == "Apache-2.0"
    paper = citation["preferred-citation"]
    assert "Comparative Reasoning in Radiology" in paper["title"]
    assert paper["identifiers"][0]["value"].startswith("arXiv")


def test_the_package_ships_its_type_information():
    assert (Path(medreco.__file__).parent / "py.typed").exists()


def test_the_wheel_holds_every_file_of_the_package_with_the_launch_configs(tmp_path):
    """Data files (launch configs, recipes, tables) reach an installed package, not only a clone."""
    import shutil
    import subprocess
    import sys
    import zipfile

    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, tmp_path / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    shutil.copytree(ROOT / "src" / "medreco", tmp_path / "src" / "medreco", ignore=ignore)
    build = "import sys; from setuptools import build_meta; build_meta.build_wheel(sys.argv[1])"
    result = subprocess.run(
        [sys.executable, "-c", build, str(tmp_path / "dist")], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("medreco-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    source = {
        p.relative_to(tmp_path / "src").as_posix() for p in (tmp_path / "src" / "medreco").rglob("*") if p.is_file()
    }
    assert source - shipped == set()
    launch = {name for name in shipped if name.startswith("medreco/training/launch/")}
    assert {
        "medreco/training/launch/configs/deepspeed_zero3.json",
        "medreco/training/launch/configs/fsdp.yaml",
    } <= launch
