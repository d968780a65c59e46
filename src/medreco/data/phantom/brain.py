"""Brain MRI of the synthetic cohort: a head model (scalp, skull, CSF, cortex, white matter,
ventricles, falx) imaged as axial T1, T2 and FLAIR magnitude series, with infarcts,
haemorrhages, masses with oedema, white-matter hyperintensities, atrophy and midline shift.

Contrasts follow each sequence: CSF dark on T1 and FLAIR, bright on T2; white matter brighter
than grey on T1, darker on T2; an infarct or oedema dark on T1, bright on T2 and FLAIR; a
subacute haematoma bright on T1 with a dark haemosiderin rim on T2. Noise is Rician, as in
magnitude images. The manifest's image is the FLAIR series; T1, T2 and a FLAIR NIfTI are alternates."""

from __future__ import annotations

import numpy as np

from .dicom import canonical_affine, write_mr_series, write_nifti
from .families import Family, ReportHeader, ReportStyle, anchored_rng, article, pick, register, relative
from .findings import GRADES, Finding, FindingType
from .render import Grid

BRAIN = "Brain Parenchyma (including Cerebrum and Cerebellum)"
TYPES = [
    FindingType("infarct", "infarct", "cerebral infarction", BRAIN, ("brain_mri",), 0.35),
    FindingType(
        "haemorrhage", "haemorrhage", "brain parenchymal hemorrhage and contusion", BRAIN, ("brain_mri",), 0.25
    ),
    FindingType("brain_mass", "mass", "brain parenchymal soft tissue density lesions", BRAIN, ("brain_mri",), 0.25),
    FindingType(
        "white_matter_lesions",
        "white matter hyperintensities",
        "cerebral ischemic lesions",
        BRAIN,
        ("brain_mri",),
        0.4,
    ),
    FindingType("atrophy", "atrophy", "Cerebral atrophy (parenchymal volume loss)", BRAIN, ("brain_mri",), 0.35),
    FindingType("midline_shift", "midline shift", "Midline shift", BRAIN, ("brain_mri",), 0.2),
]
SEVERITY = ("white_matter_lesions", "atrophy")
LOBES = ("frontal", "parietal", "temporal", "occipital")
LOBE_CENTRES = {
    "frontal": (38, -48, 35),
    "parietal": (42, 28, 50),
    "temporal": (52, -8, -10),
    "occipital": (28, 68, 20),
}
# mm along (D, H, W) before jitter; the field of view is 150 x 240 x 240 mm (the brain_mri recipe's)
FIELD_OF_VIEW = (150.0, 240.0, 240.0)
SPACING = {"tiny": (15.0, 6.0, 6.0), "small": (5.0, 1.875, 1.875), "paper": (5.0, 0.9375, 0.9375)}

# signal per tissue and sequence (arbitrary scanner units)
SIGNAL = {
    #        background scalp  bone  CSF    GM    WM   infarct blood  rim   mass  oedema  WMH
    "T1": (0.0, 950.0, 60.0, 180.0, 560.0, 760.0, 330.0, 930.0, 700.0, 480.0, 520.0, 640.0),
    "T2": (0.0, 650.0, 50.0, 1150.0, 700.0, 480.0, 1000.0, 820.0, 140.0, 820.0, 930.0, 900.0),
    "FLAIR": (0.0, 600.0, 50.0, 120.0, 640.0, 470.0, 900.0, 850.0, 260.0, 860.0, 930.0, 920.0),
}
BACKGROUND, SCALP, BONE, CSF, GM, WM, INFARCT, BLOOD, RIM, MASS, OEDEMA, WMH = range(12)


def sample(key: str, rng: np.random.Generator, present: bool) -> Finding:
    finding = Finding(key, present=present, anchor=[float(v) for v in rng.uniform(-1, 1, size=3)])
    side = str(rng.choice(["right", "left"]))
    if key in ("infarct", "haemorrhage", "brain_mass"):
        finding.side = side
        finding.lobe = f"{side} {rng.choice(LOBES)} lobe"
        low, high = {"infarct": (12, 30), "haemorrhage": (12, 30), "brain_mass": (14, 32)}[key]
        finding.size_mm = float(rng.integers(low, high))
    elif key == "midline_shift":
        finding.side = side
        finding.size_mm = float(rng.integers(6, 15))
    else:
        finding.grade = str(rng.choice(GRADES))
    return finding


