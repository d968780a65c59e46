"""Abdominal CT of the synthetic cohort: an abdomen and pelvis in Hounsfield units, unenhanced (as a
renal-stone or follow-up protocol), with liver lesions, hepatic steatosis (the liver darker than
the spleen), renal cysts and stones, ascites, splenomegaly and gallstones. Written like chest CT:
an axial DICOM series (int16, RescaleIntercept -1024) and a NIfTI twin."""

from __future__ import annotations

import numpy as np

from .dicom import canonical_affine, write_ct_series, write_nifti
from .families import Family, ReportHeader, ReportStyle, anchored_rng, article, pick, register, relative
from .findings import COLLECTION_GRADES, GRADES, Finding, FindingType
from .render import Grid, paint

LIVER, KIDNEYS = "Liver_Hepatic Parenchyma", "Kidneys_Renal Parenchyma"
TYPES = [
    FindingType(
        "liver_lesion",
        "liver lesion",
        "Focal liver lesion (cyst, hemangioma, metastasis)",
        LIVER,
        ("abdominal_ct",),
        0.3,
    ),
    FindingType(
        "hepatic_steatosis",
        "hepatic steatosis",
        "decreased hepatic parenchymal density",
        LIVER,
        ("abdominal_ct",),
        0.35,
    ),
    FindingType("renal_cyst", "renal cyst", "cystic lesion of the renal parenchyma", KIDNEYS, ("abdominal_ct",), 0.35),
    FindingType("renal_stone", "renal calculus", "renal calcification", KIDNEYS, ("abdominal_ct",), 0.3),
    FindingType("ascites", "ascites", "Ascites", "Peritoneal cavity", ("abdominal_ct",), 0.25),
    FindingType(
        "splenomegaly",
        "splenomegaly",
        "Splenomegaly",
        "Spleen_Splenic Parenchyma",
        ("abdominal_ct",),
        0.25,
    ),
    FindingType("gallstones", "gallstones", "cholelithiasis", "Gallbladder Lumen", ("abdominal_ct",), 0.3),
]
SEVERITY = ("hepatic_steatosis", "splenomegaly")
FIELD_OF_VIEW = (300.0, 300.0, 400.0)  # mm along (z, y, x): dome of the liver to the pelvis
SPACING = {"tiny": (15.0, 8.0, 8.0), "small": (7.5, 3.75, 3.75), "paper": (1.25, 0.7, 0.7)}
FAT, MUSCLE, FLUID, BONE, AIR = -100.0, 45.0, 8.0, 450.0, -1000.0


def sample(key: str, rng: np.random.Generator, present: bool) -> Finding:
    finding = Finding(key, present=present, anchor=[float(v) for v in rng.uniform(-1, 1, size=3)])
    side = str(rng.choice(["right", "left"]))
    if key == "liver_lesion":
        finding.lobe = str(rng.choice(["right lobe of the liver", "left lobe of the liver"]))
        finding.size_mm = float(rng.integers(12, 36))
        finding.number = int(rng.choice([1, 1, 2, 3]))
    elif key == "renal_cyst":
        finding.side, finding.size_mm = side, float(rng.integers(14, 40))
    elif key == "renal_stone":
        finding.side, finding.size_mm = side, float(rng.integers(4, 13))
        finding.number = int(rng.choice([1, 1, 2]))
    elif key == "gallstones":
        finding.size_mm = float(rng.integers(6, 20))
        finding.number = int(rng.choice([1, 2, 3, 4]))
    elif key == "ascites":
        finding.grade = str(rng.choice(COLLECTION_GRADES))
    else:
        finding.grade = str(rng.choice(GRADES))
    return finding


def patient(rng: np.random.Generator) -> dict:
    return {"body_scale": float(rng.uniform(0.9, 1.1)), "liver_shift": float(rng.uniform(-8, 8))}


def _kidney_centre(side: str, s: float) -> tuple[float, float, float]:
    return ((1 if side == "left" else -1) * 68 * s, 48.0, -5.0 if side == "right" else 5.0)


