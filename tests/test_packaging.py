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
