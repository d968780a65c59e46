"""Imaging families beyond the chest: brain MRI (`brain.py`), abdominal CT (`abdomen.py`) and
ultrasound (`ultrasound.py`). Each is a `Family`: its finding types, how it samples them for a
patient, how it images a study, and how its radiologists word a report. The cohort
(`cohort.py`) dispatches to a family by modality; chest X-ray and chest CT keep their own code.

Reports are written here for every family, in the family's style (header, sections, fillers,
phrasings), with the same ground truth as the chest reports: per finding key the mention status
chosen (positive, negative, uncertain, not mentioned) and the sentences that mention it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .findings import Finding, FindingType, register_finding_types
from .reports import NEGATIVE, NOT_MENTIONED, POSITIVE, STABLE_PHRASES, UNCERTAIN, pick
from .reports import number_article as article


@dataclass(frozen=True)
class ReportHeader:
    """The sections a report of a family opens with; `prior` names the comparison study."""

    examination: str
    indication: str
    technique: str
    prior: str

    def text(self, has_prior: bool, interval_days: int | None) -> str:
        comparison = f"{self.prior} from {interval_days} days earlier." if has_prior else "None."
        return (
            f"EXAMINATION:  {self.examination}\n\nINDICATION:  {self.indication}\n\n"
            f"TECHNIQUE:  {self.technique}\n\nCOMPARISON:  {comparison}\n\n"
        )


@dataclass
class ReportStyle:
    """How one family's reports read.

    describe(f, rng): a positive sentence (no comparison, no final full stop) for a present finding.
    negations: per key, sentences stating it is absent; new_negations: "No new ..." forms.
    nouns: per key, the phrase used in "The previously seen X has resolved" and uncertain forms
      (a phrasing the vocabulary knows). fillers: sentences about normal structures, which must
      not name any finding of the family. header: the text before FINDINGS (`ReportHeader`).
    sections: optional organ headings: key -> heading ("Liver"), fillers keyed "heading: text";
      sentences are then grouped under their heading, in this order."""

    describe: Callable[[Finding, np.random.Generator], str]
    negations: dict[str, list[str]]
    nouns: dict[str, str]
    fillers: list[str]
    header: ReportHeader
    new_negations: dict[str, str] = field(default_factory=dict)
    sections: dict[str, str] = field(default_factory=dict)
    normal_impression: str = "No acute abnormality."


@dataclass
class Family:
    """One imaging family of the synthetic cohort.

    patient(rng): what is fixed for a patient (anatomy, the exam ultrasound performs), as a dict.
    applies(key, patient): whether a finding type is imaged for this patient (all by default).
    sample(key, rng, present): a finding with random attributes.
    write_images(config, folder, rng, patient, findings, identity, uid_seed) -> (image, alternates):
      the study's files, paths relative to the cohort root."""

    modality: str
    code: str
    series_description: str
    types: list[FindingType]
    severity_keys: tuple[str, ...]
    patient: Callable[[np.random.Generator], dict]
    sample: Callable[[str, np.random.Generator, bool], Finding]
    write_images: Callable[..., tuple[str, list[str]]]
    style: ReportStyle
    applies: Callable[[str, dict], bool] = lambda key, patient: True
    description: Callable[[dict], str] | None = None


FAMILIES: dict[str, Family] = {}


def register(family: Family) -> Family:
    FAMILIES[family.modality] = family
    register_finding_types(family.types, family.severity_keys)
    return family


# ------------------------------------------------------------------------------------ helpers


def anchored_rng(finding: Finding, salt: int = 0) -> np.random.Generator:
    """A generator fixed by the finding's anchor: the same spots in every study of the patient."""
    return np.random.default_rng([int(abs(a) * 1e6) for a in finding.anchor] + [salt])


def relative(path: Path, root: Path) -> str:
    return str(path.relative_to(root))


# ------------------------------------------------------------------------------------ reports


def _change_sizes(prior: Finding, current: Finding, noun: str) -> str:
    if prior.size_mm is not None and prior.size_mm != current.size_mm:
        return f" from {prior.size_mm:.0f} mm"
    if prior.number is not None and prior.number != current.number:
        return f" from {prior.number}"
    if prior.grade is not None and prior.grade != current.grade:
        return f" from {prior.grade}"
    return ""