def render_abdomen_hu(grid: Grid, findings: list[Finding], patient_state: dict, rng, noise_hu: float = 12.0):
    """Voxelise one study in HU: (D, H, W) with D toward superior, H posterior, W patient left."""
    s = patient_state["body_scale"]
    present = {f.key: f for f in findings if f.present}
    volume = np.full(grid.shape, AIR, dtype=np.float32)
    paint(volume, grid, (0, 0, 0), (175 * s, 125 * s, 1000), FAT)  # subcutaneous fat
    paint(volume, grid, (0, 0, 0), (160 * s, 112 * s, 1000), MUSCLE)  # abdominal wall
    cavity = paint(volume, grid, (0, -3, 0), (150 * s, 102 * s, 1000), -90.0)  # visceral fat
    if (ascites := present.get("ascites")) is not None:
        depth = {"small": 0.9, "moderate": 0.8, "large": 0.66}[ascites.grade]
        inner = np.zeros(grid.shape, dtype=bool)
        box = grid.box((0, -3, 0), (150 * s * depth, 102 * s * depth, 1000))
        if box is not None:
            inner[box] = grid.local(box, (0, -3, 0), (150 * s * depth, 102 * s * depth, 1000)) <= 1.0
        volume[cavity & ~inner & (grid.y[None, :, None] < 60)] = FLUID
        paint(volume, grid, (0, -10, -120), (110 * s, 60, 40 / depth), FLUID, within=cavity)  # pelvis
    bowel = np.random.default_rng(int(abs(patient_state["liver_shift"]) * 1e4))
    for _ in range(14):  # bowel loops: soft tissue walls with gas or fluid, the same loops each study
        centre = (bowel.uniform(-90, 90) * s, bowel.uniform(-70, 20), bowel.uniform(-130, 10))
        radius = bowel.uniform(12, 22)
        paint(volume, grid, centre, (radius,) * 3, 35.0, within=cavity)
        paint(volume, grid, centre, (radius - 3,) * 3, AIR if bowel.random() < 0.5 else 15.0, within=cavity)
    paint(volume, grid, (0, -15, -125), (38, 30, 28), 6.0)  # bladder
    paint(volume, grid, (0, 62 * s, 0), (22, 20, 1000), BONE)  # spine
    paint(volume, grid, (12, 38 * s, 0), (11, 11, 1000), 42.0)  # aorta
    paint(volume, grid, (-18, 35 * s, 40), (12, 10, 110), 38.0)  # inferior vena cava
    for side in ("right", "left"):
        centre = _kidney_centre(side, s)
        paint(volume, grid, centre, (26, 22, 52), 32.0)
        paint(volume, grid, (centre[0] * 0.82, centre[1] - 4, centre[2]), (8, 9, 26), -60.0)  # sinus fat
    spleen_scale = {"mild": 1.25, "moderate": 1.5, "severe": 1.8}.get(
        getattr(present.get("splenomegaly"), "grade", None), 1.0
    )
    paint(volume, grid, (80 * s, 42, 78 - 10 * spleen_scale), (40 * spleen_scale, 30, 48 * spleen_scale), 48.0)
    steatosis = present.get("hepatic_steatosis")
    liver_hu = {"mild": 32.0, "moderate": 12.0, "severe": -12.0}[steatosis.grade] if steatosis else 60.0
    liver_centre = (-62 * s + patient_state["liver_shift"], 5.0, 80.0)
    liver = paint(volume, grid, liver_centre, (95 * s, 85 * s, 72), liver_hu)
    gallbladder = (-48 * s, -42.0, 30.0)
    paint(volume, grid, gallbladder, (17, 15, 34), 10.0)
    if (lesion := present.get("liver_lesion")) is not None and liver is not None:
        spots = anchored_rng(lesion, 3)
        side = -1 if lesion.lobe.startswith("right") else 1
        for index in range(lesion.number):
            radius = lesion.size_mm / 2 * (1.0 if index == 0 else spots.uniform(0.55, 0.85))
            centre = (
                liver_centre[0] + side * 40 * s + spots.uniform(-18, 18),
                spots.uniform(-35, 35),
                spots.uniform(60, 115),
            )
            paint(volume, grid, centre, (radius,) * 3, 18.0, within=liver)
    if (cyst := present.get("renal_cyst")) is not None:
        x, y, z = _kidney_centre(cyst.side, s)
        outward = 1 if cyst.side == "left" else -1
        paint(volume, grid, (x + outward * 14, y + 4, z + 18 * cyst.anchor[2]), (cyst.size_mm / 2,) * 3, 4.0)
    if (stone := present.get("renal_stone")) is not None:
        x, y, z = _kidney_centre(stone.side, s)
        minimum = 0.6 * max(grid.spacing)  # small stones still light up at least one voxel
        for index in range(stone.number):
            radius = max(stone.size_mm / 2 * (1.0 if index == 0 else 0.7), minimum)
            paint(volume, grid, (x * 0.85, y - 3, z - 22 + 30 * index), (radius,) * 3, 900.0)
    if (stones := present.get("gallstones")) is not None:
        minimum = 0.6 * max(grid.spacing)
        for index in range(stones.number):
            radius = max(stones.size_mm / 2 * (1.0 if index == 0 else 0.75), minimum)
            offset = (index - (stones.number - 1) / 2) * 1.8 * radius
            centre = (gallbladder[0] + offset * 0.4, gallbladder[1] + 15 - radius, gallbladder[2] - 16 + offset)
            paint(volume, grid, centre, (radius,) * 3, 420.0)  # dependent (posterior), calcified rims
    volume += rng.normal(0.0, noise_hu, size=volume.shape).astype(np.float32)
    return volume


