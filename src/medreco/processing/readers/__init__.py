"""Readers: DICOM files and series, NIfTI, volume files, PNG/JPEG -> `MedicalImage` in the canonical
orientation.

One module per format, each an `ImageReader` (`base`): `verify_suffix(path)` says whether it takes a
path, `read(path)` parses and checks the file, `get_data(raw)` decodes it. `load_image` is the one
dispatcher: the first reader of `READERS` that accepts the path reads it. `read_in_memory` (`in_memory`)
reads what pydicom, nibabel or MONAI already loaded with the same readers.

Every failure raises a `MedicalImageError` subclass naming the file; nothing returns a blank
image. No identifying DICOM value is copied into the result or into an error message.

Hostile input is bounded: compressed data (gzip-wrapped DICOM, deflated DICOM, .nii.gz) is
inflated only up to `ReaderOptions.max_image_bytes`, headers claiming more pixel data than that
are refused before anything is allocated, and DICOM parsing stops after
`ReaderOptions.max_dicom_elements` elements (damaged files can make pydicom read millions of
empty elements)."""

from __future__ import annotations

import logging
from pathlib import Path

from ...errors import UnreadableImageError, UnsupportedImageError
from ..geometry import MedicalImage
from .base import (
    DEFAULT_MAX_DICOM_ELEMENTS,
    DEFAULT_MAX_IMAGE_BYTES,
    DEFLATE_MAX_RATIO,
    GZIP_MAGIC,
    MAX_SPACING_MM,
    MIN_SPACING_MM,
    SPACING_RULE,
    UNEXPECTED_ERROR,
    ImageReader,
    ReaderOptions,
    _typed_errors,
    finish_image,
)
from .dicom import DicomFileReader, assemble_volume, read_dicom_file
from .dicom_dataset import (
    DEFLATED_SYNTAX,
    EXPLICIT_LITTLE_SYNTAX,
    PIXEL_DATA_TAGS,
    _file_meta_layout,  # noqa: F401 (the reader fuzz tests build files with it)
    read_dicom_dataset,
)
from .dicom_pixels import PIXEL_DATA_KEYWORDS
from .dicom_series import DicomSeriesReader, list_dicom_series, read_dicom_series
from .in_memory import InMemoryImage, is_in_memory_image, read_in_memory
from .nifti import NIFTI_SUFFIXES, NiftiReader, VolumeHeader, read_nifti
from .raster import RASTER_SUFFIXES, RasterReader, from_pil_image, read_raster
from .volume_file import (
    VOLUME_FILE_FORMAT,
    VOLUME_FILE_SUFFIX,
    VolumeFileReader,
    read_volume_file,
    volume_file_image,
    write_volume_file,
)

# The parent of every reader module's logger (each logs its notes at INFO, debug details at DEBUG).
logger = logging.getLogger(__name__)

# In the order `load_image` asks them: a folder is a series whatever its name; DICOM files have no
# fixed suffix, so the DICOM file reader takes what no other format claims and checks the content.
READERS: tuple[type[ImageReader], ...] = (
    DicomSeriesReader,
    NiftiReader,
    VolumeFileReader,
    RasterReader,
    DicomFileReader,
)


@_typed_errors
def load_image(path: str | Path, options: ReaderOptions | None = None) -> MedicalImage:
    """Read any supported input: a DICOM file or series folder, a NIfTI file, a PNG/JPEG."""
    options = options or ReaderOptions()
    path = Path(path)
    if not path.exists():
        raise UnreadableImageError(path, "no such file or folder")
    for reader_type in READERS:
        reader = reader_type(options)
        if reader.verify_suffix(path):
            return reader.load(path)
    raise UnsupportedImageError(path, "unsupported format; convert it to NIfTI (.nii/.nii.gz) or DICOM")


__all__ = [
    "DEFAULT_MAX_DICOM_ELEMENTS",
    "DEFAULT_MAX_IMAGE_BYTES",
    "DEFLATED_SYNTAX",
    "DEFLATE_MAX_RATIO",
    "EXPLICIT_LITTLE_SYNTAX",
    "GZIP_MAGIC",
    "MAX_SPACING_MM",
    "MIN_SPACING_MM",
    "NIFTI_SUFFIXES",
    "PIXEL_DATA_KEYWORDS",
    "PIXEL_DATA_TAGS",
    "RASTER_SUFFIXES",
    "READERS",
    "SPACING_RULE",
    "UNEXPECTED_ERROR",
    "VOLUME_FILE_FORMAT",
    "VOLUME_FILE_SUFFIX",
    "DicomFileReader",
    "DicomSeriesReader",
    "ImageReader",
    "InMemoryImage",
    "NiftiReader",
    "RasterReader",
    "ReaderOptions",
    "VolumeFileReader",
    "VolumeHeader",
    "assemble_volume",
    "finish_image",
    "from_pil_image",
    "is_in_memory_image",
    "list_dicom_series",
    "load_image",
    "read_dicom_dataset",
    "read_dicom_file",
    "read_dicom_series",
    "read_in_memory",
    "read_nifti",
    "read_raster",
    "read_volume_file",
    "volume_file_image",
    "write_volume_file",
]
