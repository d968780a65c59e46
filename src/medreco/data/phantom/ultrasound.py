"""Ultrasound of the synthetic cohort: B-mode images with speckle, as consoles store them.

A patient has one kind of examination, repeated at follow-up: a right-upper-quadrant abdominal
scan (curvilinear probe: liver, gallbladder, right kidney; gallstones with acoustic shadowing,
hydronephrosis, steatosis as a bright liver whose far field fades) or a thyroid scan (linear
probe, transverse: both lobes, trachea, carotids; nodules). Images are simulated along the beam
(echogenicity times speckle from a complex Gaussian field blurred by the point-spread function,
shadowing and enhancement along depth, time-gain compensation, log compression) and, for the
curvilinear probe, scan-converted into a sector.

Files: `image.dcm`, a single frame in RGB (some studies in PALETTE COLOR), with burned-in
annotation text, and `cine.dcm`, a short multi-frame loop of the same view (an alternate image)."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

from .dicom import write_ultrasound
from .families import Family, ReportHeader, ReportStyle, anchored_rng, article, pick, register, relative
from .findings import GRADES, Finding, FindingType

TYPES = [
    FindingType(
        "thyroid_nodule", "thyroid nodule", "thyroid soft tissue density lesions", "Thyroid", ("ultrasound",), 0.45
    ),
    FindingType("us_gallstones", "gallstones", "Cholelithiasis (gallstones)", "Gallbladder", ("ultrasound",), 0.35),
    FindingType("hydronephrosis", "hydronephrosis", "Hydronephrosis", "Kidneys", ("ultrasound",), 0.3),
    FindingType(
        "us_steatosis",
        "hepatic steatosis",
        "Decreased hepatic parenchymal density (such as fatty degeneration)",
        "Hepatic parenchyma",
        ("ultrasound",),
        0.35,
    ),
]
SEVERITY = ("hydronephrosis", "us_steatosis")
EXAMS = {"abdomen": ("us_gallstones", "hydronephrosis", "us_steatosis"), "thyroid": ("thyroid_nodule",)}
# image rows of tissue (depth) per size; the probe's depth and width in mm
ROWS = {"tiny": 64, "small": 256, "paper": 512}
PROBES = {
    "abdomen": {"depth": 160.0, "width": 70.0, "transducer": "C5-1"},
    "thyroid": {"depth": 40.0, "width": 45.0, "transducer": "L12-5"},
}


def sample(key: str, rng: np.random.Generator, present: bool) -> Finding:
    finding = Finding(key, present=present, anchor=[float(v) for v in rng.uniform(-1, 1, size=3)])
    if key == "thyroid_nodule":
        finding.side = str(rng.choice(["right", "left"]))
        finding.lobe = f"{finding.side} thyroid lobe"
        finding.size_mm = float(rng.integers(6, 19))
    elif key == "us_gallstones":
        finding.size_mm = float(rng.integers(5, 18))
        finding.number = int(rng.choice([1, 2, 3]))
    else:
        finding.grade = str(rng.choice(GRADES))
    return finding


def patient(rng: np.random.Generator) -> dict:
    return {"exam": str(rng.choice(["abdomen", "abdomen", "thyroid"])), "depth_gain": float(rng.uniform(0.9, 1.1))}


def applies(key: str, patient_state: dict) -> bool:
    return key in EXAMS[patient_state["exam"]]


def _ellipse(z, x, centre, radii):
    return ((z - centre[0]) / radii[0]) ** 2 + ((x - centre[1]) / radii[1]) ** 2


def echogenicity(exam: str, findings: list[Finding], depth_mm, lateral_mm) -> tuple[np.ndarray, np.ndarray]:
    """Backscatter (1 = liver) and the attenuation per mm along the beam, on a (depth, lateral) grid (mm)."""
    present = {f.key: f for f in findings if f.present}
    z, x = np.meshgrid(depth_mm, lateral_mm, indexing="ij")
    echo = np.full((depth_mm.size, lateral_mm.size), 0.45, dtype=np.float32)  # fat and bowel behind the liver
    attenuation = np.full(echo.shape, 0.004, dtype=np.float32)
    if exam == "thyroid":
        echo[:] = 0.5
        echo[z < 3] = 1.6  # skin
        echo[(z >= 3) & (z < 7)] = 0.9  # subcutaneous fat
        echo[(z >= 7) & (z < 11) & (np.abs(x) > 6)] = 0.35  # strap muscles
        for side in (-1, 1):
            lobe = _ellipse(z, x, (18.0, side * 13.0), (8.0, 11.0)) <= 1
            echo[lobe] = 1.3
            echo[_ellipse(z, x, (19.0, side * 27.0), (4.5, 4.5)) <= 1] = 0.001  # carotid
            attenuation[_ellipse(z, x, (19.0, side * 27.0), (4.5, 4.5)) <= 1] = -0.02  # enhancement behind it
        echo[np.abs(x) < 6] = 0.7  # isthmus and trachea
        trachea = (_ellipse(z, x, (20.0, 0.0), (8.0, 7.0)) <= 1) & (z < 15)
        echo[trachea] = 3.0  # the air's bright interface, shadowed below
        attenuation[trachea] = 0.5
        if (nodule := present.get("thyroid_nodule")) is not None:
            side = 1 if nodule.side == "left" else -1
            r = nodule.size_mm / 2
            centre = (18.0 + 2 * nodule.anchor[0], side * (13.0 + 2 * nodule.anchor[1]))
            echo[_ellipse(z, x, centre, (r * 0.85, r)) <= 1] = 0.35  # hypoechoic solid nodule
            echo[np.abs(_ellipse(z, x, centre, (r * 0.85, r)) - 1) < 0.12] = 0.08  # halo
        return echo, attenuation
    steatosis = present.get("us_steatosis")
    liver_echo = {"mild": 1.5, "moderate": 2.1, "severe": 2.8}[steatosis.grade] if steatosis else 1.0
    liver_attenuation = {"mild": 0.009, "moderate": 0.014, "severe": 0.02}[steatosis.grade] if steatosis else 0.005
    echo[z < 4] = 1.6
    echo[(z >= 4) & (z < 14)] = 0.6  # abdominal wall
    liver = (z >= 14) & (_ellipse(z, x, (70.0, -5.0), (58.0, 95.0)) <= 1)
    echo[liver] = liver_echo
    attenuation[liver] = liver_attenuation
    echo[np.abs(_ellipse(z, x, (70.0, -5.0), (58.0, 95.0)) - 1) < 0.04] = 3.0  # liver capsule / diaphragm
    kidney = _ellipse(z, x, (128.0, 12.0), (22.0, 42.0)) <= 1
    echo[kidney] = 0.55  # cortex, less echogenic than liver
    sinus = _ellipse(z, x, (128.0, 12.0), (9.0, 26.0)) <= 1
    echo[sinus] = 2.2
    if (hydro := present.get("hydronephrosis")) is not None:
        scale = {"mild": 0.45, "moderate": 0.7, "severe": 0.95}[hydro.grade]
        pelvis = _ellipse(z, x, (128.0, 10.0), (8.0 * scale + 2, 22.0 * scale + 3)) <= 1
        calyces = np.zeros_like(pelvis)
        for offset in (-18.0, 0.0, 18.0):
            calyces |= _ellipse(z, x, (121.0, 12.0 + offset), (4.0 * scale + 1, 5.0 * scale + 1)) <= 1
        fluid = (pelvis | calyces) & kidney
        echo[fluid] = 0.001
        attenuation[fluid] = -0.015  # posterior acoustic enhancement
    gallbladder = _ellipse(z, x, (55.0, -28.0), (13.0, 30.0)) <= 1
    echo[gallbladder] = 0.001
    attenuation[gallbladder] = -0.02
    if (stones := present.get("us_gallstones")) is not None:
        spots = anchored_rng(stones, 5)
        for index in range(stones.number):
            r = stones.size_mm / 2 * (1.0 if index == 0 else 0.75)
            centre = (66.0 - r, -28.0 + (index - (stones.number - 1) / 2) * 2.2 * r + spots.uniform(-2, 2))
            stone = _ellipse(z, x, centre, (r, r)) <= 1
            echo[stone & (z < centre[0])] = 4.0  # the bright leading surface
            echo[stone & (z >= centre[0])] = 0.3
            attenuation[stone] = 0.6  # a clean acoustic shadow beneath
    return echo, attenuation


def _blur(field: np.ndarray, sigma: tuple[float, float]) -> np.ndarray:
    """Separable Gaussian blur (edges: the nearest value), without SciPy."""
    for axis, s in enumerate(sigma):
        radius = max(1, round(3 * s))
        taps = np.exp(-0.5 * (np.arange(-radius, radius + 1) / s) ** 2)
        taps /= taps.sum()
        padded = np.pad(field, [(radius, radius) if a == axis else (0, 0) for a in range(2)], mode="edge")
        length = field.shape[axis]
        field = sum(
            w * (padded[i : i + length] if axis == 0 else padded[:, i : i + length]) for i, w in enumerate(taps)
        )
    return field


def _bilinear(image: np.ndarray, row: np.ndarray, column: np.ndarray) -> np.ndarray:
    """`image` sampled at fractional (row, column) positions (clamped to the edges)."""
    row = np.clip(row, 0, image.shape[0] - 1)
    column = np.clip(column, 0, image.shape[1] - 1)
    r0 = np.minimum(np.floor(row).astype(int), image.shape[0] - 2)
    c0 = np.minimum(np.floor(column).astype(int), image.shape[1] - 2)
    fr, fc = row - r0, column - c0
    top = image[r0, c0] * (1 - fc) + image[r0, c0 + 1] * fc
    bottom = image[r0 + 1, c0] * (1 - fc) + image[r0 + 1, c0 + 1] * fc
    return top * (1 - fr) + bottom * fr


def b_mode(
    echo: np.ndarray, attenuation: np.ndarray, row_mm: float, rng: np.random.Generator, gain: float, speckle=None
):
    """Envelope-detected, log-compressed B-mode in [0, 1] along the beam grid. `speckle`: the complex
    scatterer field to reuse (cine frames decorrelate from it), else a new one."""
    if speckle is None:
        speckle = rng.normal(size=echo.shape) + 1j * rng.normal(size=echo.shape)
    sigma = (0.6, 1.6)  # the point-spread function: short axially, wider laterally (pixels)
    field = _blur(speckle.real, sigma) + 1j * _blur(speckle.imag, sigma)
    field /= np.sqrt(np.mean(np.abs(field) ** 2))  # unit mean power: tissue of echogenicity 1 sits at 0 dB
    loss = np.exp(-2.0 * np.cumsum(np.clip(attenuation, -0.05, None), axis=0) * row_mm)
    depth = np.arange(echo.shape[0])[:, None] * row_mm
    compensation = np.exp(2.0 * 0.004 * depth)  # time-gain compensation for normal tissue
    envelope = np.abs(field) * np.sqrt(np.maximum(echo, 1e-4)) * np.sqrt(np.clip(loss * compensation, 1e-6, 4.0))
    decibels = 20.0 * np.log10(envelope * gain + 1e-6)
    image = (decibels + 35.0) / 55.0  # 55 dB dynamic range: fluid near black, liver mid-grey
    return np.clip(image, 0.0, 1.0).astype(np.float32), speckle


def scan_convert(beam: np.ndarray, depth_mm: float, pixel_mm: float, fan_degrees: float = 70.0, apex_mm: float = 30.0):
    """A curvilinear probe's sector: the beam grid (depth, angle) resampled on a Cartesian image."""
    radius_max = apex_mm + depth_mm
    half = np.deg2rad(fan_degrees / 2)
    width = 2 * radius_max * np.sin(half)
    height = radius_max - apex_mm * np.cos(half)
    rows, columns = round(height / pixel_mm), round(width / pixel_mm)
    y = apex_mm * np.cos(half) + np.arange(rows)[:, None] * pixel_mm
    x = (np.arange(columns)[None, :] - (columns - 1) / 2) * pixel_mm
    radius, angle = np.hypot(x, y), np.arctan2(x, y)
    row = (radius - apex_mm) / depth_mm * (beam.shape[0] - 1)
    column = (angle + half) / (2 * half) * (beam.shape[1] - 1)
    inside = (radius >= apex_mm) & (radius <= radius_max) & (np.abs(angle) <= half)
    image = _bilinear(beam, row, column)
    return np.where(inside, image, 0.0).astype(np.float32)