def write_images(config, folder, rng, patient_state, findings, identity, uid_seed):
    root = folder.parent.parent.parent
    base = SPACING[config.size]
    spacing = (base[0] * float(rng.choice([0.8, 1.0])), base[1] * float(rng.uniform(0.9, 1.1)), 0.0)
    spacing = (spacing[0], spacing[1], spacing[1])
    shape = tuple(max(2, round(f / s)) for f, s in zip(FIELD_OF_VIEW, spacing))
    shift = rng.uniform(-6, 6, 3)
    origin = tuple(c - (n - 1) * s / 2 + d for c, n, s, d in zip((0.0, 0.0, 0.0), shape, spacing, shift))
    grid = Grid(shape, spacing, origin)
    hounsfield = np.round(render_abdomen_hu(grid, findings, patient_state, rng))
    origin_lps = (grid.origin[2], grid.origin[1], grid.origin[0])
    write_ct_series(hounsfield, spacing, folder / "dicom", identity, origin=origin_lps, uid_prefix_seed=uid_seed)
    alternates = []
    if config.write_nifti:
        path = write_nifti(hounsfield, canonical_affine(spacing, origin_lps), folder / "image.nii.gz")
        alternates.append(relative(path, root))
    return relative(folder / "dicom", root), alternates


def describe(f: Finding, rng: np.random.Generator) -> str:
    if f.key == "liver_lesion":
        if f.number > 1:
            return pick(
                rng,
                [
                    f"There are {f.number} hypodense liver lesions in the {f.lobe}, "
                    f"the largest measuring {f.size_mm:.0f} mm",
                    f"{f.number} hypoattenuating liver lesions in the {f.lobe}, up to {f.size_mm:.0f} mm",
                ],
            )
        return pick(
            rng,
            [
                f"There is {article(f.size_mm)} {f.size_mm:.0f} mm hypodense liver lesion in the {f.lobe}",
                f"A hypoattenuating liver lesion of {f.size_mm:.0f} mm in the {f.lobe}",
            ],
        )
    if f.key == "hepatic_steatosis":
        return pick(
            rng,
            [
                f"Diffusely decreased attenuation of the liver, consistent with {f.grade} hepatic steatosis",
                f"{f.grade.capitalize()} hepatic steatosis, the liver lower in attenuation than the spleen",
            ],
        )
    if f.key == "renal_cyst":
        return pick(
            rng,
            [
                f"There is {article(f.size_mm)} {f.size_mm:.0f} mm simple cortical cyst in the {f.side} kidney",
                f"{article(f.size_mm).capitalize()} {f.size_mm:.0f} mm fluid attenuation renal cyst arises from the "
                f"{f.side} kidney",
            ],
        )
    if f.key == "renal_stone":
        if f.number > 1:
            return f"{f.number} non-obstructing renal calculi in the {f.side} kidney, the largest {f.size_mm:.0f} mm"
        return pick(
            rng,
            [
                f"There is {article(f.size_mm)} {f.size_mm:.0f} mm non-obstructing renal calculus "
                f"in the {f.side} kidney",
                f"{article(f.size_mm).capitalize()} {f.size_mm:.0f} mm renal calculus in the {f.side} kidney",
            ],
        )
    if f.key == "ascites":
        return pick(
            rng,
            [
                f"There is {f.grade} volume ascites",
                f"{f.grade.capitalize()} ascites in the perihepatic space and pelvis",
            ],
        )
    if f.key == "splenomegaly":
        length = {"mild": 14, "moderate": 16, "severe": 19}[f.grade]
        return pick(
            rng,
            [
                f"{f.grade.capitalize()} splenomegaly, the spleen measuring {length} cm",
                f"The spleen is enlarged, measuring {length} cm, in keeping with {f.grade} splenomegaly",
            ],
        )
    if f.key == "gallstones":
        if f.number > 1:
            return f"There are {f.number} calcified gallstones, the largest {f.size_mm:.0f} mm"
        return pick(
            rng,
            [
                f"There is {article(f.size_mm)} {f.size_mm:.0f} mm calcified gallstone",
                f"Cholelithiasis with a single {f.size_mm:.0f} mm gallstone",
            ],
        )
    raise ValueError(f.key)