def _labels(grid: Grid, findings: list[Finding], patient: dict) -> np.ndarray:
    """The tissue label of every voxel."""
    present = {f.key: f for f in findings if f.present}
    scale = patient["head_scale"]
    z = grid.z[:, None, None]
    y = grid.y[None, :, None]
    x = grid.x[None, None, :]
    atrophy = {"mild": 1, "moderate": 2, "severe": 3}.get(getattr(present.get("atrophy"), "grade", None), 0)
    shift = present.get("midline_shift")
    if shift is not None:
        # the midline structures move away from the side that pushes: "shift to the left" moves them left (+x)
        direction = 1.0 if shift.side == "left" else -1.0
        xm = x - direction * shift.size_mm * np.exp(-((x / 45.0) ** 2)) * np.exp(-(((z - 20.0) / 50.0) ** 2))
    else:
        xm = x + 0.0 * z

    def radius(cx, cy, cz, rx, ry, rz, xs=x):
        return ((xs - cx) / rx) ** 2 + ((y - cy) / ry) ** 2 + ((z - cz) / rz) ** 2

    head = radius(0, 0, 10, 80 * scale, 100 * scale, 88 * scale)
    labels = np.full(grid.shape, BACKGROUND, dtype=np.uint8)
    labels[head <= 1] = SCALP
    labels[radius(0, 0, 10, 74 * scale, 94 * scale, 82 * scale) <= 1] = BONE
    labels[radius(0, 0, 10, 69 * scale, 89 * scale, 77 * scale) <= 1] = CSF
    shrink = 1.0 - 0.035 * atrophy
    brain = radius(0, 2, 8, 66 * scale * shrink, 86 * scale * shrink, 74 * scale * shrink)
    labels[brain <= 1] = GM
    # cortical sulci: CSF clefts in the cortex, wider with atrophy
    angle = np.arctan2(y, xm) * 9.0 + z / 9.0
    sulci = (brain > 0.72) & (brain <= 1) & (np.cos(angle) > 0.93 - 0.09 * atrophy)
    labels[sulci] = CSF
    labels[brain <= 0.62] = WM
    # interhemispheric fissure and falx
    labels[(np.abs(xm) < 1.5 + 1.0 * atrophy) & (brain <= 1) & (z > -20)] = CSF
    ventricles = 1.0 + 0.3 * atrophy
    for side in (-1, 1):
        body = radius(side * 11 * ventricles, -2, 22, 6.5 * ventricles, 30, 11 * ventricles, xm)
        labels[body <= 1] = CSF
    labels[(np.abs(xm) < 2.0 + atrophy * 0.7) & (np.abs(y + 2) < 14) & (np.abs(z - 5) < 10)] = CSF  # third ventricle
    for key, core in (("infarct", INFARCT), ("haemorrhage", BLOOD), ("brain_mass", MASS)):
        if (finding := present.get(key)) is None:
            continue
        lobe = finding.lobe.split()[1]
        cx, cy, cz = LOBE_CENTRES[lobe]
        cx = cx * (1 if finding.side == "left" else -1) * scale + 6 * finding.anchor[0]
        cy, cz = cy * scale + 6 * finding.anchor[1], cz + 6 * finding.anchor[2]
        r = finding.size_mm / 2
        inside = brain <= 1
        if key == "brain_mass":
            labels[(radius(cx, cy, cz, 1.9 * r, 1.9 * r, 1.9 * r) <= 1) & inside & (labels != CSF)] = OEDEMA
        if key == "haemorrhage":
            labels[(radius(cx, cy, cz, r, r, r) <= 1) & inside] = RIM
            r = max(r - 2.5, 1.0)
        if key == "infarct":  # a wedge reaching the cortex: an ellipsoid elongated toward the surface
            labels[(radius(cx, cy, cz, 1.2 * r, r, r) <= 1) & inside] = core
        else:
            labels[(radius(cx, cy, cz, r, r, r) <= 1) & inside] = core
    if (wmh := present.get("white_matter_lesions")) is not None:
        spots = anchored_rng(wmh, 7)
        count = {"mild": 6, "moderate": 14, "severe": 26}[wmh.grade]
        deep = labels == WM
        for _ in range(count):
            side = spots.choice([-1, 1])
            centre = (side * spots.uniform(14, 34), spots.uniform(-35, 35), spots.uniform(5, 50))
            size = spots.uniform(3.0, 5.5) * (1.4 if wmh.grade == "severe" else 1.0)
            labels[(radius(*centre, size, size, size * 1.4) <= 1) & deep] = WMH
    return labels


def render_sequences(grid: Grid, findings: list[Finding], patient: dict, rng: np.random.Generator) -> dict:
    """T1, T2 and FLAIR magnitude volumes (D, H, W) of one study."""
    labels = _labels(grid, findings, patient)
    bias = 1.0 + 0.08 * (grid.y[None, :, None] / 120.0) + 0.05 * (grid.z[:, None, None] / 75.0)
    volumes = {}
    for sequence, table in SIGNAL.items():
        signal = np.asarray(table, dtype=np.float32)[labels] * bias.astype(np.float32)
        sigma = 18.0
        real = signal + rng.normal(0.0, sigma, size=signal.shape).astype(np.float32)
        imaginary = rng.normal(0.0, sigma, size=signal.shape).astype(np.float32)
        volumes[sequence] = np.hypot(real, imaginary)  # Rician magnitude noise
    return volumes


def patient(rng: np.random.Generator) -> dict:
    return {"head_scale": float(rng.uniform(0.93, 1.06))}


