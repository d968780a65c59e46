"""Free-text radiology reports written from a study's ground truth, in the styles of MIMIC-CXR
(chest X-ray) and CT-RATE (chest CT): findings and impression sections, negations, uncertainty,
"compared with the prior" sentences, varied phrasing. The generator also records, per finding,
the mention status it chose (positive, negative, uncertain, not mentioned) and the sentences
that mention it: the reference that report decomposition is scored against."""

from __future__ import annotations

import numpy as np

from .findings import FINDING_TYPES, Finding

POSITIVE, NEGATIVE, UNCERTAIN, NOT_MENTIONED = "positive", "negative", "uncertain", "not mentioned"


def _pick(rng: np.random.Generator, options: list[str]) -> str:
    return options[int(rng.integers(len(options)))]


def _a(number: float) -> str:
    """The article before a spoken number: 'an 8 mm', 'an 18 mm', 'a 12 mm'."""
    spoken = f"{number:.0f}"
    return "an" if spoken.startswith("8") or spoken in ("11", "18") else "a"


def _where(f: Finding) -> str:
    if f.lobe:
        return f"the {f.lobe}"
    return ""


def describe(f: Finding, modality: str, rng: np.random.Generator) -> str:
    """A positive description of a present finding (no comparison)."""
    ct = modality == "chest_ct"
    if f.key == "lung_nodule":
        density = f"{f.density} " if ct else ""
        if f.number and f.number > 1:
            return _pick(
                rng,
                [
                    f"There are {f.number} {density}nodules in {_where(f)}, the largest measuring "
                    f"{f.size_mm:.0f} mm, with {f.margins} margins",
                    f"{f.number} {density}pulmonary nodules are present in {_where(f)}, "
                    f"up to {f.size_mm:.0f} mm, {f.margins}",
                ],
            )
        return _pick(
            rng,
            [
                f"There is {_a(f.size_mm)} {f.size_mm:.0f} mm {f.margins} {density}nodule in {_where(f)}",
                f"A {density}nodule with {f.margins} margins measuring {f.size_mm:.0f} mm is seen in {_where(f)}",
                f"{_where(f).capitalize()} contains a {f.margins} {density}nodule of {f.size_mm:.0f} mm",
            ],
        )
    if f.key == "consolidation":
        return _pick(
            rng,
            [
                f"There is {f.grade} consolidation in {_where(f)}",
                f"{f.grade.capitalize()} airspace consolidation is present in {_where(f)}",
                f"Consolidation in {_where(f)}, {f.grade} in extent",
            ],
        )
    if f.key == "atelectasis":
        return _pick(
            rng,
            [
                f"{f.grade.capitalize()} atelectasis in {_where(f)}",
                f"There is {f.grade} atelectasis at {_where(f)}",
            ],
        )
    if f.key == "pleural_effusion":
        if f.side == "bilateral":
            return _pick(
                rng,
                [
                    f"{f.grade.capitalize()} bilateral pleural effusions",
                    f"There are {f.grade} bilateral pleural effusions",
                ],
            )
        return _pick(
            rng,
            [
                f"There is a {f.grade} {f.side} pleural effusion",
                f"{f.grade.capitalize()} {f.side}-sided pleural effusion",
                f"A {f.grade} pleural effusion is seen on the {f.side}",
            ],
        )
    if f.key == "cardiomegaly":
        return _pick(
            rng,
            [
                f"{f.grade.capitalize()} cardiomegaly",
                f"The heart is {f.grade}ly enlarged",
                f"The cardiac silhouette is {f.grade}ly enlarged, consistent with cardiomegaly",
            ],
        )
    if f.key == "emphysema":
        return _pick(
            rng,
            [
                f"{f.grade.capitalize()} centrilobular emphysema in both upper lobes",
                f"Emphysematous changes of {f.grade} degree are noted",
            ],
        )
    if f.key == "lymphadenopathy":
        nodes = (
            "an enlarged mediastinal lymph node" if f.number == 1 else f"{f.number} enlarged mediastinal lymph nodes"
        )
        return _pick(
            rng,
            [
                f"There is {nodes}, measuring up to {f.size_mm:.0f} mm, consistent with mediastinal lymphadenopathy",
                f"Mediastinal lymphadenopathy: {nodes} up to {f.size_mm:.0f} mm in short axis",
            ],
        )
    if f.key == "fatty_liver":
        return _pick(
            rng,
            [
                f"{f.grade.capitalize()} hepatic steatosis",
                f"Diffusely decreased attenuation of the liver, consistent with {f.grade} hepatic steatosis",
            ],
        )
    if f.key == "pericardial_effusion":
        return _pick(
            rng, [f"There is a {f.grade} pericardial effusion", f"{f.grade.capitalize()} pericardial effusion"]
        )
    raise ValueError(f.key)


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
        return _pick(
            rng,
            [
                f"The previously seen {noun}{where} has resolved",
                f"Interval resolution of the {noun}{where}",
                f"No {noun} is seen now; it was present on the prior study",
            ],
        ), NEGATIVE
    text = describe(current, modality, rng)
    if label == "new":
        return text + _pick(
            rng, [", new since the prior study", ", which is new compared with the prior exam", " (new)"]
        ), POSITIVE
    if label in ("increased", "decreased"):
        verb = "increased" if label == "increased" else "decreased"
        return text + _pick(
            rng, [f", {verb}{_sizes(prior, current)} on the prior study", f", {verb} compared with the prior exam"]
        ), POSITIVE
    if label == "qualitatively changed":
        attribute = change["attribute"]
        before = getattr(prior, attribute)
        return text + f", now {getattr(current, attribute)} where the prior study showed {before} {attribute}", POSITIVE
    return text + _pick(
        rng,
        [", unchanged from the prior study", ", stable compared with the prior exam", ", not significantly changed"],
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
                form = _pick(rng, UNCERTAIN_FORMS)
                text, status = form.format(noun=noun, noun_cap=noun.capitalize(), where=_where(finding)), UNCERTAIN
            else:
                text, status = describe(finding, modality, rng), POSITIVE
        elif rng.random() < 0.6:
            if earlier is not None and key in NEW_NEGATIONS and rng.random() < 0.5:
                text = NEW_NEGATIONS[key]
            else:
                text = _pick(rng, NEGATIONS[key])
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


__all__ = ["NEGATIVE", "NOT_MENTIONED", "POSITIVE", "UNCERTAIN", "compare", "describe", "write_report"]
