"""A report's sections by heading (findings, impression, indication, ...), its sentences, and the
line headings of structured reports ("Liver:"), as rule-based decomposition reads them."""

from __future__ import annotations

import re

from .lexicon import SECTION_HEADINGS, STANDALONE_HEADINGS

_SECTION_OF = [(re.compile(rf"(?:{'|'.join(words)})$", re.I), name) for name, words in SECTION_HEADINGS.items()]
_ANY_SECTION = "|".join(word for words in SECTION_HEADINGS.values() for word in words)
# A heading starts a line and ends with a colon ("FINDINGS:", "Clinical details:"), or stands alone
# on its line in capitals or title case ("IMPRESSION", "Findings").
SECTION_HEADER = re.compile(
    rf"^[ \t]*((?i:{_ANY_SECTION}))[ \t]*:|^[ \t]*((?i:{'|'.join(STANDALONE_HEADINGS)}))[ \t]*(?=\n|$)",
    re.MULTILINE,
)
READ_SECTIONS = ("findings", "impression")  # what the current images show
SENTENCE_END = re.compile(r"(?<=[.!?;])\s+(?=[A-Z0-9_(])|\n\s*\n|\n\s*(?=\d+[.)]\s)|\n(?=[A-Z])")
# A structured report's line heading ("Liver:", "Extra-axial spaces:", "Lines/tubes:"): the organ it
# names is the context of the sentences that follow it, up to the next heading.
LINE_HEADING = re.compile(r"^(?:\d+[.)]\s*)?([A-Za-z][A-Za-z /&,-]{1,40}?)\s*:")


def split_sections(report: str) -> dict[str, str]:
    """Sections by heading, under the name of the section each heading names (`section_name`: "Report:"
    is "findings", "Opinion:" and "Conclusion:" are "impression", "Clinical details:" is "indication");
    text before any heading is "preamble", a report without headings is "body". Two headings of one
    section are one section, their texts a paragraph apart."""
    report = report.replace("\r\n", "\n").replace("\r", "\n")
    matches = [m for m in SECTION_HEADER.finditer(report) if m.group(1) or _standalone_heading(m.group(2))]
    if not matches:
        return {"body": report.strip()}
    sections = {"preamble": report[: matches[0].start()].strip()}
    for match, following in zip(matches, [*matches[1:], None]):
        name = section_name(match.group(1) or match.group(2))
        text = report[match.end() : following.start() if following else len(report)].strip()
        sections[name] = (sections.get(name, "") + "\n\n" + text).strip()
    return sections


def section_name(heading: str) -> str:
    """The section a heading names ("Clinical details" -> "indication", "Opinion" -> "impression");
    `ValueError` for a word that names none."""
    name = next((name for pattern, name in _SECTION_OF if pattern.match(heading.strip())), None)
    if name is None:
        raise ValueError(f"{heading!r} is not a section heading")
    return name


def _standalone_heading(words: str) -> bool:
    """A heading without a colon counts only in capitals or title case ("FINDINGS", "Impression"), so a
    line that merely begins with such a word ("Findings are stable") is not a heading."""
    return words.isupper() or words.istitle()


def unheaded_findings(sections: dict[str, str]) -> str:
    """The findings of a report with no findings or impression heading: the whole body, or, after a
    history, indication, technique or comparison heading, what follows that heading's first sentence
    ("Indication: headaches. No intracranial mass." reads the second sentence, not the history)."""
    if "body" in sections:
        return sections["body"]
    parts = [sections.get("preamble", "")]
    for name, text in sections.items():
        if name != "preamble":
            parts.extend(split_sentences(text)[1:])
    return " ".join(part for part in parts if part)


def examination_title(sections: dict[str, str]) -> str:
    """What the examination is ("US RENAL", "CT KUB"): its heading's text or the title line before
    the first heading; empty for a report without headings (its first line may be a finding)."""
    if "examination" in sections:
        return sections["examination"].split("\n")[0].strip()
    preamble = sections.get("preamble", "").strip()
    return preamble.split("\n")[0].strip() if preamble else ""


def unheaded_findings_beside_an_impression(sections: dict[str, str]) -> str:
    """Findings written under no heading of their own in a report that has an impression but no
    findings heading: a preamble that starts with a sentence rather than a title; the paragraphs after
    the first of the preamble or of a request, technique or comparison section ("Clinical: pre-op.\n\n
    The heart is not enlarged."); organ lines in a first paragraph ("Clinical: RUQ pain.\nLiver:
    normal.\nGallbladder: gallstones."). A request's own lines ("History: 60F.\nKnown pleural
    effusion.", "CT CHEST\nHistory of breast cancer.") and recommendations are not read."""
    parts = []
    for name, text in sections.items():
        if name in READ_SECTIONS or name == "recommendation" or not text:
            continue
        first, *rest = re.split(r"\n\s*\n", text)
        lines = first.split("\n")
        if name == "preamble" and not _is_title(lines[0]):
            parts.append(first)  # findings written before the impression ("The lungs are clear.\nImpression:")
        else:
            parts.extend(line for line in lines[1:] if LINE_HEADING.match(line.strip()))
        parts.extend(rest)
    return "\n\n".join(part.strip() for part in parts if part.strip())


def _is_title(line: str) -> bool:
    """A title line ("CXR PA", "CT pulmonary angiogram"), not a sentence ("The lungs are clear.")."""
    return not line.strip().endswith(".")


def split_sentences(text: str) -> list[str]:
    """A text's sentences (and list items, lines that start a capitalised sentence), whitespace collapsed."""
    parts = SENTENCE_END.split(text.strip())
    return [" ".join(p.split()) for p in parts if p and p.strip(" .")]


def line_heading(sentence: str) -> str:
    """The line heading a sentence starts with ("Liver" of "Liver: normal."), else ""."""
    match = LINE_HEADING.match(sentence)
    return match.group(1) if match else ""


__all__ = [
    "LINE_HEADING",
    "READ_SECTIONS",
    "SECTION_HEADER",
    "examination_title",
    "line_heading",
    "section_name",
    "split_sections",
    "split_sentences",
    "unheaded_findings",
    "unheaded_findings_beside_an_impression",
]
