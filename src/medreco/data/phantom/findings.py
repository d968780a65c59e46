"""What the synthetic patients have: a catalogue of findings and how they evolve between studies.

Each finding type names its vocabulary entity (MedReCo paper, Appendix S2) and anatomy, and has
attributes (side, lobe, size, number, margins, density; and, for the chest findings, morphology,
internal characteristics, associated findings, distribution and aetiology) that may change from
the prior study to the current one. Findings are drawn independently, so several co-occur and whole-image
similarity is confounded: only entity-specific comparison recovers them."""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field

import numpy as np

from ..reports.change import CHANGE_LABELS, INVERSE_CHANGE

DRAWN_CHANGE_LABELS = CHANGE_LABELS[:-1]  # the cohort's changes are all comparable by construction
LOBES = {
    "right": ("right upper lobe", "right middle lobe", "right lower lobe"),
    "left": ("left upper lobe", "left lower lobe"),
}
GRADES = ("mild", "moderate", "severe")  # also small / moderate / large for collections
COLLECTION_GRADES = ("small", "moderate", "large")
MARGINS = ("smooth", "lobulated", "spiculated")
DENSITIES = ("solid", "part-solid", "ground-glass")
# Descriptive attributes of the chest findings (values as `reports.attributes` reads them back).
DESCRIPTORS = {
    "lung_nodule": {
        "morphology": ("round", "oval", "irregular"),
        "internal": ("homogeneous", "heterogeneous", "calcification", "cavitation"),
        "aetiology": ("neoplastic", "infectious", "inflammatory"),
        "associated": ("halo", "satellite nodules", None, None),
    },
    "consolidation": {
        "distribution": ("focal", "patchy", "lobar"),
        "internal": ("air bronchograms", "homogeneous"),
        "aetiology": ("infectious", "inflammatory"),
    },
    "atelectasis": {"morphology": ("linear", "wedge-shaped"), "associated": ("volume loss", None)},
    "lymphadenopathy": {
        "morphology": ("oval", "round"),
        "internal": ("homogeneous", "necrosis"),
        "aetiology": ("inflammatory", "neoplastic"),
    },
}


@dataclass(frozen=True)
class FindingType:
    key: str
    noun: str
    entity: str
    anatomy: str
    modalities: tuple[str, ...]
    prevalence: float = 0.35


FINDING_TYPES: dict[str, FindingType] = {
    t.key: t
    for t in (
        FindingType(
            "lung_nodule",
            "nodule",
            "Solitary pulmonary nodule and mass (peripheral lung cancer, granuloma)",
            "Pulmonary Parenchyma",
            ("chest_xray", "chest_ct"),
        ),
        FindingType(
            "consolidation",
            "consolidation",
            "Lung consolidation (e.g., high-density shadow due to inflammation)",
            "Pulmonary Parenchyma",
            ("chest_xray", "chest_ct"),
        ),
        FindingType(
            "pleural_effusion",
            "pleural effusion",
            "Pleural effusion (including loculated effusion)",
            "Pleura",
            ("chest_xray", "chest_ct"),
        ),
        FindingType(
            "cardiomegaly",
            "cardiomegaly",
            "Cardiac chamber enlargement (atrial or ventricular enlargement)",
            "Cardiac Chambers",
            ("chest_xray", "chest_ct"),
        ),
        FindingType(
            "atelectasis", "atelectasis", "Atelectasis", "Pulmonary Parenchyma", ("chest_xray", "chest_ct"), 0.3
        ),
        FindingType("emphysema", "emphysema", "Emphysema", "Pulmonary Parenchyma", ("chest_ct",), 0.3),
        FindingType(
            "lymphadenopathy",
            "mediastinal lymphadenopathy",
            "Lymphadenopathy within the mediastinum",
            "Mediastinum",
            ("chest_ct",),
            0.3,
        ),
        FindingType(
            "fatty_liver",
            "hepatic steatosis",
            "Decreased hepatic parenchymal density (e.g., fatty change)",
            "Liver_Hepatic Parenchyma",
            ("chest_ct",),
            0.3,
        ),
        FindingType(
            "pericardial_effusion", "pericardial effusion", "Pericardial effusion", "Pericardium", ("chest_ct",), 0.2
        ),
    )
}


def finding_types_for(modality: str) -> list[FindingType]:
    return [t for t in FINDING_TYPES.values() if modality in t.modalities]


