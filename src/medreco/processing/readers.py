"""Readers: DICOM files and series, NIfTI, PNG/JPEG -> `MedicalImage` in the canonical orientation.

Every failure raises a `MedicalImageError` subclass naming the file; nothing returns a blank
image. No identifying DICOM value is copied into the result or into an error message.

Hostile input is bounded: compressed data (gzip-wrapped DICOM, deflated DICOM, .nii.gz) is
inflated only up to `ReaderOptions.max_image_bytes`, headers claiming more pixel data than that
are refused before anything is allocated, and DICOM parsing stops after
`ReaderOptions.max_dicom_elements` elements (damaged files can make pydicom read millions of
empty elements)."""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
import logging
import math
import re
import struct
import threading
import warnings
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Literal, TypeVar

import nibabel as nib
import numpy as np
import pydicom
import pydicom.filereader
from nibabel.openers import ImageOpener
from pydicom.pixels import apply_color_lut, apply_modality_lut

from ..atomic import write_text_atomically
from ..errors import (
    DuplicateSliceError,
    ImageTooLargeError,
    InconsistentGeometryError,
    InvalidPixelDataError,
    InvalidSpacingError,
    MedicalImageError,
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
VOLUME_FILE_SUFFIX = ".volume.json"  # a NIfTI volume with the geometry and rescale to use (`read_volume_file`)
VOLUME_FILE_FORMAT = "medreco.volume/1"
RASTER_SUFFIXES = (".png", ".jpg", ".jpeg")
PIXEL_DATA_KEYWORDS = ("PixelData", "FloatPixelData", "DoubleFloatPixelData")
PIXEL_DATA_TAGS = (0x7FE00008, 0x7FE00009, 0x7FE00010)

# A whole-body CT of 2000 slices of 512x512 int16 is 1 GiB; twice that covers every real single image.
DEFAULT_MAX_IMAGE_BYTES = 2 * 1024**3
# An enhanced multi-frame CT of 2,000 frames holds ~80,000 elements; refusing past 250,000 takes < 5 s.
DEFAULT_MAX_DICOM_ELEMENTS = 250_000

# Spacing outside these bounds (mm) is damage: whole-slide microscopy pixels are ~2.5e-4 mm.
MIN_SPACING_MM, MAX_SPACING_MM = 1e-6, 1e5
SPACING_RULE = f"spacing must be positive and finite (between {MIN_SPACING_MM:g} and {MAX_SPACING_MM:g} mm)"

GZIP_MAGIC = b"\x1f\x8b"
DEFLATE_MAX_RATIO = 1032  # the most one byte of DEFLATE data can inflate to
DEFLATED_SYNTAX = b"1.2.840.10008.1.2.1.99"
EXPLICIT_LITTLE_SYNTAX = b"1.2.840.10008.1.2.1"
_INFLATE_CHUNK = 1 << 20
_LONG_LENGTH_VRS = {b"OB", b"OD", b"OF", b"OL", b"OV", b"OW", b"SQ", b"SV", b"UC", b"UN", b"UR", b"UT", b"UV"}


@dataclass
class ReaderOptions:
    """How strict the readers are and which part of a multi-part input to take.

    series: in a folder with several DICOM series, which one to read: its SeriesNumber (an int or
      a string of digits), its SeriesInstanceUID or the start of it, or the `key:...` selector that
      `list_dicom_series` and `MultipleSeriesError` show for each series (a hash of the UID, which
      identifies no one and tells apart series without a SeriesNumber), or its SeriesDescription
      ("AX FLAIR"), or words of it ("FLAIR", "T2": the series whose description holds them as words).
    volume_index: for 4D NIfTI, the volume to read (4D input is refused otherwise); for an
      ultrasound cine loop (multi-frame US), the frame to read (the middle frame by default).
    nan_policy: "raise" on NaN/inf values (default), or "zero" to replace them with the
      image minimum and record a warning.
    slice_spacing_tolerance: relative deviation of a slice step from the median step above which
      a series is "unevenly spaced"; a step over 1.5x the median is a missing slice.
    allow_uneven_spacing: accept unevenly spaced series (the median step is used, with a warning).
    max_image_bytes: the most bytes of uncompressed pixel data one image may hold, and the most a
      compressed file (gzip, deflated DICOM, .nii.gz) may inflate to; 2 GiB by default (a
      whole-body CT of 2000 512x512 int16 slices is 1 GiB). Larger input is refused before it is
      inflated or allocated, which stops decompression bombs and damaged headers quickly.
    max_dicom_elements: the most data elements one DICOM file may hold (250,000, counted as about
      two of pydicom's reads each; an enhanced multi-frame CT of 2,000 frames holds ~80,000).
      Damaged files can make pydicom read millions of empty elements, for minutes; they are refused
      once past the limit, within a few seconds.
    """

    series: int | str | None = None
    volume_index: int | None = None
    nan_policy: Literal["raise", "zero"] = "raise"
    slice_spacing_tolerance: float = 0.1
    allow_uneven_spacing: bool = False
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES
    max_dicom_elements: int = DEFAULT_MAX_DICOM_ELEMENTS


_Reader = TypeVar("_Reader", bound=Callable[..., object])


def _typed_errors(reader: _Reader) -> _Reader:
    """Wraps a public reader: pydicom's warnings and log records (damaged values, decoder tracebacks)
    are kept from the user, and, as a last line of defence, an exception the reader did not anticipate
    becomes an `UnreadableImageError` naming the file (the traceback goes to the debug log)."""

    @functools.wraps(reader)
    def guarded(*args, **kwargs):
        path = args[0] if args else kwargs.get("path", kwargs.get("folder"))
        try:
            with warnings.catch_warnings(), _LIBRARY_LOGS.capture(Path(str(path))):
                warnings.simplefilter("ignore")
                return reader(*args, **kwargs)
        except MedicalImageError:
            raise
        except MemoryError:
            raise ImageTooLargeError(path, "not enough memory to hold this image") from None
        except RecursionError:
            raise UnreadableImageError(path, "corrupt file (nesting too deep to read)") from None
        except Exception as error:
            logger.debug("unexpected error reading %s", path, exc_info=True)
            raise UnreadableImageError(
                path, f"{UNEXPECTED_ERROR} ({type(error).__name__}): the file is probably damaged"
            ) from None

    return guarded  # type: ignore[return-value]


UNEXPECTED_ERROR = "unexpected error while reading"


@_typed_errors
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
    if name.endswith(VOLUME_FILE_SUFFIX):
        return read_volume_file(path, options)
    if name.endswith(RASTER_SUFFIXES):
        return read_raster(path, options)
    if name.endswith((".hdr", ".img", ".mgz", ".nrrd", ".mha", ".mhd")):
        raise UnsupportedImageError(path, "unsupported format; convert it to NIfTI (.nii/.nii.gz) or DICOM")
    return read_dicom_file(path, options)


# ------------------------------------------------------------------------------ pydicom's logging


class _LibraryLogCapture(logging.Filter):
    """Diverts pydicom's and nibabel's log records (pydicom's decoders log tracebacks before raising,
    nibabel logs the header fields it repairs) into a list while a reader runs in this thread, so that
    only the reader's typed error reaches the user. They go to the debug log."""

    libraries = ("pydicom", "nibabel")

    def __init__(self) -> None:
        super().__init__()
        self._local = threading.local()
        self._known_loggers = -1

    def filter(self, record: logging.LogRecord) -> bool:
        captured = getattr(self._local, "records", None)
        if captured is None:
            return True
        captured.append(record)
        return False

    def _install(self) -> None:
        names = list(logging.Logger.manager.loggerDict)
        if len(names) == self._known_loggers:
            return
        for name in [*self.libraries, *names]:
            if name.split(".")[0] in self.libraries:
                target = logging.getLogger(name)
                if self not in target.filters:
                    target.addFilter(self)
        self._known_loggers = len(names)

    @contextmanager
    def capture(self, source: Path) -> Iterator[list[logging.LogRecord]]:
        self._install()
        previous = getattr(self._local, "records", None)
        records: list[logging.LogRecord] = []
        self._local.records = records
        try:
            yield records
        finally:
            self._local.records = previous
            for record in records:
                logger.debug("%s: %s said: %s", source, record.name, record.getMessage().split("\n")[0])


_LIBRARY_LOGS = _LibraryLogCapture()


# ------------------------------------------------------------------------------------ DICOM bytes


class _ParseBudgetExceeded(Exception):
    """More reads than a real DICOM file needs: a damaged file full of empty elements."""


class _CorruptDicom(Exception):
    """An element that cannot stand where it stands (command or item tags at the top level)."""


class _BoundedReader:
    """A read-only stream for pydicom that counts reads (pydicom reads each element's header and value
    separately) and clamps each read to the bytes left, so that a damaged length field never makes
    Python allocate gigabytes for a short file."""

    def __init__(self, raw: BinaryIO, size: int, max_reads: int, name: str):
        self._raw = raw
        self._size = size
        self._reads_left = max_reads
        self.exhausted = False
        self.truncated = False
        self.name = name

    def read(self, size: int | None = -1) -> bytes:
        self._reads_left -= 1
        if self._reads_left < 0:
            self.exhausted = True
            raise _ParseBudgetExceeded
        if size is None or size < 0:
            return self._raw.read()
        data = self._raw.read(max(0, min(size, self._size - self._raw.tell())))
        if len(data) < size and (data or size > 8):  # not the 8-byte probe for another element at the end
            self.truncated = True
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._raw.seek(offset, whence)

    def tell(self) -> int:
        return self._raw.tell()

    def close(self) -> None:
        self._raw.close()


class _TopLevelGuard:
    """`stop_when` for pydicom's top-level data set: stops before the pixel data for header scans, and at
    an element that cannot be at the top level (group 0000, or an item tag): after the pixel data these
    are trailing bytes to ignore (e.g. zero padding); before it the file is corrupt."""

    def __init__(self, stop_before_pixels: bool, notes: list[str]):
        self.stop_before_pixels = stop_before_pixels
        self.notes = notes
        self.pixels_read = False

    def __call__(self, tag: int, vr: str | None, length: int) -> bool:
        if tag in PIXEL_DATA_TAGS:
            if self.stop_before_pixels:
                return True
            self.pixels_read = True
            return False
        group = tag >> 16
        if group in (0x0000, 0xFFFE):
            if self.pixels_read:
                self.notes.append("bytes after the pixel data that are no DICOM elements were ignored")
                return True
            raise _CorruptDicom(f"corrupt DICOM file (element ({group:04X},{tag & 0xFFFF:04X}) in the data set)")
        return False


def _looks_like_dicom(head: bytes) -> bool:
    """A DICOM file: the 128-byte preamble and "DICM", or (without them) a first element of the file meta
    group (0002) or the identifying group (0008), in either byte order."""
    if head[128:132] == b"DICM":
        return True
    if len(head) < 8:
        return False
    return struct.unpack("<H", head[:2])[0] in (0x0002, 0x0008) or struct.unpack(">H", head[:2])[0] == 0x0008


def _inflate_gzip(path: Path, limit: int) -> io.BytesIO:
    """A gzip-compressed DICOM file's bytes, inflated chunk by chunk: refused as soon as the first chunk
    shows no DICOM, or the output passes `limit` bytes (a decompression bomb stops there)."""
    output = io.BytesIO()
    try:
        with gzip.open(path, "rb") as handle:
            while chunk := handle.read(_INFLATE_CHUNK):
                if output.tell() == 0 and not _looks_like_dicom(chunk[:132]):
                    raise UnreadableImageError(path, "not a DICOM file (gzip-compressed data of another kind)")
                output.write(chunk)
                if output.tell() > limit:
                    raise ImageTooLargeError(
                        path,
                        f"gzip data inflating to more than {_size_text(limit)}, the reader's limit "
                        "(a decompression bomb?); ReaderOptions(max_image_bytes=...) raises it",
                    )
    except (OSError, EOFError, zlib.error) as error:
        raise UnreadableImageError(path, f"truncated or corrupt gzip file ({type(error).__name__})") from None
    output.seek(0)
    return output


def _file_meta_layout(stream: BinaryIO, start: int) -> tuple[int, int | None, bytes | None]:
    """Where the file meta group (0002,xxxx, explicit VR little endian) that begins at `start` ends,
    and the offset and bytes of its TransferSyntaxUID value (None when there is none)."""
    position, syntax_at, syntax = start, None, None
    stream.seek(start)
    for _ in range(1000):  # a file meta group holds about ten elements
        header = stream.read(8)
        if len(header) < 8 or struct.unpack("<H", header[:2])[0] != 0x0002:
            break
        element, vr = struct.unpack("<H", header[2:4])[0], header[4:6]
        if vr in _LONG_LENGTH_VRS:
            extra = stream.read(4)
            if len(extra) < 4:
                break
            length, value_at = struct.unpack("<I", extra)[0], position + 12
        else:
            length, value_at = struct.unpack("<H", header[6:8])[0], position + 8
        if element == 0x0010 and length <= 64:
            syntax_at, syntax = value_at, stream.read(length)
        position = value_at + length
        stream.seek(position)
    return position, syntax_at, syntax


def _inflate_deflated_dataset(
    path: Path, data: bytes, meta_end: int, syntax_at: int, syntax_length: int, limit: int
) -> io.BytesIO:
    """A "Deflated Explicit VR Little Endian" file rewritten as plain explicit VR little endian: the data
    set inflated (here, with the size limit, instead of unbounded in pydicom) and the file meta's
    transfer syntax replaced in place (NUL-padded to the same length, so no length changes)."""
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    pieces, total = [], 0
    remaining = data[meta_end:]
    try:
        while not inflater.eof:
            piece = inflater.decompress(remaining, _INFLATE_CHUNK)
            remaining = inflater.unconsumed_tail
            if not piece:
                break  # the stream ends early: pydicom reports what is missing
            pieces.append(piece)
            total += len(piece)
            if total > limit:
                raise ImageTooLargeError(
                    path,
                    f"deflated data set inflating to more than {_size_text(limit)}, the reader's limit; "
                    "ReaderOptions(max_image_bytes=...) raises it",
                )
    except zlib.error:
        raise UnreadableImageError(path, "corrupt deflated DICOM data set") from None
    syntax = EXPLICIT_LITTLE_SYNTAX.ljust(syntax_length, b"\0")
    header = data[:syntax_at] + syntax + data[syntax_at + syntax_length : meta_end]
    return io.BytesIO(header + b"".join(pieces))


def _dicom_stream(path: Path, options: ReaderOptions) -> tuple[BinaryIO, int, bool]:
    """The bytes pydicom is to parse, as a seekable stream (a gzip-compressed file inflated, a deflated
    data set inflated), its size, and whether it starts with the DICOM preamble. Non-DICOM bytes are
    refused here, before pydicom spends time on them."""
    try:
        with open(path, "rb") as handle:
            magic = handle.read(2)
    except OSError as error:
        raise UnreadableImageError(path, f"cannot open the file ({error.strerror or type(error).__name__})") from None
    if magic == GZIP_MAGIC:
        stream: BinaryIO = _inflate_gzip(path, options.max_image_bytes)
    else:
        stream = open(path, "rb")  # noqa: SIM115 (closed by the caller)
    try:
        size = stream.seek(0, io.SEEK_END)
        stream.seek(0)
        head = stream.read(132)
        if not _looks_like_dicom(head):
            raise UnreadableImageError(path, "not a DICOM file")
        has_preamble = head[128:132] == b"DICM"
        meta_start = 132 if has_preamble else 0
        meta_end, syntax_at, syntax = _file_meta_layout(stream, meta_start)
        stream.seek(meta_end)
        if stream.read(8) == bytes(8) and size - meta_end >= 8:
            raise UnreadableImageError(path, "corrupt DICOM file (zero bytes where the data set should begin)")
        if syntax is not None and syntax_at is not None and syntax.rstrip(b"\0 ") == DEFLATED_SYNTAX:
            stream.seek(0)
            data = stream.read()
            stream.close()
            stream = _inflate_deflated_dataset(path, data, meta_end, syntax_at, len(syntax), options.max_image_bytes)
            size = len(stream.getvalue())
        stream.seek(0)
        return stream, size, has_preamble
    except BaseException:
        stream.close()
        raise


def _too_many_elements(options: ReaderOptions) -> str:
    return (
        f"corrupt DICOM file (more than {options.max_dicom_elements:,} elements); if it is real, "
        "ReaderOptions(max_dicom_elements=...) raises the limit"
    )


@_typed_errors
def read_dicom_dataset(
    path: str | Path,
    stop_before_pixels: bool = False,
    options: ReaderOptions | None = None,
    notes: list[str] | None = None,
) -> pydicom.Dataset:
    """Parse a DICOM file (optionally gzip-compressed or with a deflated data set); files without the
    128-byte preamble are accepted when they hold image attributes. Notes about the file (ignored
    trailing bytes) are appended to `notes`."""
    options = options or ReaderOptions()
    path = Path(path)
    notes = [] if notes is None else notes
    stream, size, has_preamble = _dicom_stream(path, options)
    reader = _BoundedReader(stream, size, 2 * options.max_dicom_elements, str(path))
    try:
        with warnings.catch_warnings(), _LIBRARY_LOGS.capture(path):
            warnings.simplefilter("ignore")
            dataset = pydicom.filereader.read_partial(
                reader, stop_when=_TopLevelGuard(stop_before_pixels, notes), force=True
            )
    except _ParseBudgetExceeded:
        raise UnreadableImageError(path, _too_many_elements(options)) from None
    except _CorruptDicom as error:
        raise UnreadableImageError(path, str(error)) from None
    except Exception as error:  # pydicom raises many types on truncated or corrupt files
        if reader.exhausted:  # pydicom turned the exhausted budget into another exception
            raise UnreadableImageError(path, _too_many_elements(options)) from None
        raise UnreadableImageError(path, f"truncated or corrupt DICOM file ({type(error).__name__})") from None
    finally:
        stream.close()
    if reader.truncated:
        raise UnreadableImageError(path, "truncated DICOM file (it ends inside a data element)")
    dataset.buffer = None  # the parsed values are copies; let the (possibly inflated) bytes go
    if has_preamble:
        return dataset
    if "SOPClassUID" in dataset:
        if "Rows" in dataset and "Columns" in dataset:
            return dataset
        raise UnsupportedImageError(path, "a DICOM object without a file header or image attributes, not an image")
    raise UnreadableImageError(path, "not a DICOM file")


# ------------------------------------------------------------------------------ DICOM attributes


def _attribute(dataset: pydicom.Dataset, keyword: str, default=None):
    """An attribute's value; `default` when absent, empty, or not decodable (a damaged raw value)."""
    try:
        value = dataset.get(keyword, default)
    except Exception:  # pydicom converts raw values on access and raises many types on damaged ones
        return default
    if value is None or (isinstance(value, (str, bytes, list, pydicom.multival.MultiValue)) and len(value) == 0):
        return default
    return value


def _int_attribute(dataset: pydicom.Dataset, keyword: str, default: int | None = None) -> int | None:
    value = _attribute(dataset, keyword)
    if isinstance(value, pydicom.multival.MultiValue):
        value = value[0] if len(value) else None
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError, OverflowError):
        return default


