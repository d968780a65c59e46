"""NIfTI-1/2 (.nii, .nii.gz) -> `MedicalImage`, the affine honoured. Only the header is read before
the checks: the voxel data it claims must fit `ReaderOptions.max_image_bytes` and the file (a
compressed file cannot hold more than 1032x its size), and its voxel sizes must be valid as the file
states them; only then are the voxels read (one volume of a 4D image)."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import nibabel as nib
import numpy as np
from nibabel.openers import ImageOpener

from ...errors import (
    ImageTooLargeError,
    InvalidPixelDataError,
    InvalidSpacingError,
    UnreadableImageError,
    UnsupportedImageError,
)
from ..geometry import LPS_TO_RAS, ImageGeometry, MedicalImage, spacing_from_affine
from .base import (
    DEFLATE_MAX_RATIO,
    GZIP_MAGIC,
    SPACING_RULE,
    ImageReader,
    ReaderOptions,
    _canonical,
    _plausible_spacing,
    _size_text,
    _typed_errors,
    finish_image,
)

NIFTI_SUFFIXES = (".nii", ".nii.gz")


@dataclass(frozen=True)
class VolumeHeader:
    """What a NIfTI header should have said, from a dataset's metadata (CT-RATE's metadata CSV).

    spacing: voxel size in mm along the file's voxel axes i, j, k (NIfTI order; CT-RATE's
      `XYSpacing` then `ZSpacing`, as its `fix_metadata.py` sets them).
    rescale_slope, rescale_intercept: output = slope * stored value + intercept (HU for CT), applied to
      the values the file stores (a scaling the header itself declares is undone first).
    orientation: DICOM ImageOrientationPatient (row then column direction cosines, LPS) of axes i
      and j, k along their cross product; None keeps the header's axis directions.
    origin: DICOM ImagePositionPatient (LPS mm) of the first voxel; None keeps the header's."""

    spacing: tuple[float, float, float]
    rescale_slope: float = 1.0
    rescale_intercept: float = 0.0
    orientation: tuple[float, ...] | None = None
    origin: tuple[float, float, float] | None = None

    def apply(self, data: np.ndarray, header, affine: np.ndarray, path: Path) -> tuple[np.ndarray, np.ndarray]:
        """The stored values rescaled, and the affine with this voxel size (orientation, origin)."""
        declared_slope, declared_intercept = header.get_slope_inter()
        if declared_slope is not None and np.isfinite(declared_slope) and declared_slope != 0:
            data = (data - np.float32(declared_intercept or 0.0)) / np.float32(declared_slope)
        data = data * np.float32(self.rescale_slope) + np.float32(self.rescale_intercept)
        spacing = np.asarray(self.spacing, dtype=np.float64)
        result = np.eye(4)
        if self.orientation is not None:
            row, column = np.asarray(self.orientation[:3]), np.asarray(self.orientation[3:])
            directions = LPS_TO_RAS[:3, :3] @ np.stack([row, column, np.cross(row, column)], axis=1)
        else:
            lengths = np.linalg.norm(affine[:3, :3], axis=0) if affine is not None else np.zeros(3)
            if affine is None or not np.all(np.isfinite(affine)) or np.any(lengths < 1e-12):
                raise InvalidSpacingError(
                    path, "the header's affine gives no direction to every axis; the volume file needs an orientation"
                )
            directions = affine[:3, :3] / lengths
        result[:3, :3] = directions * spacing
        if self.origin is not None:
            result[:3, 3] = LPS_TO_RAS[:3, :3] @ np.asarray(self.origin, dtype=np.float64)
        else:
            result[:3, 3] = affine[:3, 3]
        return data, result

    def to_dict(self) -> dict:
        """The fields written to a volume file (orientation and origin only when known)."""
        fields = {
            "spacing": list(self.spacing),
            "rescale_slope": self.rescale_slope,
            "rescale_intercept": self.rescale_intercept,
        }
        if self.orientation is not None:
            fields["orientation"] = list(self.orientation)
        if self.origin is not None:
            fields["origin"] = list(self.origin)
        return fields