@dataclass
class Finding:
    """One finding in one study. Unused attributes stay None. `anchor` is where it sits (fixed for
    the patient, in normalised body coordinates), so follow-up studies show it in the same place."""

    key: str
    present: bool = False
    side: str | None = None
    lobe: str | None = None
    size_mm: float | None = None
    grade: str | None = None
    number: int | None = None
    margins: str | None = None
    density: str | None = None
    morphology: str | None = None
    internal: str | None = None
    associated: str | None = None
    distribution: str | None = None
    aetiology: str | None = None
    anchor: list[float] = field(default_factory=list)

    def to_dict(self) -> dict:
        result = {k: v for k, v in asdict(self).items() if v is not None and k != "anchor"}
        result["entity"] = FINDING_TYPES[self.key].entity
        result["anatomy"] = FINDING_TYPES[self.key].anatomy
        return result


def sample_finding(key: str, rng: np.random.Generator, present: bool) -> Finding:
    """A finding with random attributes (they are kept even when absent, for a later 'new')."""
    side = str(rng.choice(["right", "left"]))
    finding = Finding(key, present=present, anchor=[float(v) for v in rng.uniform(-1, 1, size=3)])
    if key == "lung_nodule":
        finding.side, finding.lobe = side, str(rng.choice(LOBES[side]))
        finding.size_mm = float(rng.integers(10, 36))
        finding.number = int(rng.choice([1, 1, 1, 2, 3]))
        finding.margins = str(rng.choice(MARGINS))
        finding.density = str(rng.choice(DENSITIES))
    elif key in ("consolidation", "atelectasis"):
        lobes = LOBES[side] if key == "consolidation" else LOBES[side][-1:]
        finding.side, finding.lobe = side, str(rng.choice(lobes))
        finding.grade = str(rng.choice(COLLECTION_GRADES))
    elif key == "pleural_effusion":
        finding.side = str(rng.choice(["right", "left", "bilateral"]))
        finding.grade = str(rng.choice(COLLECTION_GRADES))
    elif key == "pericardial_effusion":
        finding.grade = str(rng.choice(COLLECTION_GRADES))
    elif key == "lymphadenopathy":
        finding.size_mm = float(rng.integers(16, 36))
        finding.number = int(rng.choice([1, 2, 3]))
    else:  # cardiomegaly, emphysema, fatty_liver: a severity grade
        finding.grade = str(rng.choice(GRADES))
    _describe(finding)
    return finding


def _descriptive_rng(finding: Finding, salt: float = 0.0) -> np.random.Generator:
    """Draws for the descriptive attributes and their changes, seeded by the finding's anchor (and
    `salt`) rather than taken from the cohort's generator, so that every other draw of the cohort,
    and so its findings, prevalences and images, stays as it was before these attributes existed."""
    return np.random.default_rng([int(abs(v) * 2**31) for v in (*finding.anchor, salt)] + [len(finding.key)])


def _describe(finding: Finding) -> None:
    """Morphology, internal characteristics, associated findings, distribution and aetiology."""
    options = DESCRIPTORS.get(finding.key)
    if options is None:
        return
    rng = _descriptive_rng(finding)
    for name, values in options.items():
        value = values[int(rng.integers(len(values)))]
        setattr(finding, name, None if value is None else str(value))
    if finding.key == "lung_nodule":  # an aetiology that fits the look
        if finding.internal == "calcification":
            finding.aetiology = "granulomatous"
        elif finding.margins == "spiculated":
            finding.aetiology = "neoplastic"
    elif finding.key == "lymphadenopathy" and finding.internal == "necrosis":
        finding.aetiology = "neoplastic"


SEVERITY_FINDINGS = ("cardiomegaly", "emphysema", "fatty_liver")


def grade_scale(finding: Finding) -> tuple[str, ...]:
    """mild/moderate/severe for diffuse findings, small/moderate/large for collections and extents."""
    return GRADES if finding.key in SEVERITY_FINDINGS else COLLECTION_GRADES


