"""Images with their geometry, and the one canonical orientation every reader produces.

Volumes are arrays `(D, H, W)` whose axes increase toward the patient's Superior, Posterior and
Left ("SPL"): D runs from feet to head, and each axial slice is shown as radiologists view it
(anterior at the top, the patient's left on the image's right). This is how most DICOM axial
series are stored, so DICOM needs no flips in the common case. Affines map voxel indices
`(d, h, w)` to RAS+ world millimetres (nibabel's convention)."""

from __future__ import annotations

from dataclasses import dataclass, field

import nibabel as nib
import numpy as np

CANONICAL_AXES = ("S", "P", "L")
# nibabel works on (i, j, k) arrays; (i, j, k) = (L, P, S) is our (W, H, D).
_CANONICAL_IJK = ("L", "P", "S")


@dataclass(frozen=True)
class ImageGeometry:
    """spacing: millimetres along (D, H, W). affine: 4x4 voxel (d, h, w) -> RAS+ mm, or None when the
    file carries no patient coordinates (radiographs, ultrasound, PNG). spacing_known: False when
    the file states no pixel spacing (1 mm is assumed)."""

    spacing: tuple[float, float, float]
    affine: np.ndarray | None = None
    spacing_known: bool = True

    @property
    def axes(self) -> tuple[str, str, str] | None:
        return CANONICAL_AXES if self.affine is not None else None

    def physical_extent(self, shape: tuple[int, int, int]) -> tuple[float, float, float]:
        return tuple(float(n * s) for n, s in zip(shape, self.spacing))


@dataclass
class MedicalImage:
    """A loaded image: float32 `array` (D, H, W), its geometry and non-identifying metadata.

    modality: the file's DICOM modality code (CT, MR, CR, DX, US, ...) or "" when unknown.
    warnings: things a user should know (assumed spacing, colour converted, frames without positions);
      the readers also log each one at WARNING level on the `medreco.processing.readers` logger.
    display_window: the file's own intensity window (DICOM VOI window, or the PNG bit range), if any, in
      the values of `array` (for MONOCHROME1, inverted together with the pixel values)."""

    array: np.ndarray
    geometry: ImageGeometry
    modality: str = ""
    source: str = ""
    photometric: str = "MONOCHROME2"
    warnings: list[str] = field(default_factory=list)
    display_window: tuple[float, float] | None = None

    @property
    def shape(self) -> tuple[int, int, int]:
        return tuple(self.array.shape)

    @property
    def is_volume(self) -> bool:
        return self.array.shape[0] > 1

    def describe(self) -> dict:
        """JSON-ready summary (what `medreco inspect` prints)."""
        affine = self.geometry.affine
        return {
            "source": self.source,
            "modality": self.modality,
            "shape": list(self.shape),
            "spacing_mm": [round(s, 4) for s in self.geometry.spacing],
            "spacing_known": self.geometry.spacing_known,
            "axes": list(self.geometry.axes) if self.geometry.axes else None,
            "affine": None if affine is None else np.round(affine, 4).tolist(),
            "photometric": self.photometric,
            "intensity_range": [float(self.array.min()), float(self.array.max())],
            "warnings": list(self.warnings),
        }


def to_canonical(array_ijk: np.ndarray, affine_ras: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Reorient an (i, j, k) array with a voxel->RAS affine to the canonical (D, H, W) = (S, P, L)
    layout. Returns the array and the affine of the new (d, h, w) indices. Axes are flipped and
    permuted to the closest canonical directions (oblique acquisitions keep their obliquity in
    the affine)."""
    current = nib.orientations.io_orientation(affine_ras)
    transform = nib.orientations.ornt_transform(current, nib.orientations.axcodes2ornt(_CANONICAL_IJK))
    reoriented = nib.orientations.apply_orientation(array_ijk, transform)
    affine = affine_ras @ nib.orientations.inv_ornt_aff(transform, array_ijk.shape)
    # (i, j, k) -> (k, j, i) = (D, H, W)
    volume = np.ascontiguousarray(reoriented.transpose(2, 1, 0))
    affine_dhw = affine[:, [2, 1, 0, 3]]
    return volume, affine_dhw


def spacing_from_affine(affine: np.ndarray) -> tuple[float, float, float]:
    return tuple(float(v) for v in np.linalg.norm(affine[:3, :3], axis=0))


LPS_TO_RAS = np.diag([-1.0, -1.0, 1.0, 1.0])


__all__ = ["CANONICAL_AXES", "ImageGeometry", "LPS_TO_RAS", "MedicalImage", "spacing_from_affine", "to_canonical"]
