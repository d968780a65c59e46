"""One DICOM file -> `MedicalImage`: a single image, or a multi-frame object (enhanced CT/MR, RT dose
grid, ultrasound cine loop), placed in patient space from its orientation, positions and pixel
spacing. The geometry here (spacing, orientation, sorting frames into a volume) also serves
`dicom_series`. No identifying DICOM value is copied into the result or into an error message."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pydicom

from ...errors import DuplicateSliceError, InconsistentGeometryError, MissingSliceError, UnsupportedImageError
from ..geometry import LPS_TO_RAS, ImageGeometry, MedicalImage, spacing_from_affine
from .base import (
    CONVERT_FIRST_SUFFIXES,
    ImageReader,
    ReaderOptions,
    _canonical,
    _spacing_values,
    _typed_errors,
    finish_image,
)
from .dicom_dataset import _attribute, _float_list, _functional_group, _int_attribute, read_dicom_dataset
from .dicom_pixels import _decode_pixels, _display_convention, _photometric


def _pixel_spacing(dataset: pydicom.Dataset, where: Path) -> tuple[np.ndarray | None, str]:
    """(row spacing, column spacing) in mm and the attribute it came from; (None, "") when the file
    states none. A stated spacing that is zero, negative, NaN, infinite or malformed is refused."""
    for keyword in ("PixelSpacing", "ImagerPixelSpacing"):
        if (value := _attribute(dataset, keyword)) is not None:
            return _spacing_values(value, 2, keyword, where), keyword
    if (value := _functional_group(dataset, "PixelMeasuresSequence", "PixelSpacing")) is not None:
        return _spacing_values(value, 2, "PixelSpacing (PixelMeasuresSequence)", where), "PixelMeasuresSequence"
    regions = _attribute(dataset, "SequenceOfUltrasoundRegions")
    if regions is not None and len(regions):
        # PhysicalDelta is in cm per pixel when PhysicalUnits are 3 (cm); its sign gives a direction.
        # Consoles list several regions (colour bars, Doppler strips, dual views): the spacing is
        # that of the largest region in cm, a tissue region (RegionDataType 1) first.
        measured = [
            region
            for region in regions
            if _int_attribute(region, "PhysicalUnitsXDirection") == 3
            and _int_attribute(region, "PhysicalUnitsYDirection") == 3
        ]
        if measured:
            region = max(measured, key=_region_rank)
            deltas = [_attribute(region, "PhysicalDeltaY"), _attribute(region, "PhysicalDeltaX")]
            spacing = _spacing_values(
                [abs(float(v)) if isinstance(v, (int, float)) else v for v in deltas],
                2,
                "PhysicalDeltaY\\PhysicalDeltaX (SequenceOfUltrasoundRegions)",
                where,
            )
            return spacing * 10.0, "SequenceOfUltrasoundRegions"
    return None, ""


def _region_rank(region: pydicom.Dataset) -> tuple[bool, int]:
    """Tissue regions before others, then the larger pixel area."""
    corners = [
        _int_attribute(region, keyword, 0) or 0
        for keyword in ("RegionLocationMinX0", "RegionLocationMinY0", "RegionLocationMaxX1", "RegionLocationMaxY1")
    ]
    area = max(corners[2] - corners[0] + 1, 0) * max(corners[3] - corners[1] + 1, 0)
    return _int_attribute(region, "RegionDataType") == 1, area


def _slice_step(dataset: pydicom.Dataset, where: Path, notes: list[str]) -> float:
    """The depth of a lone slice: SpacingBetweenSlices, else SliceThickness (refused when invalid);
    1 mm, with a note, when the file states neither."""
    for keyword in ("SpacingBetweenSlices", "SliceThickness"):
        if (value := _attribute(dataset, keyword)) is not None:
            return float(_spacing_values(value, 1, keyword, where)[0])
    notes.append("no slice thickness in the file: 1 mm assumed for the single slice")
    return 1.0


@dataclass
class _Slice:
    """One 2D frame with its position in patient space (LPS mm)."""

    position: np.ndarray
    pixels: np.ndarray | None
    source: Path


def assemble_volume(
    slices: list[_Slice],
    row_cosine: np.ndarray,
    column_cosine: np.ndarray,
    pixel_spacing: np.ndarray,
    where: Path,
    options: ReaderOptions,
    notes: list[str],
    single_slice_step: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Sort frames along the slice normal, check the spacing, and return the canonical volume and affine.
    A lone slice gets `single_slice_step` (its slice thickness) as depth spacing."""
    normal = np.cross(row_cosine, column_cosine)
    distances = np.array([float(np.dot(s.position, normal)) for s in slices])
    order = np.argsort(distances, kind="stable")
    slices = [slices[i] for i in order]
    distances = distances[order]
    step = single_slice_step
    if len(slices) > 1:
        steps = np.diff(distances)
        if np.any(steps < 1e-3):
            at = float(distances[1:][steps < 1e-3][0])
            raise DuplicateSliceError(where, f"two slices at the same position ({at:.2f} mm along the slice normal)")
        step = float(np.median(steps))
        if np.any(steps > 1.5 * step):
            gap = int(np.argmax(steps))
            missing = round(steps[gap] / step) - 1
            raise MissingSliceError(
                where,
                f"missing slice(s): a gap of {steps[gap]:.2f} mm between positions {distances[gap]:.2f} and "
                f"{distances[gap + 1]:.2f} mm where the series steps by {step:.2f} mm "
                f"(about {missing} slice(s) absent)",
            )
        deviation = float(np.max(np.abs(steps - step)) / step)
        if deviation > options.slice_spacing_tolerance:
            problem = (
                f"uneven slice spacing: steps from {steps.min():.3f} to {steps.max():.3f} mm "
                f"(more than {options.slice_spacing_tolerance:.0%} from the median {step:.3f} mm)"
            )
            if not options.allow_uneven_spacing:
                raise InconsistentGeometryError(
                    where, problem + "; ReaderOptions(allow_uneven_spacing=True) accepts it (the median step is used)"
                )
            notes.append(problem + "; the median step is used")
    # (k, j, i) stack of (rows, columns) frames -> (i, j, k)
    stack = np.stack([s.pixels for s in slices]).transpose(2, 1, 0)
    affine_lps = np.eye(4)
    affine_lps[:3, 0] = row_cosine * pixel_spacing[1]  # i: along a row = increasing column index
    affine_lps[:3, 1] = column_cosine * pixel_spacing[0]  # j: down a column = increasing row index
    affine_lps[:3, 2] = normal * step
    affine_lps[:3, 3] = slices[0].position
    return _canonical(stack, LPS_TO_RAS @ affine_lps, where)


