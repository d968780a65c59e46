"""Rendering synthetic thoraxes: one anatomical model in millimetres, two ways of imaging it.

CT: the model is voxelised in Hounsfield units on any grid (spacing-aware, canonical orientation:
D toward superior, H toward posterior, W toward the patient's left). Chest X-ray: the same model
voxelised coarsely and integrated along the antero-posterior axis, like a real projection, then
shown with the patient's right on the image's left (PA convention)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .findings import Finding

# Lobe centres (x: right- to left+, y: anterior- to posterior+, z: up), millimetres.
LOBE_CENTRES = {
    "right upper lobe": (-72.0, 0.0, 245.0),
    "right middle lobe": (-80.0, -40.0, 178.0),
    "right lower lobe": (-75.0, 35.0, 135.0),
    "left upper lobe": (72.0, -5.0, 232.0),
    "left lower lobe": (75.0, 35.0, 135.0),
}
AIR, SOFT_TISSUE, LUNG, FLUID, BONE = -1000.0, 40.0, -850.0, 12.0, 700.0


@dataclass
class Anatomy:
    """Patient-specific proportions (fixed across the patient's studies)."""

    body_scale: float = 1.0
    lung_scale: float = 1.0
    heart_shift: float = 0.0

    @classmethod
    def sample(cls, rng: np.random.Generator) -> Anatomy:
        return cls(float(rng.uniform(0.92, 1.08)), float(rng.uniform(0.93, 1.07)), float(rng.uniform(-6, 6)))


class Grid:
    """Voxel centre coordinates (mm) of a (D, H, W) grid: z (up), y (posterior), x (patient left)."""

    def __init__(
        self, shape: tuple[int, int, int], spacing: tuple[float, float, float], origin: tuple[float, float, float]
    ):
        self.shape, self.spacing, self.origin = shape, spacing, origin
        self.z = origin[0] + np.arange(shape[0]) * spacing[0]
        self.y = origin[1] + np.arange(shape[1]) * spacing[1]
        self.x = origin[2] + np.arange(shape[2]) * spacing[2]

    def box(self, centre, radii) -> tuple[slice, slice, slice] | None:
        """Index slices of the voxels that can lie inside an ellipsoid (None if none can)."""
        slices = []
        for axis, c, r in zip((self.z, self.y, self.x), centre[::-1], radii[::-1]):
            lo, hi = np.searchsorted(axis, c - r), np.searchsorted(axis, c + r, side="right")
            if hi <= lo:
                return None
            slices.append(slice(int(lo), int(hi)))
        return tuple(slices)

    def local(self, box, centre, radii) -> np.ndarray:
        """Normalised squared radius ((x-cx)/rx)^2 + ... on the voxels of `box`."""
        z = ((self.z[box[0]] - centre[2]) / radii[2])[:, None, None]
        y = ((self.y[box[1]] - centre[1]) / radii[1])[None, :, None]
        x = ((self.x[box[2]] - centre[0]) / radii[0])[None, None, :]
        return z**2 + y**2 + x**2


def paint(
    volume: np.ndarray, grid: Grid, centre, radii, value: float, within: np.ndarray | None = None
) -> np.ndarray | None:
    """Set an ellipsoid (x, y, z order) to `value`, optionally only where `within` holds; returns its mask."""
    box = grid.box(centre, radii)
    if box is None:
        return None
    mask = grid.local(box, centre, radii) <= 1.0
    if within is not None:
        mask &= within[box]
    volume[box][mask] = value
    full = np.zeros(volume.shape, dtype=bool)
    full[box] = mask
    return full


def render_thorax_hu(
    grid: Grid, anatomy: Anatomy, findings: list[Finding], rng: np.random.Generator, noise_hu: float = 12.0
) -> np.ndarray:
    """Voxelise one study: normal anatomy, then each present finding, then acquisition noise."""
    s, ls = anatomy.body_scale, anatomy.lung_scale
    present = {f.key: f for f in findings if f.present}
    volume = np.full(grid.shape, AIR, dtype=np.float32)
    paint(volume, grid, (0, 0, 160), (165 * s, 118 * s, 400), SOFT_TISSUE)
    paint(volume, grid, (0, 85 * s, 160), (18, 18, 400), BONE)  # spine
    liver = present.get("fatty_liver")
    liver_hu = {"mild": 35.0, "moderate": 5.0, "severe": -25.0}[liver.grade] if liver else 60.0
    paint(volume, grid, (-55 * s, 5, 45), (95 * s, 85 * s, 62), liver_hu)
    paint(volume, grid, (0, -10, 205), (30, 28, 55), -90.0)  # mediastinal fat
    lungs = np.zeros(grid.shape, dtype=bool)
    for side in (-1, 1):
        mask = paint(volume, grid, (side * 74 * s, 5, 190), (54 * s * ls, 76 * s, 105 * ls), LUNG)
        if mask is not None:
            lungs |= mask
    if (emphysema := present.get("emphysema")) is not None:
        # upper-zone predominant low attenuation, darker with severity, plus scattered bullae
        upper = lungs & (grid.z[:, None, None] > 175.0)
        volume[upper] = {"mild": -905.0, "moderate": -945.0, "severe": -975.0}[emphysema.grade]
        count = {"mild": 6, "moderate": 14, "severe": 28}[emphysema.grade]
        for _ in range(count):
            side = rng.choice([-1, 1])
            centre = (side * rng.uniform(45, 95) * s, rng.uniform(-40, 40), rng.uniform(190, 270))
            paint(volume, grid, centre, (rng.uniform(6, 12),) * 3, -995.0, within=lungs)
    paint(volume, grid, (22, 28, 190), (13, 13, 70), 45.0)  # descending aorta
    heart_scale = {"mild": 1.18, "moderate": 1.32, "severe": 1.48}.get(
        getattr(present.get("cardiomegaly"), "grade", None), 1.0
    )
    heart_centre = (18 + anatomy.heart_shift, -35, 128)
    heart_radii = (52 * heart_scale * s, 48 * s, 44 * heart_scale)
    if (pericardial := present.get("pericardial_effusion")) is not None:
        rim = {"small": 4.0, "moderate": 9.0, "large": 15.0}[pericardial.grade]
        paint(volume, grid, heart_centre, tuple(r + rim for r in heart_radii), FLUID)
    paint(volume, grid, heart_centre, heart_radii, SOFT_TISSUE)
    if (nodes := present.get("lymphadenopathy")) is not None:
        for index in range(nodes.number):
            centre = (-14 + 14 * index + 4 * nodes.anchor[0], -15 + 6 * nodes.anchor[1], 215 - 22 * index)
            paint(volume, grid, centre, (nodes.size_mm / 2,) * 3, 45.0)
    for key in ("consolidation", "atelectasis"):
        if (finding := present.get(key)) is not None:
            centre = _lobe_point(finding, s, 10)
            extent = {"small": 0.6, "moderate": 0.85, "large": 1.1}[finding.grade]
            # atelectasis: a dense collapsed wedge, flatter than consolidation
            radii = (
                (28 * extent, 28 * extent, 32 * extent) if key == "consolidation" else (36 * extent, 16, 28 * extent)
            )
            paint(volume, grid, centre, radii, 25.0 if key == "consolidation" else 35.0, within=lungs)
    if (effusion := present.get("pleural_effusion")) is not None:
        height = {"small": 22.0, "moderate": 45.0, "large": 75.0}[effusion.grade]
        sides = (-1, 1) if effusion.side == "bilateral" else (-1 if effusion.side == "right" else 1,)
        z = grid.z[:, None, None]
        y = grid.y[None, :, None]
        x = grid.x[None, None, :]
        # fluid gathers low and posterior: below a plane that tilts toward the back
        level = (190 - 105 * ls) + height + 0.35 * (y - 5)
        for side in sides:
            fluid = lungs & (z < level) & (np.sign(x) == side)
            volume[fluid] = FLUID
    if (nodule := present.get("lung_nodule")) is not None:
        _paint_nodules(volume, grid, nodule, s)
    volume += rng.normal(0.0, noise_hu, size=volume.shape).astype(np.float32)
    return volume


def _lobe_point(finding: Finding, scale: float, jitter: float) -> tuple[float, float, float]:
    centre = LOBE_CENTRES[finding.lobe]
    return tuple(c * (scale if i == 0 else 1.0) + jitter * a for i, (c, a) in enumerate(zip(centre, finding.anchor)))


def _paint_nodules(volume: np.ndarray, grid: Grid, nodule: Finding, scale: float) -> None:
    radius = nodule.size_mm / 2
    core_hu = {"solid": 30.0, "part-solid": -350.0, "ground-glass": -550.0}[nodule.density]
    for index in range(nodule.number):
        offset = np.array([9.0 * index * (1 if index % 2 else -1), 0.0, -14.0 * index])
        centre = tuple(np.array(_lobe_point(nodule, scale, 12)) + offset)
        if nodule.margins == "lobulated":
            for dx, dz in ((-0.45, 0.3), (0.45, 0.3), (0.0, -0.45)):
                lobe_centre = (centre[0] + dx * radius, centre[1], centre[2] + dz * radius)
                paint(volume, grid, lobe_centre, (radius * 0.7,) * 3, core_hu)
        else:
            paint(volume, grid, centre, (radius,) * 3, core_hu)
        if nodule.density == "part-solid":
            paint(volume, grid, centre, (radius * 0.5,) * 3, 30.0)
        if nodule.margins == "spiculated":
            for dx, dy, dz in ((1, 0, 0), (-1, 0, 0), (0, 0, 1), (0, 0, -1), (0.7, 0, 0.7), (-0.7, 0, -0.7)):
                spike = (centre[0] + dx * radius, centre[1] + dy * radius, centre[2] + dz * radius)
                paint(
                    volume,
                    grid,
                    spike,
                    (max(1.5, radius * (0.9 if dx else 0.15)), 1.5, max(1.5, radius * (0.9 if dz else 0.15))),
                    core_hu,
                )


# ---------------------------------------------------------------------------------- imaging


CT_FIELD_OF_VIEW = (280.0, 300.0, 360.0)  # mm along (z, y, x)
CT_ORIGIN_CENTRE = (170.0, 0.0, 0.0)


def ct_grid(spacing: tuple[float, float, float], shift: tuple[float, float, float] = (0, 0, 0)) -> Grid:
    """The study's voxel grid: the field of view at `spacing`, centred on the chest (plus a positioning shift)."""
    shape = tuple(max(2, round(f / s)) for f, s in zip(CT_FIELD_OF_VIEW, spacing))
    origin = tuple(c - (n - 1) * sp / 2 + d for c, n, sp, d in zip(CT_ORIGIN_CENTRE, shape, spacing, shift))
    return Grid(shape, spacing, origin)


def render_radiograph(
    anatomy: Anatomy, findings: list[Finding], pixel_spacing: float, rng: np.random.Generator, shift=(0.0, 0.0)
) -> np.ndarray:
    """A PA chest radiograph in [0, 1]: attenuation integrated through the thorax; bone and fluid bright."""
    field = 380.0
    size = max(8, round(field / pixel_spacing))
    depth_samples = 40
    spacing = (field / size, 300.0 / depth_samples, field / size)
    origin = (175.0 + field / 2 - (size - 1) * spacing[0] + shift[0], -150.0, -field / 2 + shift[1])
    grid = Grid((size, depth_samples, size), spacing, origin)
    hu = render_thorax_hu(grid, anatomy, findings, rng, noise_hu=0.0)
    attenuation = np.clip((hu + 1000.0) / 1000.0, 0.0, None).sum(axis=1) * spacing[1]  # (z, x), mm of water
    image = 1.0 - np.exp(-attenuation / 180.0)
    image = image[::-1]  # head at the top
    image = image + rng.normal(0.0, 0.01, size=image.shape)
    return np.clip(image, 0.0, 1.0).astype(np.float32)


__all__ = ["Anatomy", "Grid", "LOBE_CENTRES", "ct_grid", "paint", "render_radiograph", "render_thorax_hu"]