@dataclass
class NiftiFile:
    """A NIfTI file whose header passed the checks (`NiftiReader.read`), its voxels not yet read.
    header_override: the voxel size, rescale (and orientation) to use instead of the header's."""

    path: Path
    image: nib.Nifti1Image | nib.Nifti2Image
    shape: tuple[int, ...]
    volumes: int
    header_override: VolumeHeader | None = None


class NiftiReader(ImageReader[NiftiFile]):
    """A NIfTI-1/2 file with its affine honoured; 4D only with an explicit `volume_index`."""

    def verify_suffix(self, path: Path) -> bool:
        """A `.nii` or `.nii.gz` file."""
        return path.name.lower().endswith(NIFTI_SUFFIXES)

    def read(self, path: Path, header_override: VolumeHeader | None = None) -> NiftiFile:
        """The header, checked: a greyscale 2D-4D image, the volume to read chosen, its claimed voxel
        data within the limit and the file, its voxel sizes valid (unless `header_override` replaces
        them)."""
        image = _nifti_image(path)
        header = image.header
        shape = tuple(int(n) for n in header.get_data_shape())
        _check_voxel_layout(path, shape, header.get_data_dtype())
        volumes = shape[3] if len(shape) >= 4 else 1
        if volumes > 1:
            if self.options.volume_index is None:
                raise UnsupportedImageError(
                    path,
                    f"4D image with {volumes} volumes; choose one with ReaderOptions(volume_index=N), "
                    "or --volume-index N on the command line",
                )
            if not 0 <= self.options.volume_index < volumes:
                raise UnsupportedImageError(path, f"volume_index {self.options.volume_index} outside 0..{volumes - 1}")
        _check_claimed_size(path, header, shape, self.options)
        if header_override is None:  # an override replaces the header's voxel size: it is not used
            _nifti_voxel_spacing(image, path, min(len(shape), 3))
        return NiftiFile(path, image, shape, volumes, header_override)

    def get_data(self, raw: NiftiFile) -> MedicalImage:
        """The voxels (of the chosen volume) in the canonical orientation, the header override applied."""
        path, notes = raw.path, []
        data = _voxel_data(raw, self.options)
        if raw.volumes > 1:
            notes.append(f"volume {self.options.volume_index} of {raw.volumes} read from a 4D image")
        if data.ndim == 2:
            data = data[..., None]
        affine = raw.image.affine
        if raw.header_override is not None:
            data, affine = raw.header_override.apply(data, raw.image.header, affine, path)
        if affine is None or not np.all(np.isfinite(affine)) or abs(np.linalg.det(affine[:3, :3])) < 1e-12:
            raise InvalidSpacingError(
                path, "the header's affine is singular or not finite (a zero or invalid voxel size)"
            )
        volume, canonical_affine = _canonical(data, affine, path)
        geometry = ImageGeometry(spacing=spacing_from_affine(canonical_affine), affine=canonical_affine)
        return finish_image(volume, geometry, "", path, "MONOCHROME2", notes, self.options, None)


@_typed_errors
def read_nifti(
    path: str | Path, options: ReaderOptions | None = None, header_override: VolumeHeader | None = None
) -> MedicalImage:
    """A NIfTI-1/2 file with its affine honoured; 4D only with an explicit `volume_index`.
    `header_override`: the voxel size, rescale (and orientation) to use instead of the header's.

    Only the header is read before the checks: the voxel data it claims must fit
    `max_image_bytes` and the file (a compressed file cannot hold more than 1032x its size)."""
    reader = NiftiReader(options)
    return reader.get_data(reader.read(Path(path), header_override))


def nifti_volume_count(path: str | Path) -> int:
    """How many volumes a NIfTI file holds (its 4th dimension; 1 for 2D and 3D images), from the header."""
    shape = _nifti_image(Path(path)).header.get_data_shape()
    return int(shape[3]) if len(shape) >= 4 else 1