def render_frames(
    exam: str, findings: list[Finding], rows: int, rng: np.random.Generator, gain: float, frames: int = 1
):
    """The B-mode frames (N, H, W) of one view, in [0, 1], and the pixel size (mm)."""
    probe = PROBES[exam]
    row_mm = probe["depth"] / rows
    if exam == "thyroid":
        columns = round(probe["width"] / row_mm)
        depth = (np.arange(rows) + 0.5) * row_mm
        lateral = (np.arange(columns) - (columns - 1) / 2) * row_mm
    else:  # beam coordinates: depth along each scan line, lateral mm at mid-depth
        columns = rows
        depth = (np.arange(rows) + 0.5) * row_mm
        lateral = (np.arange(columns) - (columns - 1) / 2) * (2 * probe["width"] / columns)
    echo, attenuation = echogenicity(exam, findings, depth, lateral)
    images, speckle = [], None
    for index in range(frames):
        if speckle is not None:  # the probe moves slightly: the speckle partly decorrelates
            fresh = rng.normal(size=echo.shape) + 1j * rng.normal(size=echo.shape)
            speckle = 0.85 * np.roll(speckle, 1, axis=1) + 0.53 * fresh
        beam, speckle = b_mode(echo, attenuation, row_mm, rng, gain, speckle)
        images.append(beam if exam == "thyroid" else scan_convert(beam, probe["depth"], row_mm))
        del index
    return np.stack(images), row_mm


