"""How to cite medreco: a copy of the repository's `CITATION.cff` (the installed package carries it
here, since the file at the repository root is not package data; tests/hub/test_card.py checks the
two are equal) and its BibTeX, which every model card prints."""

from __future__ import annotations

import re

import yaml

# Verbatim copy of CITATION.cff at the repository root: edit both together.
CITATION_CFF = """\
cff-version: 1.2.0
message: >-
  If you use medreco, please cite the MedReCo paper, whose system this package implements, and
  the package itself.
title: "medreco: comparative reasoning in radiology on Hugging Face conventions"
type: software
version: 0.1.0
license: Apache-2.0
authors:
  - name: medreco developers
keywords:
  - radiology
  - medical imaging
  - image retrieval
  - vision-language model
  - comparative reasoning
preferred-citation:
  type: article
  title: "A Vision-language Framework for Comparative Reasoning in Radiology"
  authors:
    - family-names: Zhang
      given-names: Tengfei
    - family-names: Zhao
      given-names: Ziheng
    - family-names: Zhang
      given-names: Xiaoman
    - family-names: Dai
      given-names: Lisong
    - family-names: Qiu
      given-names: Pengcheng
    - family-names: Zhang
      given-names: Ya
    - family-names: Wang
      given-names: Yanfeng
    - family-names: Xie
      given-names: Weidi
  year: 2026
  journal: arXiv preprint
  identifiers:
    - type: other
      value: "arXiv:2606.06407"
      description: arXiv identifier
  url: "https://arxiv.org/abs/2606.06407"
"""


def _bibtex_entry(kind: str, key: str, fields: list[tuple[str, str | None]]) -> str:
    lines = [f"@{kind}{{{key},"]
    lines += [f"  {name} = {{{value}}}," for name, value in fields if value]
    return "\n".join([*lines, "}"])


def _authors(people: list[dict]) -> str:
    """BibTeX's `Family, Given and ...`; an entity (`name:`) in braces, so BibTeX keeps it whole."""
    names = []
    for person in people:
        if "family-names" in person:
            given = person.get("given-names")
            names.append(f"{person['family-names']}, {given}" if given else person["family-names"])
        else:
            names.append(f"{{{person['name']}}}")
    return " and ".join(names)


def _key(entry: dict, fallback: str) -> str:
    first = entry.get("authors", [{}])[0]
    family = re.sub(r"[^a-z]", "", str(first.get("family-names", "")).lower())
    word = next((w for w in re.findall(r"[a-z]+", entry.get("title", "").lower()) if len(w) > 3), "")
    return f"{family}{entry.get('year', '')}{word}" if family else fallback


def citation_bibtex(cff: str = CITATION_CFF) -> list[str]:
    """BibTeX entries of a CITATION.cff: its `preferred-citation` (the paper) first, then the software."""
    data = yaml.safe_load(cff)
    entries = []
    paper = data.get("preferred-citation")
    if paper:
        arxiv = next(
            (i["value"].split(":", 1)[1] for i in paper.get("identifiers", []) if str(i["value"]).startswith("arXiv:")),
            None,
        )
        journal = paper.get("journal")
        fields = [
            ("title", paper.get("title")),
            ("author", _authors(paper.get("authors", []))),
            ("journal", f"{journal} arXiv:{arxiv}" if journal == "arXiv preprint" and arxiv else journal),
            ("year", str(paper["year"]) if paper.get("year") else None),
            ("eprint", arxiv),
            ("archivePrefix", "arXiv" if arxiv else None),
            ("url", paper.get("url")),
        ]
        kind = "article" if paper.get("type") == "article" else "misc"
        entries.append(_bibtex_entry(kind, _key(paper, "paper"), fields))
    fields = [
        ("title", data.get("title")),
        ("author", _authors(data.get("authors", []))),
        ("version", str(data["version"]) if data.get("version") else None),
        ("year", str(data["date-released"])[:4] if data.get("date-released") else None),
        ("license", data.get("license")),
        ("url", data.get("repository-code") or data.get("url")),
    ]
    entries.append(_bibtex_entry("software", "medreco", fields))
    return entries


__all__ = ["CITATION_CFF", "citation_bibtex"]