def _nifti_image(path: Path) -> nib.Nifti1Image | nib.Nifti2Image:
    """The file's image as nibabel loads it (the header only; the voxels stay on disk)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            image = nib.load(path)
    except Exception as error:  # nibabel raises many types on damaged headers
        raise UnreadableImageError(path, f"not a readable NIfTI file ({type(error).__name__})") from None
    if not isinstance(image, (nib.Nifti1Image, nib.Nifti2Image)):
        raise UnsupportedImageError(path, f"{type(image).__name__} is not a NIfTI volume")
    return image


def _check_voxel_layout(path: Path, shape: tuple[int, ...], dtype: np.dtype) -> None:
    """Refuse what is no greyscale image: structured or non-numeric voxels, an empty or 1D shape, or
    more than 4 dimensions that are not of size 1."""
    if dtype.kind not in "biuf" or dtype.fields is not None:
        raise UnsupportedImageError(path, f"voxel type {dtype} is not a greyscale intensity")
    if not shape or min(shape) <= 0:
        raise InvalidPixelDataError(path, f"empty image (shape {shape})")
    if len(shape) < 2:
        raise UnsupportedImageError(path, f"1-dimensional data (shape {shape}) is not an image")
    spatial = [n for n in shape[3:] if n != 1]
    if len(shape) > 4 and spatial:
        raise UnsupportedImageError(path, f"{len(shape)}-dimensional data (shape {shape}) is not an image volume")


def _check_claimed_size(path: Path, header, shape: tuple[int, ...], options: ReaderOptions) -> None:
    """Refuse a volume whose claimed voxel data exceeds `max_image_bytes`, or that the file cannot
    hold (a damaged header, or a decompression bomb once inflated)."""
    dtype = header.get_data_dtype()
    voxels = math.prod(shape[:3]) * dtype.itemsize
    if voxels > options.max_image_bytes:
        raise ImageTooLargeError(
            path,
            f"the header claims {'x'.join(map(str, shape[:3]))} voxels of {dtype} ({_size_text(voxels)}), more than "
            f"the reader's limit of {_size_text(options.max_image_bytes)}; ReaderOptions(max_image_bytes=...) "
            "raises it",
        )
    data_end = int(header.get_data_offset()) + math.prod(shape) * dtype.itemsize
    file_size = path.stat().st_size
    with open(path, "rb") as handle:
        compressed = handle.read(2) == GZIP_MAGIC
    if data_end > (file_size * DEFLATE_MAX_RATIO if compressed else file_size):
        raise UnreadableImageError(
            path, f"truncated or corrupt NIfTI file (the header claims {_size_text(data_end)} the file cannot hold)"
        )


def _nifti_voxel_spacing(image: nib.Nifti1Image, path: Path, spatial_dims: int) -> None:
    """Refuse voxel sizes (pixdim) that are zero, negative, NaN or infinite, as the file states them
    (nibabel's loader silently replaces zeros by 1 and negatives by their absolute value)."""
    with ImageOpener(path) as handle:
        header = type(image.header).from_fileobj(handle, check=False)
    zooms = np.asarray(header["pixdim"][1 : 1 + spatial_dims], dtype=np.float64)
    if not _plausible_spacing(zooms):
        shown = ", ".join(f"{z:g}" for z in zooms)
        raise InvalidSpacingError(path, f"voxel size (pixdim) {shown}: {SPACING_RULE}")


def _voxel_data(raw: NiftiFile, options: ReaderOptions) -> np.ndarray:
    """The voxels as float32: the whole 2D/3D array, or the chosen volume of a 4D one."""
    try:
        with warnings.catch_warnings(), np.errstate(over="ignore", invalid="ignore"):
            warnings.simplefilter("ignore")
            proxy = raw.image.dataobj
            if len(raw.shape) >= 4:
                index = options.volume_index if raw.volumes > 1 else 0
                selection = (slice(None),) * 3 + (index,) + (0,) * (len(raw.shape) - 4)
                return np.asarray(proxy[selection], dtype=np.float32)
            return np.asarray(proxy, dtype=np.float32)
    except MemoryError:
        raise ImageTooLargeError(raw.path, "not enough memory to read the voxel data") from None
    except Exception as error:  # nibabel, gzip and numpy raise many types on damaged data
        raise UnreadableImageError(raw.path, f"truncated or corrupt NIfTI data ({type(error).__name__})") from None
