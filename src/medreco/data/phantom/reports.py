"""Free-text radiology reports written from a study's ground truth, in the styles of MIMIC-CXR
(chest X-ray) and CT-RATE (chest CT): findings and impression sections, negations, uncertainty,
"compared with the prior" sentences, varied phrasing. The generator also records, per finding,
the mention status it chose (positive, negative, uncertain, not mentioned) and the sentences
that mention it: the reference that report decomposition is scored against."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .findings import FINDING_TYPES, Finding

POSITIVE, NEGATIVE, UNCERTAIN, NOT_MENTIONED = "positive", "negative", "uncertain", "not mentioned"


# How a report says a finding has not changed since the prior study (every family's reports).
STABLE_PHRASES = [
    ", unchanged from the prior study",
    ", stable compared with the prior exam",
    ", not significantly changed",
]


def pick(rng: np.random.Generator, options: list[str]) -> str:
    return options[int(rng.integers(len(options)))]


def number_article(number: float) -> str:
    """The article before a spoken number: 'an 8 mm', 'an 18 mm', 'a 12 mm'."""
    spoken = f"{number:.0f}"
    return "an" if spoken.startswith("8") or spoken in ("11", "18") else "a"


def _article(phrase: str) -> str:
    """'an' before a vowel ('an oval nodule', 'an irregularly shaped nodule'), else 'a'."""
    return "an" if phrase[:1].lower() in "aeiou" else "a"


def _where(f: Finding) -> str:
    if f.lobe:
        return f"the {f.lobe}"
    return ""


# How the chest findings' descriptive attributes read (every wording of a finding states all of
# them, so a prior and a current report differ only where the finding did).
SHAPES = {"round": "round", "oval": "oval", "irregular": "irregularly shaped", "linear": "linear"}
WITH = {  # internal features and associated findings, said after the noun ("with ...")
    "calcification": "internal calcification",
    "cavitation": "cavitation",
    "air bronchograms": "air bronchograms",
    "necrosis": "central necrosis",
    "halo": "a surrounding halo",
    "satellite nodules": "satellite nodules",
}
AETIOLOGY = {
    "neoplastic": "suspicious for malignancy",
    "infectious": "likely infectious",
    "inflammatory": "likely inflammatory",
    "granulomatous": "likely granulomatous",
}


def _shape(f: Finding) -> str:
    return f"{SHAPES.get(f.morphology, f.morphology)} " if f.morphology else ""


def _texture(f: Finding) -> str:
    """The texture word ("homogeneous", "heterogeneous") before the noun; other internal features follow it."""
    return f"{f.internal} " if f.internal in ("homogeneous", "heterogeneous") else ""


def _with(f: Finding) -> str:
    """' with cavitation and a surrounding halo' (atelectasis says its volume loss itself)."""
    said = [WITH[v] for v in (f.internal, f.associated) if v in WITH]
    return f" with {' and '.join(said)}" if said else ""


def _cause(f: Finding) -> str:
    return f", {AETIOLOGY[f.aetiology]}" if f.aetiology else ""


def describe(f: Finding, modality: str, rng: np.random.Generator) -> str:
    """A positive description of a present finding (no comparison): one of its wordings, drawn by `rng`."""
    wordings = _WORDINGS.get(f.key)
    if wordings is None:
        raise ValueError(f.key)
    return pick(rng, wordings(f, modality == "chest_ct"))


def _nodule_wordings(f: Finding, ct: bool) -> list[str]:
    density = f"{f.density} " if ct else ""
    look = f"{_shape(f)}{_texture(f)}{density}"
    if f.number and f.number > 1:
        return [
            f"There are {f.number} {look}nodules{_with(f)} in {_where(f)}, the largest measuring "
            f"{f.size_mm:.0f} mm, with {f.margins} margins{_cause(f)}",
            f"{f.number} {look}pulmonary nodules{_with(f)} are present in {_where(f)}, "
            f"up to {f.size_mm:.0f} mm, {f.margins}{_cause(f)}",
        ]
    return [
        f"There is {number_article(f.size_mm)} {f.size_mm:.0f} mm {f.margins} {look}nodule{_with(f)} "
        f"in {_where(f)}{_cause(f)}",
        f"{_article(look or 'nodule').capitalize()} {look}nodule with {f.margins} margins"
        f"{_with(f).replace(' with', ' and', 1)} measuring {f.size_mm:.0f} mm is seen in "
        f"{_where(f)}{_cause(f)}",
        f"{_where(f).capitalize()} contains a {f.margins} {look}nodule{_with(f)} of {f.size_mm:.0f} mm{_cause(f)}",
    ]


def _consolidation_wordings(f: Finding, ct: bool) -> list[str]:
    spread = f"{f.distribution} " if f.distribution else ""
    return [
        f"There is {f.grade} {spread}{_texture(f)}consolidation{_with(f)} in {_where(f)}{_cause(f)}",
        f"{f.grade.capitalize()} {spread}{_texture(f)}airspace consolidation{_with(f)} is present in "
        f"{_where(f)}{_cause(f)}",
        f"{(spread + _texture(f)).capitalize()}consolidation{_with(f)} in {_where(f)}, {f.grade} in extent{_cause(f)}",
    ]


def _atelectasis_wordings(f: Finding, ct: bool) -> list[str]:
    volume = " with volume loss" if f.associated == "volume loss" else ""
    return [
        f"{f.grade.capitalize()} {_shape(f)}atelectasis in {_where(f)}{volume}",
        f"There is {f.grade} {_shape(f)}atelectasis at {_where(f)}{volume}",
    ]


def _pleural_effusion_wordings(f: Finding, ct: bool) -> list[str]:
    if f.side == "bilateral":
        return [
            f"{f.grade.capitalize()} bilateral pleural effusions",
            f"There are {f.grade} bilateral pleural effusions",
        ]
    return [
        f"There is a {f.grade} {f.side} pleural effusion",
        f"{f.grade.capitalize()} {f.side}-sided pleural effusion",
        f"A {f.grade} pleural effusion is seen on the {f.side}",
    ]


def _lymphadenopathy_wordings(f: Finding, ct: bool) -> list[str]:
    nodes = "an enlarged mediastinal lymph node" if f.number == 1 else f"{f.number} enlarged mediastinal lymph nodes"
    look = f", {_shape(f)}{_texture(f)}".rstrip() + _with(f) if f.morphology else ""
    cause = {"inflammatory": ", likely reactive", "neoplastic": ", suspicious for malignancy"}.get(f.aetiology, "")
    return [
        f"There is {nodes}{look}, measuring up to {f.size_mm:.0f} mm, consistent with mediastinal "
        f"lymphadenopathy{cause}",
        f"Mediastinal lymphadenopathy: {nodes}{look}, up to {f.size_mm:.0f} mm in short axis{cause}",
    ]


# finding key -> its wordings, given the finding and whether the study is a chest CT
_WORDINGS: dict[str, Callable[[Finding, bool], list[str]]] = {
    "lung_nodule": _nodule_wordings,
    "consolidation": _consolidation_wordings,
    "atelectasis": _atelectasis_wordings,
    "pleural_effusion": _pleural_effusion_wordings,
    "cardiomegaly": lambda f, ct: [
        f"{f.grade.capitalize()} cardiomegaly",
        f"The heart is {f.grade}ly enlarged",
        f"The cardiac silhouette is {f.grade}ly enlarged, consistent with cardiomegaly",
    ],
    "emphysema": lambda f, ct: [
        f"{f.grade.capitalize()} centrilobular emphysema in both upper lobes",
        f"Emphysematous changes of {f.grade} degree are noted",
    ],
    "lymphadenopathy": _lymphadenopathy_wordings,
    "fatty_liver": lambda f, ct: [
        f"{f.grade.capitalize()} hepatic steatosis",
        f"Diffusely decreased attenuation of the liver, consistent with {f.grade} hepatic steatosis",
    ],
    "pericardial_effusion": lambda f, ct: [
        f"There is a {f.grade} pericardial effusion",
        f"{f.grade.capitalize()} pericardial effusion",
    ],
}


NEGATIONS = {
    "lung_nodule": ["No pulmonary nodule is seen", "No suspicious pulmonary nodules", "There is no lung nodule"],
    "consolidation": [
        "No focal consolidation",
        "There is no consolidation",
        "The lungs are clear without consolidation",
    ],
    "atelectasis": ["No atelectasis", "There is no atelectasis"],
    "pleural_effusion": ["No pleural effusion", "There is no pleural effusion", "No evidence of pleural effusion"],
    "cardiomegaly": ["Heart size is normal", "The cardiac silhouette is within normal limits", "No cardiomegaly"],
    "emphysema": ["No emphysema", "There is no emphysema"],
    "lymphadenopathy": ["No mediastinal lymphadenopathy", "Mediastinal lymph nodes are not enlarged"],
    "fatty_liver": ["The liver has normal attenuation without steatosis", "No hepatic steatosis"],
    "pericardial_effusion": ["No pericardial effusion", "There is no pericardial effusion"],
}
NEW_NEGATIONS = {  # absent now and before: comparison-style negations
    "pleural_effusion": "No new pleural effusion",
    "consolidation": "No new consolidation",
    "lung_nodule": "No new pulmonary nodule",
    "lymphadenopathy": "No new mediastinal lymphadenopathy",
}
UNCERTAIN_FORMS = [
    "Possible {noun} in {where}",
    "{noun_cap} in {where} cannot be excluded",
    "Subtle opacity in {where} may represent {noun}",
]
FILLERS = {
    "chest_xray": ["No pneumothorax", "The osseous structures are unremarkable", "No acute osseous abnormality"],
    "chest_ct": [
        "Trachea and both main bronchi are patent",
        "The thoracic esophagus is normal in calibre",
        "No pneumothorax",
        "Degenerative changes of the thoracic spine",
    ],
}


def _sizes(prior: Finding, current: Finding) -> str:
    if prior.size_mm is not None and prior.size_mm != current.size_mm:
        return f" from {prior.size_mm:.0f} mm"
    if prior.number is not None and prior.number != current.number:
        return f" from {prior.number} nodules" if current.key == "lung_nodule" else f" from {prior.number} nodes"
    if prior.grade != current.grade:
        return f" from {prior.grade}"
    return ""


def compare(current: Finding, prior: Finding, change: dict, modality: str, rng: np.random.Generator) -> tuple[str, str]:
    """A sentence describing a finding against the prior study, and its mention status."""
    noun = FINDING_TYPES[current.key].noun
    label = change["label"]
    if label == "resolved":
        where = f" in {_where(prior)}" if prior.lobe else ""
        return pick(
            rng,
            [
                f"The previously seen {noun}{where} has resolved",
                f"Interval resolution of the {noun}{where}",
                f"No {noun} is seen now; it was present on the prior study",
            ],
        ), NEGATIVE
    text = describe(current, modality, rng)
    if label == "new":
        return text + pick(
            rng, [", new since the prior study", ", which is new compared with the prior exam", " (new)"]
        ), POSITIVE
    if label in ("increased", "decreased"):
        verb = "increased" if label == "increased" else "decreased"
        return text + pick(
            rng, [f", {verb}{_sizes(prior, current)} on the prior study", f", {verb} compared with the prior exam"]
        ), POSITIVE
    if label == "qualitatively changed":
        attribute = change["attribute"]
        if attribute == "location":
            return text + pick(
                rng,
                [f", previously in {_where(prior)}", f", which has moved from {_where(prior)} since the prior study"],
            ), POSITIVE
        if attribute == "distribution":
            return text + f", previously {prior.distribution}", POSITIVE
        if attribute == "composition" and prior.internal != current.internal:  # e.g. cavitation has appeared
            before = WITH.get(prior.internal, f"{prior.internal} content")
            return text + f", where the prior study showed {before}", POSITIVE
        name = "density" if attribute == "composition" else attribute  # a nodule's composition is its density
        before = getattr(prior, name)
        return text + f", now {getattr(current, name)} where the prior study showed {before} {attribute}", POSITIVE
    return text + pick(
        rng,
        STABLE_PHRASES,
    ), POSITIVE


def write_report(
    modality: str,
    findings: list[Finding],
    rng: np.random.Generator,
    prior: list[Finding] | None = None,
    changes: dict[str, dict] | None = None,
    interval_days: int | None = None,
) -> tuple[str, dict[str, dict]]:
    """The report text and, per finding key, {"status", "sentences"} as written."""
    mentions: dict[str, dict] = {}
    sentences: list[tuple[str, str | None]] = []  # (sentence, finding key)
    prior_by_key = {f.key: f for f in prior or []}
    for finding in findings:
        key = finding.key
        earlier = prior_by_key.get(key)
        change = (changes or {}).get(key)
        if change is not None and earlier is not None:
            text, status = compare(finding, earlier, change, modality, rng)
        elif finding.present:
            if finding.lobe and rng.random() < 0.12:
                noun = FINDING_TYPES[key].noun
                form = pick(rng, UNCERTAIN_FORMS)
                text, status = form.format(noun=noun, noun_cap=noun.capitalize(), where=_where(finding)), UNCERTAIN
            else:
                text, status = describe(finding, modality, rng), POSITIVE
        elif rng.random() < 0.6:
            if earlier is not None and key in NEW_NEGATIONS and rng.random() < 0.5:
                text = NEW_NEGATIONS[key]
            else:
                text = pick(rng, NEGATIONS[key])
            status = NEGATIVE
        else:
            mentions[key] = {"status": NOT_MENTIONED, "sentences": []}
            continue
        sentence = text[0].upper() + text[1:] + "."
        sentences.append((sentence, key))
        mentions[key] = {"status": status, "sentences": [sentence]}
    for filler in rng.permutation(FILLERS[modality])[: int(rng.integers(1, 3))]:
        sentences.append((f"{filler}.", None))
    order = rng.permutation(len(sentences))
    body = " ".join(sentences[i][0] for i in order)

    impression = []
    for sentence, key in sentences:
        if key is None:
            continue
        resolved = (changes or {}).get(key, {}).get("label") == "resolved"
        if mentions[key]["status"] in (POSITIVE, UNCERTAIN) or resolved:
            impression.append(sentence)
            mentions[key]["sentences"].append(sentence)
    if not impression:
        impression = [
            "No acute cardiopulmonary process." if modality == "chest_xray" else "No significant abnormality."
        ]
    if modality == "chest_xray":
        comparison = f"Prior chest radiograph from {interval_days} days earlier." if prior else "None."
        header = (
            "EXAMINATION:  CHEST (PA AND LAT)\n\nINDICATION:  ___ with shortness of breath.\n\n"
            f"COMPARISON:  {comparison}\n\n"
        )
        text = f"{header}FINDINGS: \n\n{body}\n\nIMPRESSION: \n\n" + "\n".join(impression) + "\n"
    else:
        comparison = f"Compared with the prior CT from {interval_days} days earlier. " if prior else ""
        text = f"Findings: {comparison}{body}\n\nImpressions: " + " ".join(impression) + "\n"
    return text, mentions


__all__ = [
    "NEGATIVE",
    "NOT_MENTIONED",
    "POSITIVE",
    "STABLE_PHRASES",
    "UNCERTAIN",
    "compare",
    "describe",
    "number_article",
    "pick",
    "write_report",
]