def _scale(finding: Finding, up: bool, rng: np.random.Generator) -> str:
    """Change the finding's size (or grade, or number); returns the attribute changed."""
    if finding.size_mm is not None and (finding.number is None or rng.random() < 0.7):
        factor = rng.uniform(1.4, 1.9)
        finding.size_mm = float(round(finding.size_mm * factor if up else max(3.0, finding.size_mm / factor)))
        return "size"
    if finding.number is not None:
        finding.number = finding.number + 1 if up else max(1, finding.number - 1)
        return "number"
    scale = grade_scale(finding)
    index = scale.index(finding.grade)
    finding.grade = scale[min(index + 1, 2) if up else max(index - 1, 0)]
    return "severity" if scale is GRADES else "size"


def can_scale(finding: Finding, up: bool) -> bool:
    if finding.size_mm is not None or finding.number is not None:
        return up or (finding.size_mm or 99) > 4 or (finding.number or 1) > 1
    scale = grade_scale(finding)
    return finding.grade != (scale[-1] if up else scale[0])


def evolve(prior: Finding, rng: np.random.Generator) -> tuple[Finding, dict | None]:
    """The finding at the next study and its change label (None when absent in both)."""
    current = copy.deepcopy(prior)
    if not prior.present:
        if rng.random() < 0.25:
            current.present = True
            return current, {"label": "new", "attribute": "presence"}
        return current, None
    roll = rng.random()
    if roll < 0.15:
        current.present = False
        return current, {"label": "resolved", "attribute": "presence"}
    if roll < 0.4 and can_scale(current, up=True):
        return current, {"label": "increased", "attribute": _scale(current, True, rng)}
    if roll < 0.6 and can_scale(current, up=False):
        return current, {"label": "decreased", "attribute": _scale(current, False, rng)}
    if roll < 0.7 and current.margins is not None:
        options = [m for m in MARGINS if m != current.margins]
        current.margins = str(rng.choice(options))
        return current, {"label": "qualitatively changed", "attribute": "margins"}
    if roll < 0.75 and current.density is not None:
        current.density = str(rng.choice([d for d in DENSITIES if d != current.density]))
        return current, {"label": "qualitatively changed", "attribute": "composition"}
    changed = _change_description(current, roll)
    if changed is not None:
        return current, {"label": "qualitatively changed", "attribute": changed}
    return current, {"label": "stable", "attribute": "overall"}


def _change_description(finding: Finding, roll: float) -> str | None:
    """Location, distribution or internal-composition changes (paper Table S8's follow-up
    attributes), taken from what would otherwise be a stable finding: a consolidation that moves to
    another lobe (0.6-0.67) or changes distribution (0.67-0.73), a consolidation (0.73-0.77) or a
    non-calcified nodule (0.75-0.78) that cavitates. Returns the attribute changed, or None."""
    rng = _descriptive_rng(finding, roll)
    if finding.key == "consolidation" and 0.6 <= roll < 0.67:
        lobes = [lobe for lobes in LOBES.values() for lobe in lobes if lobe != finding.lobe]
        finding.lobe = lobes[int(rng.integers(len(lobes)))]
        finding.side = finding.lobe.split()[0]
        return "location"
    if finding.key == "consolidation" and 0.67 <= roll < 0.73:
        values = [d for d in DESCRIPTORS["consolidation"]["distribution"] if d != finding.distribution]
        finding.distribution = values[int(rng.integers(len(values)))]
        return "distribution"
    cavitates = (finding.key == "consolidation" and 0.73 <= roll < 0.77) or (
        finding.key == "lung_nodule" and 0.75 <= roll < 0.78 and finding.internal in ("homogeneous", "heterogeneous")
    )
    if cavitates and finding.internal != "cavitation":
        finding.internal = "cavitation"
        return "composition"
    return None


def register_finding_types(types: list[FindingType], severity_keys: tuple[str, ...] = ()) -> None:
    """Add the finding types of another family (brain MRI, abdominal CT, ultrasound: `families.py`);
    `severity_keys` are graded mild/moderate/severe rather than small/moderate/large."""
    global SEVERITY_FINDINGS
    FINDING_TYPES.update({t.key: t for t in types})
    SEVERITY_FINDINGS = tuple(dict.fromkeys((*SEVERITY_FINDINGS, *severity_keys)))


__all__ = [
    "DRAWN_CHANGE_LABELS",
    "FINDING_TYPES",
    "INVERSE_CHANGE",
    "LOBES",
    "Finding",
    "FindingType",
    "evolve",
    "finding_types_for",
    "register_finding_types",
    "sample_finding",
]
