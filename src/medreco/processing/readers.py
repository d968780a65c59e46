"""Readers: DICOM files and series, NIfTI, PNG/JPEG -> `MedicalImage` in the canonical orientation.

Every failure raises a `MedicalImageError` subclass naming the file; nothing returns a blank
image. No identifying DICOM value is copied into the result or into an error message."""

from __future__ import annotations

import gzip
import io
import logging
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import nibabel as nib
import numpy as np
import pydicom
from pydicom.errors import InvalidDicomError
from pydicom.pixels import apply_color_lut, apply_modality_lut

from ..errors import (
    DuplicateSliceError,
    InconsistentGeometryError,
    InvalidPixelDataError,
    MissingCodecError,
    MissingSliceError,
    MultipleSeriesError,
    SeriesError,
    UnreadableImageError,
    UnsupportedImageError,
)
from .geometry import LPS_TO_RAS, ImageGeometry, MedicalImage, spacing_from_affine, to_canonical

if TYPE_CHECKING:
    import PIL.Image

logger = logging.getLogger(__name__)

NIFTI_SUFFIXES = (".nii", ".nii.gz")
RASTER_SUFFIXES = (".png", ".jpg", ".jpeg")
PIXEL_DATA_KEYWORDS = ("PixelData", "FloatPixelData", "DoubleFloatPixelData")


@dataclass
class ReaderOptions:
    """How strict the readers are and which part of a multi-part input to take.

    series: in a folder with several DICOM series, the SeriesNumber to read.
    volume_index: for 4D NIfTI, the volume to read (4D input is refused otherwise).
    nan_policy: "raise" on NaN/inf values (default), or "zero" to replace them with the
      image minimum and record a warning.
    slice_spacing_tolerance: relative deviation of a slice step from the median step above which
      a series is "unevenly spaced"; a step over 1.5x the median is a missing slice.
    allow_uneven_spacing: accept unevenly spaced series (the median step is used, with a warning).
    """

    series: int | None = None
    volume_index: int | None = None
    nan_policy: Literal["raise", "zero"] = "raise"
    slice_spacing_tolerance: float = 0.1
    allow_uneven_spacing: bool = False


def load_image(path: str | Path, options: ReaderOptions | None = None) -> MedicalImage:
    """Read any supported input: a DICOM file or series folder, a NIfTI file, a PNG/JPEG."""
    options = options or ReaderOptions()
    path = Path(path)
    if not path.exists():
        raise UnreadableImageError(path, "no such file or folder")
    if path.is_dir():
        return read_dicom_series(path, options)
    name = path.name.lower()
    if name.endswith(NIFTI_SUFFIXES):
        return read_nifti(path, options)
    if name.endswith(RASTER_SUFFIXES):
        return read_raster(path, options)
    if name.endswith((".hdr", ".img", ".mgz", ".nrrd", ".mha", ".mhd")):
        raise UnsupportedImageError(path, "unsupported format; convert it to NIfTI (.nii/.nii.gz) or DICOM")
    return read_dicom_file(path, options)


# ----------------------------------------------------------------------------------------- DICOM


def _dicom_source(path: Path):
    """The path, or for a gzip-compressed file (`.dcm.gz`) its decompressed bytes."""
    with open(path, "rb") as handle:
        compressed = handle.read(2) == b"\x1f\x8b"
    if not compressed:
        return path
    try:
        with gzip.open(path, "rb") as handle:
            return io.BytesIO(handle.read())
    except (OSError, EOFError) as error:
        raise UnreadableImageError(path, f"truncated or corrupt gzip file ({type(error).__name__})") from None