def write_images(config, folder, rng, patient_state, findings, identity, uid_seed):
    root = folder.parent.parent.parent
    base = SPACING[config.size]
    jitter = float(rng.uniform(0.95, 1.05))
    spacing = (base[0], base[1] * jitter, base[2] * jitter)
    shape = tuple(max(2, round(f / s)) for f, s in zip(FIELD_OF_VIEW, spacing))
    shift = rng.uniform(-4, 4, 3)
    origin = tuple(c - (n - 1) * s / 2 + d for c, n, s, d in zip((15.0, 0.0, 0.0), shape, spacing, shift))
    grid = Grid(shape, spacing, origin)
    volumes = {k: np.round(v) for k, v in render_sequences(grid, findings, patient_state, rng).items()}
    origin_lps = (grid.origin[2], grid.origin[1], grid.origin[0])
    series = write_mr_series(volumes, spacing, folder / "dicom", identity, origin=origin_lps, uid_seed=uid_seed)
    alternates = [relative(series["T1"], root), relative(series["T2"], root)]
    if config.write_nifti:
        path = write_nifti(volumes["FLAIR"], canonical_affine(spacing, origin_lps), folder / "flair.nii.gz", np.uint16)
        alternates.append(relative(path, root))
    return relative(series["FLAIR"], root), alternates


def describe(f: Finding, rng: np.random.Generator) -> str:
    size = f"{article(f.size_mm)} {f.size_mm:.0f} mm" if f.size_mm else ""
    if f.key == "infarct":
        return pick(
            rng,
            [
                f"There is {size} infarct in the {f.lobe}, hyperintense on T2 and FLAIR",
                f"{size.capitalize()} area of infarction in the {f.lobe}, T1 hypointense and FLAIR hyperintense",
            ],
        )
    if f.key == "haemorrhage":
        return pick(
            rng,
            [
                f"There is {size} intraparenchymal hemorrhage in the {f.lobe}, "
                "T1 hyperintense with a T2 hypointense rim",
                f"{size.capitalize()} intraparenchymal hematoma in the {f.lobe} with a rim of hemosiderin",
            ],
        )
    if f.key == "brain_mass":
        return pick(
            rng,
            [
                f"There is {size} mass in the {f.lobe} with surrounding vasogenic oedema",
                f"{size.capitalize()} T2 hyperintense mass is seen in the {f.lobe}, with perilesional oedema",
            ],
        )
    if f.key == "white_matter_lesions":
        return pick(
            rng,
            [
                f"{f.grade.capitalize()} periventricular and deep white matter hyperintensities on FLAIR, "
                "in keeping with chronic small vessel disease",
                f"Scattered white matter hyperintensities of {f.grade} extent, consistent with small vessel disease",
            ],
        )
    if f.key == "atrophy":
        return pick(
            rng,
            [
                f"{f.grade.capitalize()} generalised cerebral atrophy with prominent sulci",
                f"There is {f.grade} global volume loss, more than expected for age",
            ],
        )
    if f.key == "midline_shift":
        return pick(
            rng,
            [
                f"There is {f.size_mm:.0f} mm of midline shift to the {f.side}",
                f"Midline shift of {f.size_mm:.0f} mm to the {f.side}",
            ],
        )
    raise ValueError(f.key)


STYLE = ReportStyle(
    describe=describe,
    negations={
        "infarct": ["No acute or chronic infarct", "There is no infarct", "No evidence of infarction"],
        "haemorrhage": ["No intraparenchymal hemorrhage", "There is no intraparenchymal hemorrhage"],
        "brain_mass": ["No intracranial mass", "There is no mass"],
        "white_matter_lesions": [
            "No significant white matter hyperintensities",
            "There are no white matter hyperintensities",
        ],
        "atrophy": ["No cerebral atrophy", "There is no significant volume loss"],
        "midline_shift": ["No midline shift", "There is no midline shift"],
    },
    new_negations={
        "infarct": "No new infarct",
        "haemorrhage": "No new intraparenchymal hemorrhage",
        "brain_mass": "No new mass",
    },
    nouns={
        "infarct": "infarct",
        "haemorrhage": "intraparenchymal hemorrhage",
        "brain_mass": "mass",
        "white_matter_lesions": "white matter hyperintensities",
        "atrophy": "atrophy",
        "midline_shift": "midline shift",
    },
    fillers=[
        "The major intracranial flow voids are preserved",
        "The paranasal sinuses and mastoid air cells are clear",
        "The orbits are unremarkable",
        "The craniocervical junction is normal",
        "No extra-axial collection",
    ],
    header=ReportHeader(
        "MRI BRAIN WITHOUT CONTRAST",
        "___ with headache and confusion.",
        "Axial T1-weighted, T2-weighted and FLAIR images of the brain.",
        "MRI brain",
    ),
    normal_impression="Normal MRI of the brain.",
)

FAMILY = register(
    Family(
        modality="brain_mri",
        code="MR",
        series_description="MRI BRAIN",
        types=TYPES,
        severity_keys=SEVERITY,
        patient=patient,
        sample=sample,
        write_images=write_images,
        style=STYLE,
    )
)

__all__ = ["FAMILY", "SIGNAL", "render_sequences"]