def _float_list(value, count: int) -> np.ndarray | None:
    try:
        values = value if isinstance(value, (list, tuple, pydicom.multival.MultiValue)) else [value]
        array = np.array([float(v) for v in values], dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        return None
    return array if array.shape == (count,) and np.all(np.isfinite(array)) else None


def _shown(value) -> str:
    """A spacing value as it appears in the file, for an error message."""
    if isinstance(value, (list, tuple, pydicom.multival.MultiValue)):
        text = "\\".join(str(v) for v in value)
    else:
        text = str(value)
    return repr(text if len(text) <= 60 else text[:57] + "...")


def _spacing_values(value, count: int, name: str, where: Path) -> np.ndarray:
    """Validated spacing values: `count` positive finite millimetres, else `InvalidSpacingError`."""
    values = value if isinstance(value, (list, tuple, pydicom.multival.MultiValue)) else [value]
    try:
        array = np.array([float(v) for v in values], dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise InvalidSpacingError(where, f"{name} {_shown(value)} is not a number") from None
    if array.shape != (count,):
        raise InvalidSpacingError(where, f"{name} {_shown(value)} has {array.size} value(s), not {count}")
    if not _plausible_spacing(array):
        raise InvalidSpacingError(where, f"{name} {_shown(value)}: {SPACING_RULE}")
    return array


def _plausible_spacing(values: np.ndarray) -> bool:
    """Positive, finite, and within what any imaging device produces (0.001 um to 100 m)."""
    values = np.asarray(values, dtype=np.float64)
    return bool(np.all(np.isfinite(values)) and np.all(values >= MIN_SPACING_MM) and np.all(values <= MAX_SPACING_MM))


def _canonical(array: np.ndarray, affine: np.ndarray, where: Path) -> tuple[np.ndarray, np.ndarray]:
    """`to_canonical`, with a degenerate affine (axes nibabel cannot tell apart) as a typed error."""
    try:
        return to_canonical(array, affine)
    except ValueError:
        raise InvalidSpacingError(where, "degenerate image axes (an affine or spacing no scanner writes)") from None


def _functional_group(dataset: pydicom.Dataset, sequence: str, item: str, frame: int | None = None):
    """A value from the enhanced multi-frame functional groups (per-frame first, then shared)."""
    groups = []
    per_frame = _attribute(dataset, "PerFrameFunctionalGroupsSequence")
    if frame is not None and per_frame is not None and frame < len(per_frame):
        groups.append(per_frame[frame])
    shared = _attribute(dataset, "SharedFunctionalGroupsSequence")
    if shared is not None and len(shared):
        groups.append(shared[0])
    for group in groups:
        items = _attribute(group, sequence)
        if items is not None and len(items) and (value := _attribute(items[0], item)) is not None:
            return value
    return None


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


def _check_pixel_size(dataset: pydicom.Dataset, path: Path, options: ReaderOptions) -> None:
    """Refuse an image whose header claims more pixel data than `max_image_bytes`, before decoding."""
    rows, columns = _int_attribute(dataset, "Rows"), _int_attribute(dataset, "Columns")
    if rows is None or columns is None:
        raise UnreadableImageError(path, "pixel data without a valid Rows and Columns in the header")
    if rows <= 0 or columns <= 0:
        raise UnreadableImageError(path, f"invalid image size {rows}x{columns} in the header")
    frames = max(_int_attribute(dataset, "NumberOfFrames", 1) or 1, 1)
    samples = max(_int_attribute(dataset, "SamplesPerPixel", 1) or 1, 1)
    bits = max(_int_attribute(dataset, "BitsAllocated", 16) or 16, 1)
    claimed = rows * columns * frames * samples * math.ceil(bits / 8)
    if claimed > options.max_image_bytes:
        raise ImageTooLargeError(
            path,
            f"the header claims {frames} frame(s) of {rows}x{columns} pixels ({_size_text(claimed)}), more than the "
            f"reader's limit of {_size_text(options.max_image_bytes)}; ReaderOptions(max_image_bytes=...) raises it",
        )


def _size_text(size: int) -> str:
    return f"{size / 1024**3:.1f} GiB" if size >= 1024**3 else f"{size / 1024**2:.1f} MiB"


def _transfer_syntax_name(dataset: pydicom.Dataset) -> str:
    syntax = getattr(getattr(dataset, "file_meta", None), "TransferSyntaxUID", None)
    return getattr(syntax, "name", None) or "this"


def _codec_hint(dataset: pydicom.Dataset) -> str:
    """What to install to decode this transfer syntax."""
    syntax = getattr(getattr(dataset, "file_meta", None), "TransferSyntaxUID", None)
    if syntax in pydicom.uid.JPEGLSTransferSyntaxes:
        return 'install pyjpegls, or pylibjpeg with pylibjpeg-libjpeg (pip install "medreco[codecs]"), or python-gdcm'
    if syntax in pydicom.uid.JPEG2000TransferSyntaxes:
        return 'install pylibjpeg with pylibjpeg-openjpeg (pip install "medreco[codecs]"), or python-gdcm'
    return 'install pylibjpeg with pylibjpeg-libjpeg (pip install "medreco[codecs]"), or python-gdcm'


def _decoder_error(error: RuntimeError, dataset: pydicom.Dataset, path: Path, records: list) -> MedicalImageError:
    """pydicom's "no plugin could decode this" as a typed error: a missing or insufficient decoder
    (with what to install) or a corrupt stream (with each decoder's reason)."""
    message = str(error)
    reasons = [line.strip() for line in message.splitlines()[1:] if line.strip()]
    syntax = _transfer_syntax_name(dataset)
    if "missing dependencies" in message:
        return MissingCodecError(
            path, f"{syntax} pixel data needs a decoder that is not installed ({'; '.join(reasons)})"
        )
    unsupported = [r for r in reasons if "does not support" in r or "not supported" in r or "unsupported" in r]
    if unsupported:
        return MissingCodecError(
            path, f"{syntax} pixel data needs another decoder ({'; '.join(unsupported)}): {_codec_hint(dataset)}"
        )
    if not reasons:
        reasons = [r.getMessage().split("\n")[0] for r in records if r.levelno >= logging.ERROR][:3]
    detail = f": {'; '.join(reasons)[:300]}" if reasons else ""
    return UnreadableImageError(path, f"cannot decode the {syntax} pixel data (corrupt or unsupported stream{detail})")


def _rescale(dataset: pydicom.Dataset, path: Path) -> tuple[float, float]:
    """RescaleSlope and RescaleIntercept (1 and 0 when absent), refused when not finite numbers."""
    values = []
    for keyword, default in (("RescaleSlope", 1.0), ("RescaleIntercept", 0.0)):
        value = _attribute(dataset, keyword)
        try:
            number = default if value is None else float(value)
        except (TypeError, ValueError, OverflowError):
            raise InvalidPixelDataError(path, f"{keyword} {_shown(value)} is not a number") from None
        if not math.isfinite(number):
            raise InvalidPixelDataError(path, f"{keyword} {_shown(value)} is not a finite number")
        values.append(number)
    slope, intercept = values
    return (slope or 1.0), intercept


def _decode_pixels(dataset: pydicom.Dataset, path: Path, notes: list[str], options: ReaderOptions) -> np.ndarray:
    """The modality values (rescaled, e.g. HU) of every frame, as float32, in the file's own value space:
    MONOCHROME1 is not inverted here (see `_display_convention`)."""
    if not any(keyword in dataset for keyword in PIXEL_DATA_KEYWORDS):
        kind = _attribute(dataset, "Modality") or "non-image"
        raise UnsupportedImageError(path, f"no pixel data (a {kind} object, not an image)")
    image_type = _attribute(dataset, "ImageType") or []
    if "MOSAIC" in [str(v).upper() for v in (image_type if not isinstance(image_type, str) else [image_type])]:
        raise UnsupportedImageError(
            path, "a Siemens mosaic (slices tiled in one image); convert it with dcm2niix first"
        )
    _check_pixel_size(dataset, path, options)
    with warnings.catch_warnings(record=True) as caught, _LIBRARY_LOGS.capture(path) as records:
        warnings.simplefilter("always")
        try:
            pixels = dataset.pixel_array
        except RuntimeError as error:
            raise _decoder_error(error, dataset, path, records) from None
        except MemoryError:
            raise ImageTooLargeError(path, "not enough memory to decode the pixel data") from None
        except Exception as error:  # pydicom's pixel handlers raise many types on damaged headers or data
            problem = str(error).split("\n")[0][:300]
            raise UnreadableImageError(path, f"pixel data cannot be read ({type(error).__name__}: {problem})") from None
    notes.extend(str(w.message).split("\n")[0] for w in caught if not issubclass(w.category, DeprecationWarning))
    photometric = _photometric(dataset)
    samples = _int_attribute(dataset, "SamplesPerPixel", 1) or 1
    with np.errstate(over="ignore", invalid="ignore"):
        if photometric == "PALETTE COLOR":
            try:
                pixels = apply_color_lut(pixels, dataset)
            except Exception as error:  # a damaged palette: pydicom raises several types
                raise UnreadableImageError(path, f"unusable colour palette ({type(error).__name__})") from None
            if pixels.dtype.itemsize > 1 and pixels.size and int(pixels.max()) > 255:
                # 16-bit palette entries: to the 8-bit scale of RGB images, so that an image stored
                # with a palette and the same image stored as RGB read alike
                pixels = pixels.astype(np.float32) / np.float32(257.0)
        if samples > 1 or photometric == "PALETTE COLOR":
            if pixels.shape[-1] != 3:
                raise UnreadableImageError(path, f"colour pixel array of shape {pixels.shape}, not RGB")
            pixels = pixels.astype(np.float32) @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
            notes.append(f"{photometric} colour converted to greyscale luminance")
        elif "ModalityLUTSequence" not in dataset:
            # the common linear rescale, in float32 (pydicom's general path works in float64)
            slope, intercept = _rescale(dataset, path)
            pixels = pixels.astype(np.float32)
            if slope != 1.0:
                pixels *= slope
            if intercept != 0.0:
                pixels += intercept
        else:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    pixels = apply_modality_lut(pixels, dataset)
            except Exception as error:  # a damaged modality LUT: pydicom raises several types
                raise UnreadableImageError(path, f"unusable modality LUT ({type(error).__name__})") from None
        return np.asarray(pixels, dtype=np.float32)


def _photometric(dataset: pydicom.Dataset) -> str:
    return str(_attribute(dataset, "PhotometricInterpretation", "MONOCHROME2")).strip().upper()


def _display_window(dataset: pydicom.Dataset) -> tuple[float, float] | None:
    """The file's first VOI window (WindowCenter/WindowWidth) as (low, high) = centre -/+ width/2, in the
    file's own modality (rescaled) values, before any MONOCHROME1 inversion. A VOI LUT sequence is not
    used (such images are normalised by percentiles)."""
    center, width = _attribute(dataset, "WindowCenter"), _attribute(dataset, "WindowWidth")
    if center is None or width is None:
        return None
    center = center[0] if isinstance(center, pydicom.multival.MultiValue) else center
    width = width[0] if isinstance(width, pydicom.multival.MultiValue) else width
    try:
        center, width = float(center), float(width)
    except (TypeError, ValueError, OverflowError):
        return None
    if not (math.isfinite(center) and math.isfinite(width)) or width <= 0:
        return None
    return center - width / 2, center + width / 2


def _monochrome1_mirror(dataset: pydicom.Dataset, volume: np.ndarray, path: Path) -> float:
    """The constant c of the MONOCHROME1 inversion v -> c - v: the sum of the smallest and largest value
    the stored bits can encode, rescaled (4095 for unsigned 12-bit data). It comes from the header, so
    every slice of a series is inverted alike; without usable bit depths, the data's own min + max."""
    bits = _int_attribute(dataset, "BitsStored") or _int_attribute(dataset, "BitsAllocated")
    if bits is not None and 1 <= bits <= 32 and "ModalityLUTSequence" not in dataset and "PixelData" in dataset:
        signed = _int_attribute(dataset, "PixelRepresentation", 0) == 1
        lowest, highest = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
        slope, intercept = _rescale(dataset, path)
        mirror = slope * (lowest + highest) + 2 * intercept
    else:
        finite = volume[np.isfinite(volume)]
        mirror = float(finite.min()) + float(finite.max()) if finite.size else 0.0
    return float(np.float32(mirror))  # the values and the window are mirrored by the same float32 number


def _display_convention(
    volume: np.ndarray, dataset: pydicom.Dataset, notes: list[str], path: Path
) -> tuple[np.ndarray, tuple[float, float] | None]:
    """The volume with higher values brighter, and the file's VOI window in the same values.

    DICOM applies the VOI window to the modality values, in the file's own value space, and shows a
    MONOCHROME1 image's minimum as white only after that (PS3.3 C.7.6.3.1.2; the pipeline of PS3.4
    N.2). Inverting the values as v -> c - v therefore inverts the window with them: [low, high] ->
    [c - high, c - low]. A MONOCHROME2 image and its MONOCHROME1 twin (storing c - v, window centre
    c - centre, same width), which every viewer shows alike, normalise to the same tensor."""
    window = _display_window(dataset)
    if _photometric(dataset) != "MONOCHROME1":
        return volume, window
    mirror = _monochrome1_mirror(dataset, volume, path)
    with np.errstate(over="ignore", invalid="ignore"):
        volume = (np.float32(mirror) - volume).astype(np.float32)
    if window is not None:
        window = (mirror - window[1], mirror - window[0])
    notes.append("MONOCHROME1 inverted so that higher values are brighter (its display window with it)")
    return volume, window


# ------------------------------------------------------------------------------- DICOM geometry


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


@_typed_errors
def read_dicom_file(path: str | Path, options: ReaderOptions | None = None) -> MedicalImage:
    """One DICOM file: a single image, or a multi-frame object (enhanced CT/MR, RT dose grid, cine)."""
    options = options or ReaderOptions()
    path = Path(path)
    notes: list[str] = []
    dataset = read_dicom_dataset(path, options=options, notes=notes)
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
        # A projection image (radiograph, ultrasound, secondary capture) or frames without positions.
        volume = pixels
        if frames > 1 and modality == "US":
            volume = pixels[_cine_frame(frames, options, path, notes)][None]
        elif frames > 1:
            notes.append(f"{frames} frames carry no patient positions (cine or stack?): kept in file order")
        known = pixel_spacing is not None
        if not known:
            notes.append("no pixel spacing in the file: 1 mm assumed")
            pixel_spacing = np.array([1.0, 1.0])
        elif spacing_source == "ImagerPixelSpacing":
            notes.append("ImagerPixelSpacing (at the detector) used as pixel spacing")
        geometry = ImageGeometry(spacing=(1.0, *map(float, pixel_spacing)), spacing_known=known)
    volume, window = _display_convention(volume, dataset, notes, path)
    return finish_image(volume, geometry, modality, path, _photometric(dataset), notes, options, window)


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


# --------------------------------------------------------------------------------- DICOM series


def _series_key(uid: str) -> str:
    """A selector for a series that identifies no one: the start of a hash of its SeriesInstanceUID."""
    return "key:" + hashlib.sha256(uid.encode()).hexdigest()[:8]


def list_dicom_series(folder: str | Path, options: ReaderOptions | None = None) -> list[dict]:
    """The series in a folder, as `medreco inspect` shows them: series number, modality, description,
    file count, and `selector`, the value of `ReaderOptions(series=...)` that reads it (no UIDs or
    patient data)."""
    series, _, _ = _scan_series(Path(folder), options or ReaderOptions(), headers_only=True)
    return _ordered_summaries(series)


def _ordered_summaries(series: dict[str, tuple[dict, list]]) -> list[dict]:
    summaries = [summary for summary, _ in series.values()]
    return sorted(summaries, key=lambda s: (s["series_number"] is None, s["series_number"] or 0, s["key"]))


def _scan_series(
    folder: Path, options: ReaderOptions, headers_only: bool = False
) -> tuple[dict[str, tuple[dict, list]], list[str], list[str]]:
    """Group a folder's DICOM images by series. Each file is parsed once; pixels are decoded later.
    Files that are not DICOM, or DICOM objects without an image (a DICOMDIR, a report), are skipped.
    Returns the series by SeriesInstanceUID, notes, and "name: problem" of each unreadable file."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith("."))
    groups: dict[str, list[tuple[Path, pydicom.Dataset]]] = defaultdict(list)
    unreadable: list[str] = []
    without_image: list[tuple[Path, str | None]] = []
    for file in files:
        try:
            header = read_dicom_dataset(file, stop_before_pixels=headers_only, options=options)
        except UnreadableImageError as error:
            unreadable.append(f"{file.relative_to(folder)}: {error.problem}")
            continue
        except UnsupportedImageError:
            without_image.append((file, None))
            continue
        uid = str(_attribute(header, "SeriesInstanceUID", "unknown"))
        if _attribute(header, "Rows") is None or _attribute(header, "Columns") is None:
            without_image.append((file, uid))
            continue
        groups[uid].append((file, header))
    not_images = 0
    for file, uid in without_image:  # in an image series, a file without image attributes is damaged
        if uid in groups:
            unreadable.append(f"{file.relative_to(folder)}: damaged (a slice without image attributes)")
        else:
            not_images += 1
    series = {}
    for uid, members in groups.items():
        header = members[0][1]
        summary = {
            "series_number": _int_attribute(header, "SeriesNumber"),
            "modality": str(_attribute(header, "Modality", "")),
            "description": str(_attribute(header, "SeriesDescription", "")),
            "files": len(members),
            "key": _series_key(uid),
        }
        series[uid] = (summary, members)
    numbers = [s["series_number"] for s, _ in series.values()]
    for summary, _ in series.values():
        number = summary["series_number"]
        summary["selector"] = str(number) if number is not None and numbers.count(number) == 1 else summary["key"]
    notes = []
    if unreadable:
        notes.append(f"{len(unreadable)} unreadable or non-DICOM file(s) ignored ({unreadable[0]}, ...)")
    if not_images:
        notes.append(f"{not_images} DICOM file(s) without an image (DICOMDIR, report, ...) ignored")
    return series, notes, unreadable


def _describe_series(summaries: list[dict]) -> str:
    parts = []
    for s in summaries:
        number = "no SeriesNumber" if s["series_number"] is None else f"series {s['series_number']}"
        description = f", {s['description']!r}" if s["description"] else ""
        parts.append(
            f"[{s['selector']}] {number}: {s['modality'] or 'unknown modality'}, {s['files']} file(s){description}"
        )
    return "; ".join(parts)


_SERIES_CHOICE_HINT = (
    "choose one with ReaderOptions(series=...), or --series ... on the command line, giving the value in brackets"
)


def _select_series(series: dict[str, tuple[dict, list]], wanted: int | str, folder: Path) -> tuple[dict, list]:
    """The one series `wanted` names: a SeriesNumber, a SeriesInstanceUID or its start, or a `key:...`."""
    text = str(wanted).strip()
    if isinstance(wanted, bool) or not text:
        raise SeriesError(folder, f"series={wanted!r} is not a series selector")
    if isinstance(wanted, int) or re.fullmatch(r"[+-]?\d+", text):
        number = int(text)
        matches = [uid for uid, (summary, _) in series.items() if summary["series_number"] == number]
        asked = f"series number {number}"
    elif text.lower().startswith("key:"):
        matches = [uid for uid, (summary, _) in series.items() if summary["key"] == text.lower()]
        asked = f"series {text.lower()}"
    elif re.fullmatch(r"[0-9.]+", text):
        matches = [uid for uid in series if uid.startswith(text)]
        asked = "a SeriesInstanceUID starting with the given value"
    else:
        matches, asked = _series_by_description(series, text)
    listing = _ordered_summaries(series)
    if not matches:
        raise SeriesError(folder, f"no {asked} here; found {_describe_series(listing)}")
    if len(matches) > 1:
        chosen = _ordered_summaries({uid: series[uid] for uid in matches})
        raise MultipleSeriesError(
            folder,
            f"{len(matches)} series match {asked}: {_describe_series(chosen)}; {_SERIES_CHOICE_HINT}",
            chosen,
        )
    return series[matches[0]]


def _series_by_description(series: dict[str, tuple[dict, list]], text: str) -> tuple[list[str], str]:
    """Series whose SeriesDescription is `text` (case-insensitive), else those whose description holds
    every word of `text` as a word ("FLAIR" selects "AX FLAIR", "t2 tse" selects "AX T2 TSE")."""
    wanted = text.lower()
    exact = [uid for uid, (summary, _) in series.items() if summary["description"].strip().lower() == wanted]
    if exact:
        return exact, f"series described {text!r}"
    words = set(re.split(r"[\s_\-/]+", wanted)) - {""}
    matches = [
        uid
        for uid, (summary, _) in series.items()
        if words <= set(re.split(r"[\s_\-/]+", summary["description"].lower()))
    ]
    return matches, f"series whose description has the word(s) {text!r}"


@_typed_errors
def read_dicom_series(folder: str | Path, options: ReaderOptions | None = None) -> MedicalImage:
    """A folder of DICOM slices -> one volume, checked for missing, duplicated and uneven slices."""
    options = options or ReaderOptions()
    folder = Path(folder)
    series, notes, unreadable = _scan_series(folder, options)
    if not series:
        raise UnreadableImageError(folder, "no readable DICOM image in this folder")
    if options.series is not None:
        summary, members = _select_series(series, options.series, folder)
    elif len(series) > 1:
        listing = _ordered_summaries(series)
        raise MultipleSeriesError(
            folder,
            f"{len(series)} series in one folder: {_describe_series(listing)}; {_SERIES_CHOICE_HINT}",
            listing,
        )
    else:
        summary, members = next(iter(series.values()))
    if len(members) == 1:
        image = read_dicom_file(members[0][0], options)
        image.source = str(folder)
        image.warnings = notes + image.warnings
        for note in notes:
            logger.info("%s: %s", folder, note)
        return image

    first = members[0][1]
    rows, columns = _int_attribute(first, "Rows", 0), _int_attribute(first, "Columns", 0)
    bits = max(_int_attribute(first, "BitsAllocated", 16) or 16, 1)
    claimed = rows * columns * len(members) * math.ceil(bits / 8)
    if claimed > options.max_image_bytes:
        raise ImageTooLargeError(
            folder,
            f"{len(members)} slices of {rows}x{columns} pixels ({_size_text(claimed)}) exceed the reader's limit of "
            f"{_size_text(options.max_image_bytes)}; ReaderOptions(max_image_bytes=...) raises it",
        )
    orientation = _orientation(_attribute(first, "ImageOrientationPatient"))
    spacing, _ = _pixel_spacing(first, members[0][0])
    if orientation is None or spacing is None:
        raise InconsistentGeometryError(
            folder, "slices lack ImageOrientationPatient or PixelSpacing: cannot place them"
        )
    slices = []
    for file, header in members:
        size = (_int_attribute(header, "Rows", 0), _int_attribute(header, "Columns", 0))
        if size != (rows, columns):
            raise InconsistentGeometryError(file, f"slice size {size[0]}x{size[1]} differs from {rows}x{columns}")
        other = _orientation(_attribute(header, "ImageOrientationPatient"))
        if other is None or not (
            np.allclose(other[0], orientation[0], atol=1e-3) and np.allclose(other[1], orientation[1], atol=1e-3)
        ):
            raise InconsistentGeometryError(file, "slice orientation differs from the rest of the series")
        other_spacing, _ = _pixel_spacing(header, file)
        if other_spacing is None or not np.allclose(other_spacing, spacing, rtol=1e-3):
            raise InconsistentGeometryError(file, "pixel spacing differs from the rest of the series")
        position = _float_list(_attribute(header, "ImagePositionPatient", []), 3)
        if position is None:
            raise InconsistentGeometryError(file, "slice has no ImagePositionPatient")
        slices.append(_Slice(position, None, file))
    frame_notes: list[str] = []
    for item, (_, dataset) in zip(slices, members):
        item.pixels = _decode_pixels(dataset, item.source, frame_notes, options)
        if item.pixels.shape != (rows, columns):
            raise InconsistentGeometryError(item.source, "multi-frame or colour file inside a slice series")
    notes.extend(dict.fromkeys(frame_notes))  # each distinct note once, not once per slice
    try:
        volume, affine = assemble_volume(slices, *orientation, spacing, folder, options, notes)
    except MissingSliceError as error:
        if not unreadable:
            raise
        damaged_first = sorted(unreadable, key=lambda entry: ": not a DICOM file" in entry)
        skipped = f"{len(unreadable)} unreadable file(s) were skipped: {'; '.join(damaged_first[:3])}"
        raise MissingSliceError(folder, f"{error.problem}; a damaged slice? {skipped}") from None
    geometry = ImageGeometry(spacing=spacing_from_affine(affine), affine=affine)
    volume, window = _display_convention(volume, first, notes, members[0][0])
    return finish_image(volume, geometry, summary["modality"], folder, _photometric(first), notes, options, window)


# ------------------------------------------------------------------------------------------- NIfTI


def _nifti_voxel_spacing(image: nib.Nifti1Image, path: Path, spatial_dims: int) -> None:
    """Refuse voxel sizes (pixdim) that are zero, negative, NaN or infinite, as the file states them
    (nibabel's loader silently replaces zeros by 1 and negatives by their absolute value)."""
    with ImageOpener(path) as handle:
        header = type(image.header).from_fileobj(handle, check=False)
    zooms = np.asarray(header["pixdim"][1 : 1 + spatial_dims], dtype=np.float64)
    if not _plausible_spacing(zooms):
        shown = ", ".join(f"{z:g}" for z in zooms)
        raise InvalidSpacingError(path, f"voxel size (pixdim) {shown}: {SPACING_RULE}")


@_typed_errors
def read_nifti(
    path: str | Path, options: ReaderOptions | None = None, header_override: VolumeHeader | None = None
) -> MedicalImage:
    """A NIfTI-1/2 file with its affine honoured; 4D only with an explicit `volume_index`.
    `header_override`: the voxel size, rescale (and orientation) to use instead of the header's.

    Only the header is read before the checks: the voxel data it claims must fit
    `max_image_bytes` and the file (a compressed file cannot hold more than 1032x its size)."""
    options = options or ReaderOptions()
    path = Path(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            image = nib.load(path)
    except Exception as error:  # nibabel raises many types on damaged headers
        raise UnreadableImageError(path, f"not a readable NIfTI file ({type(error).__name__})") from None
    if not isinstance(image, (nib.Nifti1Image, nib.Nifti2Image)):
        raise UnsupportedImageError(path, f"{type(image).__name__} is not a NIfTI volume")
    header = image.header
    shape = tuple(int(n) for n in header.get_data_shape())
    dtype = header.get_data_dtype()
    if dtype.kind not in "biuf" or dtype.fields is not None:
        raise UnsupportedImageError(path, f"voxel type {dtype} is not a greyscale intensity")
    if not shape or min(shape) <= 0:
        raise InvalidPixelDataError(path, f"empty image (shape {shape})")
    if len(shape) < 2:
        raise UnsupportedImageError(path, f"1-dimensional data (shape {shape}) is not an image")
    spatial = [n for n in shape[3:] if n != 1]
    if len(shape) > 4 and spatial:
        raise UnsupportedImageError(path, f"{len(shape)}-dimensional data (shape {shape}) is not an image volume")
    volumes = shape[3] if len(shape) >= 4 else 1
    notes: list[str] = []
    if volumes > 1:
        if options.volume_index is None:
            raise UnsupportedImageError(
                path,
                f"4D image with {volumes} volumes; choose one with ReaderOptions(volume_index=N), "
                "or --volume-index N on the command line",
            )
        if not 0 <= options.volume_index < volumes:
            raise UnsupportedImageError(path, f"volume_index {options.volume_index} outside 0..{volumes - 1}")
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
    if header_override is None:  # an override replaces the header's voxel size: it is not used
        _nifti_voxel_spacing(image, path, min(len(shape), 3))
    try:
        with warnings.catch_warnings(), np.errstate(over="ignore", invalid="ignore"):
            warnings.simplefilter("ignore")
            proxy = image.dataobj
            if len(shape) >= 4:
                index = options.volume_index if volumes > 1 else 0
                data = np.asarray(proxy[(slice(None),) * 3 + (index,) + (0,) * (len(shape) - 4)], dtype=np.float32)
            else:
                data = np.asarray(proxy, dtype=np.float32)
    except MemoryError:
        raise ImageTooLargeError(path, "not enough memory to read the voxel data") from None
    except Exception as error:  # nibabel, gzip and numpy raise many types on damaged data
        raise UnreadableImageError(path, f"truncated or corrupt NIfTI data ({type(error).__name__})") from None
    if volumes > 1:
        notes.append(f"volume {options.volume_index} of {volumes} read from a 4D image")
    if data.ndim == 2:
        data = data[..., None]
    affine = image.affine
    if header_override is not None:
        data, affine = header_override.apply(data, header, affine, path)
    if affine is None or not np.all(np.isfinite(affine)) or abs(np.linalg.det(affine[:3, :3])) < 1e-12:
        raise InvalidSpacingError(path, "the header's affine is singular or not finite (a zero or invalid voxel size)")
    volume, canonical_affine = _canonical(data, affine, path)
    geometry = ImageGeometry(spacing=spacing_from_affine(canonical_affine), affine=canonical_affine)
    return finish_image(volume, geometry, "", path, "MONOCHROME2", notes, options, None)


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


def write_volume_file(path: str | Path, image: str | Path, header: VolumeHeader, origin_note: str = "") -> Path:
    """A `.volume.json` file pointing at the NIfTI `image` (absolute, or relative to the file) with
    the header to read it with; `load_image` reads it as the corrected volume. Written atomically."""
    path = Path(path)
    if not path.name.endswith(VOLUME_FILE_SUFFIX):
        raise ValueError(f"{path}: a volume file's name ends with {VOLUME_FILE_SUFFIX}")
    content = {"format": VOLUME_FILE_FORMAT, "image": str(image), **header.to_dict()}
    if origin_note:
        content["from"] = origin_note
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(path, json.dumps(content, indent=1) + "\n")
    return path


def _finite_numbers(content: dict, key: str, count: int, path: Path) -> tuple[float, ...] | None:
    value = content.get(key)
    if value is None:
        return None
    try:
        numbers = tuple(float(v) for v in ([value] if count == 1 and not isinstance(value, list) else value))
    except (TypeError, ValueError):
        numbers = ()
    if len(numbers) != count or not all(math.isfinite(v) for v in numbers):
        wanted = "a finite number" if count == 1 else f"{count} finite numbers"
        raise UnreadableImageError(path, f"{key!r} must be {wanted}, got {value!r}")
    return numbers


def _volume_file(path: Path) -> tuple[Path, VolumeHeader]:
    """The NIfTI a volume file names and its header, validated (typed errors naming the file)."""
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UnreadableImageError(path, f"not a readable volume file ({type(error).__name__})") from None
    if not isinstance(content, dict) or content.get("format") != VOLUME_FILE_FORMAT or not content.get("image"):
        raise UnreadableImageError(path, f"not a volume file (expected format {VOLUME_FILE_FORMAT!r} and an image)")
    if content.get("spacing") is None:
        raise UnreadableImageError(path, "a volume file needs 'spacing' (3 voxel sizes in mm)")
    spacing = tuple(float(v) for v in _spacing_values(content["spacing"], 3, "spacing", path))
    slope, intercept = (_finite_numbers(content, key, 1, path) for key in ("rescale_slope", "rescale_intercept"))
    if slope is not None and slope[0] == 0:
        raise UnreadableImageError(path, "'rescale_slope' is 0 (every value would be the intercept)")
    orientation = _finite_numbers(content, "orientation", 6, path)
    if orientation is not None:
        row, column = np.asarray(orientation[:3]), np.asarray(orientation[3:])
        if abs(np.linalg.norm(row) - 1) > 1e-3 or abs(np.linalg.norm(column) - 1) > 1e-3 or abs(row @ column) > 1e-3:
            raise InvalidSpacingError(path, f"'orientation' {list(orientation)} is not two orthogonal unit vectors")
    header = VolumeHeader(
        spacing,  # type: ignore[arg-type]
        slope[0] if slope else 1.0,
        intercept[0] if intercept else 0.0,
        orientation,
        _finite_numbers(content, "origin", 3, path),  # type: ignore[arg-type]
    )
    image = Path(str(content["image"]))
    return (image if image.is_absolute() else path.parent / image), header


def volume_file_image(path: str | Path) -> Path | None:
    """The NIfTI a `.volume.json` file names (None for any other path, or an unreadable file)."""
    path = Path(path)
    if not path.name.lower().endswith(VOLUME_FILE_SUFFIX) or not path.is_file():
        return None
    try:
        return _volume_file(path)[0]
    except MedicalImageError:
        return None


@_typed_errors
def read_volume_file(path: str | Path, options: ReaderOptions | None = None) -> MedicalImage:
    """A `.volume.json` file (see `write_volume_file`): the NIfTI it names, read with its header
    override, so that the volume is in the dataset's units with the dataset's spacing whatever the
    NIfTI header says (CT-RATE's headers state neither reliably)."""
    path = Path(path)
    if not path.is_file():
        raise UnreadableImageError(path, "no such file")
    image, header = _volume_file(path)
    if not image.is_file():
        raise UnreadableImageError(path, f"the volume it names does not exist: {image}")
    if not image.name.lower().endswith(NIFTI_SUFFIXES):
        raise UnsupportedImageError(path, f"the volume it names is not NIfTI (.nii/.nii.gz): {image.name}")
    return read_nifti(image, options, header)


# ------------------------------------------------------------------------------------------ raster


@_typed_errors
def read_raster(path: str | Path, options: ReaderOptions | None = None) -> MedicalImage:
    """A PNG or JPEG radiograph or ultrasound frame (8 or 16 bit, greyscale or colour)."""
    from PIL import Image, UnidentifiedImageError

    options = options or ReaderOptions()
    path = Path(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(path) as image:
                width, height = image.size
                claimed = width * height * max(len(image.getbands()), 1) * 4
                if claimed > options.max_image_bytes:
                    raise ImageTooLargeError(
                        path,
                        f"a {width}x{height} image ({_size_text(claimed)} decoded) exceeds the reader's limit of "
                        f"{_size_text(options.max_image_bytes)}; ReaderOptions(max_image_bytes=...) raises it",
                    )
                image.load()
                pixels = image.copy()
    except Image.DecompressionBombError:
        raise ImageTooLargeError(path, "an image too large for Pillow (a decompression bomb?)") from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, EOFError, struct.error) as error:
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
    if mode in ("RGB", "RGBA", "P", "PA", "LA", "CMYK", "YCbCr", "LAB", "HSV", "RGBX", "RGBa", "La"):
        notes.append(f"{mode} colour converted to greyscale luminance")
        image = image.convert("L")
        mode = "L"
    pixels = np.asarray(image)
    if pixels.ndim != 2:
        raise UnsupportedImageError(source, f"a {mode} image of shape {pixels.shape}, not a greyscale plane")
    if pixels.dtype == np.uint8:
        top = 255.0
    elif mode.startswith("I;16"):
        top = 65535.0
    else:
        finite = pixels[np.isfinite(pixels)] if pixels.dtype.kind == "f" else pixels
        top = float(finite.max()) if finite.size else 0.0
    notes.append("no pixel spacing in PNG/JPEG: 1 mm assumed")
    geometry = ImageGeometry(spacing=(1.0, 1.0, 1.0), spacing_known=False)
    window = (0.0, top) if math.isfinite(top) and top > 0 else None
    return finish_image(
        pixels.astype(np.float32)[None], geometry, "", Path(source), "MONOCHROME2", notes, options, window
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
    """Final checks shared by every reader: a non-empty 3D volume, finite (or repaired by policy), with a
    valid spacing. The notes become the image's `warnings` and are logged at WARNING level."""
    volume = np.asarray(volume, dtype=np.float32)
    if volume.ndim != 3 or volume.size == 0 or 0 in volume.shape:
        raise InvalidPixelDataError(source, f"empty image (shape {volume.shape})")
    spacing = np.asarray(geometry.spacing, dtype=np.float64)
    if not _plausible_spacing(spacing):
        raise InvalidSpacingError(source, f"spacing {tuple(geometry.spacing)}: {SPACING_RULE}")
    finite = np.isfinite(volume)
    if not finite.all():
        bad = int((~finite).sum())
        if bad == volume.size:
            raise InvalidPixelDataError(source, "every pixel value is NaN or infinite")
        if options.nan_policy != "zero":
            raise InvalidPixelDataError(
                source,
                f"{bad} of {volume.size} values are NaN or infinite; ReaderOptions(nan_policy='zero') replaces "
                "them by the image minimum (--nan-policy zero on the command line)",
            )
        volume = np.where(finite, volume, volume[finite].min())
        notes.append(f"{bad} NaN/infinite values replaced by the image minimum")
    for note in notes:
        logger.info("%s: %s", source, note)
    return MedicalImage(volume, geometry, modality, str(source), photometric, notes, display_window)


__all__ = [
    "DEFAULT_MAX_DICOM_ELEMENTS",
    "DEFAULT_MAX_IMAGE_BYTES",
    "VOLUME_FILE_SUFFIX",
    "ReaderOptions",
    "VolumeHeader",
    "from_pil_image",
    "list_dicom_series",
    "load_image",
    "read_dicom_dataset",
    "read_dicom_file",
    "read_dicom_series",
    "read_nifti",
    "read_raster",
    "read_volume_file",
    "volume_file_image",
    "write_volume_file",
]