def read_dicom_dataset(path: Path, stop_before_pixels: bool = False) -> pydicom.Dataset:
    """Parse a DICOM file (optionally gzip-compressed); files without the 128-byte preamble are
    accepted when they hold image attributes."""
    source = _dicom_source(path)
    if isinstance(source, io.BytesIO):
        path_or_buffer = source
    else:
        path_or_buffer = path
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return pydicom.dcmread(path_or_buffer, stop_before_pixels=stop_before_pixels)
        except InvalidDicomError:
            if isinstance(path_or_buffer, io.BytesIO):
                path_or_buffer.seek(0)
        except Exception as error:  # pydicom raises many types on truncated or corrupt files
            raise UnreadableImageError(path, f"truncated or corrupt DICOM file ({type(error).__name__})") from None
        try:
            dataset = pydicom.dcmread(path_or_buffer, stop_before_pixels=stop_before_pixels, force=True)
        except Exception:
            dataset = None
    if dataset is not None and "SOPClassUID" in dataset:
        if "Rows" in dataset and "Columns" in dataset:
            return dataset
        raise UnsupportedImageError(path, "a DICOM object without a file header or image attributes, not an image")
    raise UnreadableImageError(path, "not a DICOM file")


def _transfer_syntax_name(dataset: pydicom.Dataset) -> str:
    syntax = getattr(getattr(dataset, "file_meta", None), "TransferSyntaxUID", None)
    return getattr(syntax, "name", None) or "this"