STYLE = ReportStyle(
    describe=describe,
    negations={
        "liver_lesion": ["No focal liver lesion", "There is no focal liver lesion"],
        "hepatic_steatosis": ["No hepatic steatosis", "The liver is normal in attenuation without steatosis"],
        "renal_cyst": ["No renal cysts", "There is no renal cyst"],
        "renal_stone": ["No renal calculi", "There is no nephrolithiasis"],
        "ascites": ["No ascites", "There is no ascites"],
        "splenomegaly": ["The spleen is normal in size", "No splenomegaly"],
        "gallstones": ["No gallstones", "There are no calcified gallstones"],
    },
    new_negations={"liver_lesion": "No new liver lesion", "renal_stone": "No new renal calculi"},
    nouns={
        "liver_lesion": "liver lesion",
        "hepatic_steatosis": "hepatic steatosis",
        "renal_cyst": "renal cyst",
        "renal_stone": "renal calculus",
        "ascites": "ascites",
        "splenomegaly": "splenomegaly",
        "gallstones": "gallstones",
    },
    sections={
        "liver_lesion": "Liver",
        "hepatic_steatosis": "Liver",
        "gallstones": "Gallbladder and bile ducts",
        "renal_cyst": "Kidneys",
        "renal_stone": "Kidneys",
        "ascites": "Peritoneum",
    },
    fillers=[
        "Gallbladder and bile ducts|No biliary dilatation",
        "Pancreas|The pancreas is unremarkable",
        "Adrenal glands|The adrenal glands are normal",
        "Kidneys|No hydronephrosis",
        "Bowel|No bowel obstruction",
        "Vessels|The abdominal aorta is normal in calibre",
        "Bones|Degenerative changes of the lumbar spine",
    ],
    header=ReportHeader(
        "CT ABDOMEN AND PELVIS WITHOUT CONTRAST",
        "___ with abdominal pain.",
        "Axial images from the diaphragm to the pubic symphysis without intravenous contrast.",
        "CT abdomen and pelvis",
    ),
    normal_impression="No acute abnormality in the abdomen or pelvis.",
)

FAMILY = register(
    Family(
        modality="abdominal_ct",
        code="ABD",
        series_description="CT ABDOMEN PELVIS",
        types=TYPES,
        severity_keys=SEVERITY,
        patient=patient,
        sample=sample,
        write_images=write_images,
        style=STYLE,
    )
)

__all__ = ["FAMILY", "render_abdomen_hu"]