def _orientation(value) -> tuple[np.ndarray, np.ndarray] | None:
    cosines = _float_list(value, 6) if value is not None else None
    if cosines is None:
        return None
    row, column = cosines[:3], cosines[3:]
    if not (
        abs(np.linalg.norm(row) - 1) < 1e-2 and abs(np.linalg.norm(column) - 1) < 1e-2 and abs(row @ column) < 1e-2
    ):
        return None
    return row / np.linalg.norm(row), column / np.linalg.norm(column)


@dataclass
class DicomFile:
    """A parsed DICOM file (`DicomFileReader.read`): its data set with the pixel data not yet decoded,
    and notes about the file (ignored trailing bytes)."""

    path: Path
    dataset: pydicom.Dataset
    notes: list[str]


class DicomFileReader(ImageReader[DicomFile]):
    """One DICOM file: a single image, or a multi-frame object (enhanced CT/MR, RT dose grid, cine)."""

    def verify_suffix(self, path: Path) -> bool:
        """Any file of no other format: DICOM files have no fixed suffix (`.dcm`, `.IMA`, none, `.gz`),
        so `read` tells DICOM by its content (and refuses anything else as "not a DICOM file")."""
        return not path.name.lower().endswith(CONVERT_FIRST_SUFFIXES)

    def read(self, path: Path) -> DicomFile:
        """The data set, parsed within the element and size bounds (see `read_dicom_dataset`)."""
        notes: list[str] = []
        return DicomFile(path, read_dicom_dataset(path, options=self.options, notes=notes), notes)

    def get_data(self, raw: DicomFile) -> MedicalImage:
        """The decoded frames, placed in patient space when the file positions them, else kept as a
        projection image (radiograph, ultrasound, secondary capture) with its pixel spacing."""
        path, dataset, notes, options = raw.path, raw.dataset, raw.notes, self.options
        pixels = _decode_pixels(dataset, path, notes, options)
        frames = _int_attribute(dataset, "NumberOfFrames", 1) or 1
        if pixels.ndim == 2:
            pixels = pixels[None]
        if pixels.ndim != 3 or (frames > 1 and pixels.shape[0] != frames):
            raise UnsupportedImageError(path, f"unexpected pixel array shape {pixels.shape} for {frames} frame(s)")
        modality = str(_attribute(dataset, "Modality", ""))
        pixel_spacing, spacing_source = _pixel_spacing(dataset, path)
        orientation = _orientation(
            _attribute(dataset, "ImageOrientationPatient")
            or _functional_group(dataset, "PlaneOrientationSequence", "ImageOrientationPatient")
        )
        positions = _frame_positions(dataset, frames, orientation)
        if orientation is not None and positions is not None and pixel_spacing is not None:
            slices = [_Slice(position, frame, path) for position, frame in zip(positions, pixels)]
            step = _slice_step(dataset, path, notes) if len(slices) == 1 else 1.0
            volume, affine = assemble_volume(slices, *orientation, pixel_spacing, path, options, notes, step)
            geometry = ImageGeometry(spacing=spacing_from_affine(affine), affine=affine)
        else:
            volume = pixels
            if frames > 1 and modality == "US":
                volume = pixels[_cine_frame(frames, options, path, notes)][None]
            elif frames > 1:
                notes.append(f"{frames} frames carry no patient positions (cine or stack?): kept in file order")
            geometry = _projection_geometry(pixel_spacing, spacing_source, notes)
        volume, window = _display_convention(volume, dataset, notes, path)
        return finish_image(volume, geometry, modality, path, _photometric(dataset), notes, options, window)