def _decode_pixels(dataset: pydicom.Dataset, path: Path, notes: list[str]) -> np.ndarray:
    if not any(keyword in dataset for keyword in PIXEL_DATA_KEYWORDS):
        kind = dataset.get("Modality") or "non-image"
        raise UnsupportedImageError(path, f"no pixel data (a {kind} object, not an image)")
    if "MOSAIC" in [str(v).upper() for v in (dataset.get("ImageType") or [])]:
        raise UnsupportedImageError(
            path, "a Siemens mosaic (slices tiled in one image); convert it with dcm2niix first"
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            pixels = dataset.pixel_array
        except RuntimeError as error:
            message = str(error)
            if "missing dependencies" in message:
                needs = "; ".join(line.strip() for line in message.splitlines()[1:] if line.strip())
                raise MissingCodecError(
                    path, f"{_transfer_syntax_name(dataset)} pixel data needs a decoder that is not installed ({needs})"
                ) from None
            raise UnreadableImageError(
                path, f"cannot decode the {_transfer_syntax_name(dataset)} pixel data (corrupt or unsupported stream)"
            ) from None
        except (ValueError, AttributeError, KeyError, TypeError, NotImplementedError, EOFError) as error:
            raise UnreadableImageError(path, f"pixel data cannot be read: {error}") from None
    notes.extend(str(w.message).split("\n")[0] for w in caught)
    photometric = str(dataset.get("PhotometricInterpretation", "MONOCHROME2"))
    if photometric == "PALETTE COLOR":
        pixels = apply_color_lut(pixels, dataset)
    samples = int(dataset.get("SamplesPerPixel", 1))
    if samples > 1 or photometric == "PALETTE COLOR":
        pixels = pixels.astype(np.float32) @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
        notes.append(f"{photometric} colour converted to greyscale luminance")
    elif "ModalityLUTSequence" not in dataset and ("RescaleSlope" in dataset or "RescaleIntercept" in dataset):
        # the common linear rescale, in float32 (pydicom's general path works in float64)
        pixels = pixels.astype(np.float32)
        pixels *= float(dataset.get("RescaleSlope", 1) or 1)
        pixels += float(dataset.get("RescaleIntercept", 0) or 0)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pixels = apply_modality_lut(pixels, dataset)
    pixels = np.asarray(pixels, dtype=np.float32)
    if photometric == "MONOCHROME1":
        pixels = pixels.max() + pixels.min() - pixels
        notes.append("MONOCHROME1 inverted so that higher values are brighter")
    return pixels


def _float_list(value, count: int) -> np.ndarray | None:
    try:
        array = np.array([float(v) for v in value], dtype=np.float64)
    except (TypeError, ValueError):
        return None
    return array if array.shape == (count,) and np.all(np.isfinite(array)) else None


def _functional_group(dataset: pydicom.Dataset, sequence: str, item: str, frame: int | None = None):
    """A value from the enhanced multi-frame functional groups (per-frame first, then shared)."""
    groups = []
    if frame is not None and "PerFrameFunctionalGroupsSequence" in dataset:
        groups.append(dataset.PerFrameFunctionalGroupsSequence[frame])
    if "SharedFunctionalGroupsSequence" in dataset:
        groups.append(dataset.SharedFunctionalGroupsSequence[0])
    for group in groups:
        if sequence in group and len(group[sequence].value) and item in group[sequence][0]:
            return group[sequence][0][item].value
    return None


def _pixel_spacing(dataset: pydicom.Dataset) -> tuple[np.ndarray | None, str]:
    for keyword in ("PixelSpacing", "ImagerPixelSpacing"):
        if keyword in dataset and (spacing := _float_list(dataset[keyword].value, 2)) is not None:
            return spacing, keyword
    if (value := _functional_group(dataset, "PixelMeasuresSequence", "PixelSpacing")) is not None:
        return _float_list(value, 2), "PixelMeasuresSequence"
    if "SequenceOfUltrasoundRegions" in dataset:
        region = dataset.SequenceOfUltrasoundRegions[0]
        # PhysicalDelta is in cm per pixel when PhysicalUnits are 3 (cm)
        if region.get("PhysicalUnitsXDirection") == 3 and region.get("PhysicalUnitsYDirection") == 3:
            return np.array([region.PhysicalDeltaY * 10.0, region.PhysicalDeltaX * 10.0]), "SequenceOfUltrasoundRegions"
    return None, ""


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
                raise InconsistentGeometryError(where, problem + "; pass allow_uneven_spacing=True to accept it")
            notes.append(problem + "; the median step is used")
    # (k, j, i) stack of (rows, columns) frames -> (i, j, k)
    stack = np.stack([s.pixels for s in slices]).transpose(2, 1, 0)
    affine_lps = np.eye(4)
    affine_lps[:3, 0] = row_cosine * pixel_spacing[1]  # i: along a row = increasing column index
    affine_lps[:3, 1] = column_cosine * pixel_spacing[0]  # j: down a column = increasing row index
    affine_lps[:3, 2] = normal * step
    affine_lps[:3, 3] = slices[0].position
    return to_canonical(stack, LPS_TO_RAS @ affine_lps)


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


def read_dicom_file(path: str | Path, options: ReaderOptions | None = None) -> MedicalImage:
    """One DICOM file: a single image, or a multi-frame object (enhanced CT/MR, RT dose grid, cine)."""
    options = options or ReaderOptions()
    path = Path(path)
    dataset = read_dicom_dataset(path)
    notes: list[str] = []
    pixels = _decode_pixels(dataset, path, notes)
    frames = int(dataset.get("NumberOfFrames", 1) or 1)
    if frames == 1 and pixels.ndim == 2:
        pixels = pixels[None]
    if pixels.ndim != 3:
        raise UnsupportedImageError(path, f"unexpected pixel array shape {pixels.shape}")
    modality = str(dataset.get("Modality", ""))
    pixel_spacing, spacing_source = _pixel_spacing(dataset)
    orientation = _orientation(
        dataset.get("ImageOrientationPatient")
        or _functional_group(dataset, "PlaneOrientationSequence", "ImageOrientationPatient")
    )
    positions = _frame_positions(dataset, frames, orientation)
    if orientation is not None and positions is not None and pixel_spacing is not None:
        slices = [_Slice(position, frame, path) for position, frame in zip(positions, pixels)]
        thickness = _float_list([dataset.get("SpacingBetweenSlices") or dataset.get("SliceThickness") or 1.0], 1)
        step = float(thickness[0]) if thickness is not None and thickness[0] > 0 else 1.0
        volume, affine = assemble_volume(slices, *orientation, pixel_spacing, path, options, notes, step)
        geometry = ImageGeometry(spacing=spacing_from_affine(affine), affine=affine)
    else:
        # A projection image (radiograph, ultrasound, secondary capture) or frames without positions.
        volume = pixels
        if frames > 1:
            notes.append(f"{frames} frames carry no patient positions (cine or stack?): kept in file order")
        known = pixel_spacing is not None
        if not known:
            notes.append("no pixel spacing in the file: 1 mm assumed")
            pixel_spacing = np.array([1.0, 1.0])
        elif spacing_source == "ImagerPixelSpacing":
            notes.append("ImagerPixelSpacing (at the detector) used as pixel spacing")
        geometry = ImageGeometry(spacing=(1.0, *map(float, pixel_spacing)), spacing_known=known)
    return finish_image(
        volume, geometry, modality, path, _photometric(dataset), notes, options, _display_window(dataset)
    )


def _frame_positions(dataset: pydicom.Dataset, frames: int, orientation) -> list[np.ndarray] | None:
    if orientation is None:
        return None
    if frames > 1 and "PerFrameFunctionalGroupsSequence" in dataset:
        positions = [
            _float_list(_functional_group(dataset, "PlanePositionSequence", "ImagePositionPatient", f) or [], 3)
            for f in range(frames)
        ]
        return positions if all(p is not None for p in positions) else None
    origin = _float_list(dataset.get("ImagePositionPatient", []) or [], 3)
    if origin is None:
        return None
    if frames == 1:
        return [origin]
    offsets = _float_list(dataset.get("GridFrameOffsetVector", []) or [], frames)
    if offsets is None:
        return None
    normal = np.cross(*orientation)
    return [origin + offset * normal for offset in offsets]


def _photometric(dataset: pydicom.Dataset) -> str:
    return str(dataset.get("PhotometricInterpretation", "MONOCHROME2"))


def _display_window(dataset: pydicom.Dataset) -> tuple[float, float] | None:
    """The file's first VOI window (centre/width) as (low, high), after the modality LUT."""
    center, width = dataset.get("WindowCenter"), dataset.get("WindowWidth")
    if center is None or width is None:
        return None
    center = center[0] if isinstance(center, pydicom.multival.MultiValue) else center
    width = width[0] if isinstance(width, pydicom.multival.MultiValue) else width
    try:
        center, width = float(center), float(width)
    except (TypeError, ValueError):
        return None
    return (center - width / 2, center + width / 2) if width > 0 else None


def list_dicom_series(folder: str | Path) -> list[dict]:
    """The series in a folder, as `medreco inspect` shows them (no UIDs or patient data)."""
    return [summary for summary, _ in _scan_series(Path(folder), headers_only=True)[0].values()]


def _scan_series(folder: Path, headers_only: bool = False) -> tuple[dict[str, tuple[dict, list]], int]:
    """Group a folder's DICOM files by series. Each file is parsed once; pixels are decoded later."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith("."))
    groups: dict[str, list[tuple[Path, pydicom.Dataset]]] = defaultdict(list)
    skipped = 0
    for file in files:
        try:
            header = read_dicom_dataset(file, stop_before_pixels=headers_only)
        except UnreadableImageError:
            skipped += 1
            continue
        groups[str(header.get("SeriesInstanceUID", "unknown"))].append((file, header))
    series = {}
    for uid, members in groups.items():
        header = members[0][1]
        summary = {
            "series_number": int(header.get("SeriesNumber")) if header.get("SeriesNumber") not in (None, "") else None,
            "modality": str(header.get("Modality", "")),
            "description": str(header.get("SeriesDescription", "")),
            "files": len(members),
        }
        series[uid] = (summary, members)
    return series, skipped


def read_dicom_series(folder: str | Path, options: ReaderOptions | None = None) -> MedicalImage:
    """A folder of DICOM slices -> one volume, checked for missing, duplicated and uneven slices."""
    options = options or ReaderOptions()
    folder = Path(folder)
    series, skipped = _scan_series(folder)
    if not series:
        raise UnreadableImageError(folder, "no readable DICOM file in this folder")
    if options.series is not None:
        chosen = [v for v in series.values() if v[0]["series_number"] == options.series]
        if not chosen:
            numbers = sorted(str(v[0]["series_number"]) for v in series.values())
            raise SeriesError(folder, f"no series number {options.series} here; found {', '.join(numbers)}")
    elif len(series) > 1:
        listing = [v[0] for v in series.values()]
        described = "; ".join(
            f"series {s['series_number']} ({s['modality']}, {s['files']} files, {s['description']!r})" for s in listing
        )
        raise MultipleSeriesError(
            folder, f"{len(series)} series in one folder: {described}. Choose one with series=N", listing
        )
    else:
        chosen = list(series.values())
    summary, members = chosen[0]
    notes = [f"{skipped} non-DICOM file(s) ignored"] if skipped else []
    if len(members) == 1:
        image = read_dicom_file(members[0][0], options)
        image.source = str(folder)
        image.warnings = notes + image.warnings
        return image

    first = members[0][1]
    orientation = _orientation(first.get("ImageOrientationPatient"))
    spacing, _ = _pixel_spacing(first)
    if orientation is None or spacing is None:
        raise InconsistentGeometryError(
            folder, "slices lack ImageOrientationPatient or PixelSpacing: cannot place them"
        )
    slices = []
    for file, header in members:
        if (header.Rows, header.Columns) != (first.Rows, first.Columns):
            raise InconsistentGeometryError(
                file, f"slice size {header.Rows}x{header.Columns} differs from {first.Rows}x{first.Columns}"
            )
        other = _orientation(header.get("ImageOrientationPatient"))
        if other is None or not (
            np.allclose(other[0], orientation[0], atol=1e-3) and np.allclose(other[1], orientation[1], atol=1e-3)
        ):
            raise InconsistentGeometryError(file, "slice orientation differs from the rest of the series")
        other_spacing, _ = _pixel_spacing(header)
        if other_spacing is None or not np.allclose(other_spacing, spacing, rtol=1e-3):
            raise InconsistentGeometryError(file, "pixel spacing differs from the rest of the series")
        position = _float_list(header.get("ImagePositionPatient", []) or [], 3)
        if position is None:
            raise InconsistentGeometryError(file, "slice has no ImagePositionPatient")
        slices.append(_Slice(position, None, file))
    frame_notes: list[str] = []
    for item, (_, dataset) in zip(slices, members):
        item.pixels = _decode_pixels(dataset, item.source, frame_notes)
        if item.pixels.ndim != 2:
            raise InconsistentGeometryError(item.source, "multi-frame or colour file inside a slice series")
    volume, affine = assemble_volume(slices, *orientation, spacing, folder, options, notes)
    geometry = ImageGeometry(spacing=spacing_from_affine(affine), affine=affine)
    return finish_image(
        volume, geometry, summary["modality"], folder, _photometric(first), notes, options, _display_window(first)
    )


# ------------------------------------------------------------------------------------ NIfTI, raster


def read_nifti(path: str | Path, options: ReaderOptions | None = None) -> MedicalImage:
    """A NIfTI-1/2 file with its affine honoured; 4D only with an explicit `volume_index`."""
    options = options or ReaderOptions()
    path = Path(path)
    try:
        image = nib.load(path)
    except Exception as error:
        raise UnreadableImageError(path, f"not a readable NIfTI file ({type(error).__name__})") from None
    if not isinstance(image, (nib.Nifti1Image, nib.Nifti2Image)):
        raise UnsupportedImageError(path, f"{type(image).__name__} is not a NIfTI volume")
    shape = image.shape
    try:
        data = np.asarray(image.dataobj, dtype=np.float32)
    except Exception as error:
        raise UnreadableImageError(path, f"truncated or corrupt NIfTI data ({type(error).__name__})") from None
    notes: list[str] = []
    if data.ndim == 4 and shape[3] == 1:
        data = data[..., 0]
    if data.ndim == 4:
        if options.volume_index is None:
            raise UnsupportedImageError(path, f"4D image with {shape[3]} volumes; pass volume_index to read one")
        if not 0 <= options.volume_index < shape[3]:
            raise UnsupportedImageError(path, f"volume_index {options.volume_index} outside 0..{shape[3] - 1}")
        data = data[..., options.volume_index]
        notes.append(f"volume {options.volume_index} of {shape[3]} read from a 4D image")
    if data.ndim == 2:
        data = data[..., None]
    if data.ndim != 3:
        raise UnsupportedImageError(path, f"{data.ndim}-dimensional data (shape {shape}) is not an image volume")
    affine = image.affine
    if not np.all(np.isfinite(affine)) or abs(np.linalg.det(affine[:3, :3])) < 1e-12:
        raise UnreadableImageError(path, "the header's affine is singular or not finite")
    volume, canonical_affine = to_canonical(data, affine)
    geometry = ImageGeometry(spacing=spacing_from_affine(canonical_affine), affine=canonical_affine)
    return finish_image(volume, geometry, "", path, "MONOCHROME2", notes, options, None)


def read_raster(path: str | Path, options: ReaderOptions | None = None) -> MedicalImage:
    """A PNG or JPEG radiograph or ultrasound frame (8 or 16 bit, greyscale or colour)."""
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    try:
        with Image.open(path) as image:
            image.load()
            pixels = image.copy()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as error:
        raise UnreadableImageError(path, f"not a readable PNG/JPEG image ({type(error).__name__})") from None
    return from_pil_image(pixels, options, path)


def from_pil_image(
    image: PIL.Image.Image, options: ReaderOptions | None = None, source: str | Path = "<PIL image>"
) -> MedicalImage:
    """A loaded PIL image (how `datasets` and TRL hand images over): colour becomes greyscale
    luminance; PNG/JPEG carry no pixel spacing, so 1 mm is assumed."""
    options = options or ReaderOptions()
    notes: list[str] = []
    mode = image.mode
    if mode in ("RGB", "RGBA", "P", "LA", "CMYK", "YCbCr"):
        notes.append(f"{mode} colour converted to greyscale luminance")
        image = image.convert("L")
        mode = "L"
    pixels = np.asarray(image)
    top = 255.0 if pixels.dtype == np.uint8 else 65535.0 if mode.startswith("I;16") else float(pixels.max() or 1)
    notes.append("no pixel spacing in PNG/JPEG: 1 mm assumed")
    geometry = ImageGeometry(spacing=(1.0, 1.0, 1.0), spacing_known=False)
    return finish_image(
        pixels.astype(np.float32)[None], geometry, "", Path(source), "MONOCHROME2", notes, options, (0.0, top)
    )


def finish_image(
    volume: np.ndarray,
    geometry: ImageGeometry,
    modality: str,
    source: Path,
    photometric: str,
    notes: list[str],
    options: ReaderOptions,
    display_window: tuple[float, float] | None,
) -> MedicalImage:
    """Final checks shared by every reader: non-empty, finite (or repaired by policy)."""
    volume = np.asarray(volume, dtype=np.float32)
    if volume.size == 0 or 0 in volume.shape:
        raise InvalidPixelDataError(source, f"empty image (shape {volume.shape})")
    finite = np.isfinite(volume)
    if not finite.all():
        bad = int((~finite).sum())
        if bad == volume.size:
            raise InvalidPixelDataError(source, "every pixel value is NaN or infinite")
        if options.nan_policy != "zero":
            raise InvalidPixelDataError(
                source, f"{bad} of {volume.size} values are NaN or infinite; pass nan_policy='zero' to replace them"
            )
        volume = np.where(finite, volume, volume[finite].min())
        notes.append(f"{bad} NaN/infinite values replaced by the image minimum")
    for note in notes:
        logger.debug("%s: %s", source, note)
    return MedicalImage(volume, geometry, modality, str(source), photometric, notes, display_window)


__all__ = [
    "ReaderOptions",
    "from_pil_image",
    "list_dicom_series",
    "load_image",
    "read_dicom_dataset",
    "read_dicom_file",
    "read_dicom_series",
    "read_nifti",
    "read_raster",
]
