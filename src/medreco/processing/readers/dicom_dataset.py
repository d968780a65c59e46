"""DICOM bytes -> `pydicom.Dataset`, bounded: a gzip-compressed file or a deflated data set is inflated
here up to `ReaderOptions.max_image_bytes` (not unbounded in pydicom), each read is clamped to the bytes
left (a damaged length never allocates gigabytes), and parsing stops after
`ReaderOptions.max_dicom_elements` elements (damaged files can make pydicom read millions of empty
elements). Also the tolerant attribute accessors every DICOM module uses."""

from __future__ import annotations

import gzip
import io
import struct
import warnings
import zlib
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pydicom
import pydicom.filereader

from ...errors import ImageTooLargeError, UnreadableImageError, UnsupportedImageError
from .base import _LIBRARY_LOGS, GZIP_MAGIC, ReaderOptions, _size_text, _typed_errors

PIXEL_DATA_TAGS = (0x7FE00008, 0x7FE00009, 0x7FE00010)
DEFLATED_SYNTAX = b"1.2.840.10008.1.2.1.99"
EXPLICIT_LITTLE_SYNTAX = b"1.2.840.10008.1.2.1"
_INFLATE_CHUNK = 1 << 20
_LONG_LENGTH_VRS = {b"OB", b"OD", b"OF", b"OL", b"OV", b"OW", b"SQ", b"SV", b"UC", b"UN", b"UR", b"UT", b"UV"}


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