def _annotate(grey: np.ndarray, lines: list[str]) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """The image on a black console screen, with a header bar of burned-in text (yellow) and a
    depth scale (green); returns the RGB screen and the tissue region's pixel box."""
    top = max(12, grey.shape[0] // 10)
    margin = max(4, grey.shape[1] // 20)
    height, width = grey.shape[0] + top + 4, grey.shape[1] + 2 * margin
    screen = np.zeros((height, width, 3), dtype=np.uint8)
    screen[top : top + grey.shape[0], margin : margin + grey.shape[1]] = np.round(grey * 255).astype(np.uint8)[
        ..., None
    ]
    canvas = Image.fromarray(screen)
    draw = ImageDraw.Draw(canvas)
    for index, line in enumerate(lines[:2]):
        draw.text((2, 1 + index * max(5, top // 2 - 1)), line, fill=(255, 220, 0))
    for tick in range(0, grey.shape[0], max(1, grey.shape[0] // 8)):
        draw.line([(width - margin // 2 - 2, top + tick), (width - margin // 2, top + tick)], fill=(0, 200, 0))
    region = (margin, top, margin + grey.shape[1] - 1, top + grey.shape[0] - 1)
    return np.asarray(canvas), region


def write_images(config, folder, rng, patient_state, findings, identity, uid_seed):
    root = folder.parent.parent.parent
    exam = patient_state["exam"]
    rows = ROWS[config.size]
    gain = patient_state["depth_gain"] * float(rng.uniform(0.92, 1.08))
    cine_frames = 4 if config.size == "tiny" else 8
    frames, pixel_mm = render_frames(exam, findings, rows, rng, gain, cine_frames)
    label = "RUQ LIVER/GB/RK" if exam == "abdomen" else "THYROID TRV"
    text = [
        f"{identity.patient_name.replace('^', ' ')}  {identity.study_date}",
        f"{label}  {PROBES[exam]['transducer']}",
    ]
    screens = [_annotate(frame, text) for frame in frames]
    region = screens[0][1]
    photometric = "PALETTE COLOR" if rng.random() < 0.2 else "RGB"
    single = screens[len(screens) // 2][0]
    path = write_ultrasound(
        single if photometric == "RGB" else frames[len(frames) // 2],
        pixel_mm,
        folder / "image.dcm",
        identity,
        photometric=photometric,
        region=region if photometric == "RGB" else None,
        transducer=PROBES[exam]["transducer"],
        uid_seed=f"{uid_seed}:{identity.series_uid}:image",
    )
    cine = write_ultrasound(
        np.stack([s for s, _ in screens]),
        pixel_mm,
        folder / "cine.dcm",
        identity,
        region=region,
        transducer=PROBES[exam]["transducer"],
        uid_seed=f"{uid_seed}:{identity.series_uid}:cine",
    )
    return relative(path, root), [relative(cine, root)]


def describe(f: Finding, rng: np.random.Generator) -> str:
    if f.key == "thyroid_nodule":
        return pick(
            rng,
            [
                f"There is {article(f.size_mm)} {f.size_mm:.0f} mm solid hypoechoic nodule in the {f.lobe} "
                "with a thin halo",
                f"{article(f.size_mm).capitalize()} {f.size_mm:.0f} mm hypoechoic thyroid nodule in the {f.lobe}",
            ],
        )
    if f.key == "us_gallstones":
        stones = "a mobile gallstone" if f.number == 1 else f"{f.number} mobile gallstones"
        return pick(
            rng,
            [
                f"There is {stones} measuring up to {f.size_mm:.0f} mm with posterior acoustic shadowing",
                f"Cholelithiasis with {stones}, the largest {f.size_mm:.0f} mm, casting acoustic shadows",
            ],
        )
    if f.key == "hydronephrosis":
        return pick(
            rng,
            [f"{f.grade.capitalize()} right hydronephrosis", f"There is {f.grade} hydronephrosis of the right kidney"],
        )
    if f.key == "us_steatosis":
        return pick(
            rng,
            [
                "The liver is diffusely hyperechoic with posterior attenuation, "
                f"consistent with {f.grade} hepatic steatosis",
                f"{f.grade.capitalize()} fatty infiltration of the liver, with increased echogenicity",
            ],
        )
    raise ValueError(f.key)


STYLE = ReportStyle(
    describe=describe,
    negations={
        "thyroid_nodule": ["No thyroid nodule", "There is no discrete thyroid nodule"],
        "us_gallstones": ["No gallstones", "There are no gallstones"],
        "hydronephrosis": ["No hydronephrosis", "There is no hydronephrosis"],
        "us_steatosis": ["No hepatic steatosis", "Normal liver echogenicity without hepatic steatosis"],
    },
    new_negations={"thyroid_nodule": "No new thyroid nodule", "us_gallstones": "No new gallstones"},
    nouns={
        "thyroid_nodule": "thyroid nodule",
        "us_gallstones": "gallstones",
        "hydronephrosis": "hydronephrosis",
        "us_steatosis": "hepatic steatosis",
    },
    fillers=[
        "The common bile duct measures 4 mm",
        "The visualised pancreas is unremarkable",
        "No free fluid",
        "Normal vascularity on colour Doppler",
    ],
    header=ReportHeader("ULTRASOUND", "___ follow-up.", "Grey-scale images were obtained.", "Ultrasound"),
    normal_impression="Normal ultrasound examination.",
)

FAMILY = register(
    Family(
        modality="ultrasound",
        code="US",
        series_description="US",
        types=TYPES,
        severity_keys=SEVERITY,
        patient=patient,
        sample=sample,
        write_images=write_images,
        style=STYLE,
        applies=applies,
    )
)

__all__ = ["FAMILY", "b_mode", "echogenicity", "render_frames", "scan_convert"]