def compare(style: ReportStyle, current: Finding, prior: Finding, change: dict, rng) -> tuple[str, str]:
    """A sentence describing a finding against the prior study, and its mention status."""
    noun = style.nouns[current.key]
    label = change["label"]
    if label == "resolved":
        return pick(
            rng,
            [
                f"The previously seen {noun} has resolved",
                f"Interval resolution of the {noun}",
                f"The {noun} seen on the prior study has resolved",
            ],
        ), NEGATIVE
    text = style.describe(current, rng)
    if label == "new":
        return text + pick(
            rng, [", new since the prior study", ", which is new compared with the prior exam"]
        ), POSITIVE
    if label in ("increased", "decreased"):
        verb = label
        return text + pick(
            rng,
            [
                f", {verb}{_change_sizes(prior, current, noun)} on the prior study",
                f", {verb} compared with the prior exam",
            ],
        ), POSITIVE
    return text + pick(
        rng,
        STABLE_PHRASES,
    ), POSITIVE


def write_family_report(
    family: Family,
    findings: list[Finding],
    rng: np.random.Generator,
    prior: list[Finding] | None = None,
    changes: dict[str, dict] | None = None,
    interval_days: int | None = None,
) -> tuple[str, dict[str, dict]]:
    """The report text and, per finding key, {"status", "sentences"} as written (as `reports.write_report`)."""
    style = family.style
    mentions: dict[str, dict] = {}
    sentences: list[tuple[str, str | None, str]] = []  # (sentence, finding key, section heading)
    prior_by_key = {f.key: f for f in prior or []}
    for finding in findings:
        key = finding.key
        earlier = prior_by_key.get(key)
        change = (changes or {}).get(key)
        if change is not None and earlier is not None:
            text, status = compare(style, finding, earlier, change, rng)
        elif finding.present:
            if finding.lobe and rng.random() < 0.1:
                text, status = f"Possible {style.nouns[key]} in the {finding.lobe}", UNCERTAIN
            else:
                text, status = style.describe(finding, rng), POSITIVE
        elif rng.random() < 0.7:
            if earlier is not None and key in style.new_negations and rng.random() < 0.5:
                text = style.new_negations[key]
            else:
                text = pick(rng, style.negations[key])
            status = NEGATIVE
        else:
            mentions[key] = {"status": NOT_MENTIONED, "sentences": []}
            continue
        sentence = text[0].upper() + text[1:] + "."
        sentences.append((sentence, key, style.sections.get(key, "")))
        mentions[key] = {"status": status, "sentences": [sentence]}
    for filler in rng.permutation(style.fillers)[: int(rng.integers(2, 4))]:
        heading, _, text = str(filler).rpartition("|")
        sentences.append((f"{text}.", None, heading))
    order = [int(i) for i in rng.permutation(len(sentences))]
    if style.sections:
        headings = list(dict.fromkeys(style.sections.values()))
        lines = []
        for heading in [*headings, ""]:
            group = [i for i in order if sentences[i][2] == heading]
            if not group:
                continue
            if heading:
                # the decomposer reads "Heading: first sentence." as one sentence
                first = sentences[group[0]]
                labelled = f"{heading}: {first[0]}"
                if first[1] is not None:
                    mentions[first[1]]["sentences"] = [labelled]
                sentences[group[0]] = (labelled, first[1], heading)
            lines.append(" ".join(sentences[i][0] for i in group))
        body = "\n".join(lines)
    else:
        body = " ".join(sentences[i][0] for i in order)
    impression = []
    for sentence, key, heading in sentences:
        if key is None:
            continue
        resolved = (changes or {}).get(key, {}).get("label") == "resolved"
        if mentions[key]["status"] in (POSITIVE, UNCERTAIN) or resolved:
            plain = sentence[len(heading) + 2 :] if heading and sentence.startswith(f"{heading}: ") else sentence
            impression.append(plain)
            mentions[key]["sentences"].append(plain)
    if not impression:
        impression = [style.normal_impression]
    numbered = "\n".join(f"{n}. {s}" for n, s in enumerate(impression, start=1))
    text = f"{style.header.text(prior is not None, interval_days)}FINDINGS:\n\n{body}\n\nIMPRESSION:\n\n{numbered}\n"
    return text, mentions


__all__ = [
    "FAMILIES",
    "Family",
    "ReportStyle",
    "anchored_rng",
    "article",
    "compare",
    "pick",
    "register",
    "write_family_report",
]