@_typed_errors
def read_dicom_file(path: str | Path, options: ReaderOptions | None = None) -> MedicalImage:
    """One DICOM file: a single image, or a multi-frame object (enhanced CT/MR, RT dose grid, cine)."""
    return DicomFileReader(options).load(path)


def _projection_geometry(pixel_spacing: np.ndarray | None, spacing_source: str, notes: list[str]) -> ImageGeometry:
    """The geometry of frames without patient positions: the pixel spacing (1 mm, with a note, when the
    file states none) and 1 mm between frames."""
    known = pixel_spacing is not None
    if not known:
        notes.append("no pixel spacing in the file: 1 mm assumed")
        pixel_spacing = np.array([1.0, 1.0])
    elif spacing_source == "ImagerPixelSpacing":
        notes.append("ImagerPixelSpacing (at the detector) used as pixel spacing")
    return ImageGeometry(spacing=(1.0, *map(float, pixel_spacing)), spacing_known=known)


def _cine_frame(frames: int, options: ReaderOptions, path: Path, notes: list[str]) -> int:
    """The frame of an ultrasound cine loop to read: `options.volume_index`, else the middle frame (a
    real frame, sharp and with its own speckle; a mean of the loop would blur both)."""
    if options.volume_index is None:
        index = frames // 2
        notes.append(
            f"ultrasound cine loop of {frames} frames: frame {index} (the middle one) read; "
            "ReaderOptions(volume_index=N) or --volume-index N chooses another"
        )
        return index
    if not 0 <= options.volume_index < frames:
        raise UnsupportedImageError(path, f"volume_index {options.volume_index} outside 0..{frames - 1}")
    notes.append(f"frame {options.volume_index} of an ultrasound cine loop of {frames} frames read")
    return options.volume_index


def _frame_positions(dataset: pydicom.Dataset, frames: int, orientation) -> list[np.ndarray] | None:
    if orientation is None:
        return None
    if frames > 1 and _attribute(dataset, "PerFrameFunctionalGroupsSequence") is not None:
        positions = [
            _float_list(_functional_group(dataset, "PlanePositionSequence", "ImagePositionPatient", f) or [], 3)
            for f in range(frames)
        ]
        return positions if all(p is not None for p in positions) else None
    origin = _float_list(_attribute(dataset, "ImagePositionPatient", []), 3)
    if origin is None:
        return None
    if frames == 1:
        return [origin]
    offsets = _float_list(_attribute(dataset, "GridFrameOffsetVector", []), frames)
    if offsets is None:
        return None
    normal = np.cross(*orientation)
    return [origin + offset * normal for offset in offsets]
