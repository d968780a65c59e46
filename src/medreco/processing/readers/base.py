"""What every format's reader shares: `ReaderOptions`, the `ImageReader` interface, the typed-error
wrapper of the public read functions, and the bounds that keep hostile input cheap to refuse.

Every failure raises a `MedicalImageError` subclass naming the file; nothing returns a blank
image. The checks here (spacing within what a device produces, a finite non-empty volume) run on
every image, whatever its format."""

from __future__ import annotations

import functools
import logging
import threading
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Literal, TypeVar

import numpy as np
from pydicom.multival import MultiValue

from ...errors import (
    ImageTooLargeError,
    InvalidPixelDataError,
    InvalidSpacingError,
    MedicalImageError,
    UnreadableImageError,
)
from ..geometry import ImageGeometry, MedicalImage, to_canonical

logger = logging.getLogger(__name__)

# A whole-body CT of 2000 slices of 512x512 int16 is 1 GiB; twice that covers every real single image.
DEFAULT_MAX_IMAGE_BYTES = 2 * 1024**3
# An enhanced multi-frame CT of 2,000 frames holds ~80,000 elements; refusing past 250,000 takes < 5 s.
DEFAULT_MAX_DICOM_ELEMENTS = 250_000

# Spacing outside these bounds (mm) is damage: whole-slide microscopy pixels are ~2.5e-4 mm.
MIN_SPACING_MM, MAX_SPACING_MM = 1e-6, 1e5
SPACING_RULE = f"spacing must be positive and finite (between {MIN_SPACING_MM:g} and {MAX_SPACING_MM:g} mm)"

GZIP_MAGIC = b"\x1f\x8b"
DEFLATE_MAX_RATIO = 1032  # the most one byte of DEFLATE data can inflate to

# Formats no reader takes; `load_image` refuses them with what to convert them to.
CONVERT_FIRST_SUFFIXES = (".hdr", ".img", ".mgz", ".nrrd", ".mha", ".mhd")

UNEXPECTED_ERROR = "unexpected error while reading"


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


Raw = TypeVar("Raw")


class ImageReader(ABC, Generic[Raw]):
    """One input format, read in two steps (the shape of MONAI's `ImageReader`): `read` parses the
    file and checks its header (within the options' bounds, before anything large is allocated or
    inflated) into a format-specific `Raw`; `get_data` decodes it into a `MedicalImage` in the
    canonical orientation. `load_image` takes the first reader whose `verify_suffix` accepts a path.
    Both steps raise only `MedicalImageError`s (the public read functions add the last line of
    defence, `_typed_errors`)."""

    def __init__(self, options: ReaderOptions | None = None) -> None:
        self.options = options or ReaderOptions()

    @abstractmethod
    def verify_suffix(self, path: Path) -> bool:
        """Whether this reader takes `path`, from its name (or, for a folder, its kind); what the
        file holds is checked by `read`."""

    @abstractmethod
    def read(self, path: Path) -> Raw:
        """The parsed file, its header checked against the options' bounds."""

    @abstractmethod
    def get_data(self, raw: Raw) -> MedicalImage:
        """The image `raw` holds: decoded, in the canonical orientation, checked by `finish_image`."""

    def load(self, path: str | Path) -> MedicalImage:
        """`get_data(read(path))`."""
        return self.get_data(self.read(Path(path)))


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


def _size_text(size: int) -> str:
    return f"{size / 1024**3:.1f} GiB" if size >= 1024**3 else f"{size / 1024**2:.1f} MiB"


def _shown(value) -> str:
    """A spacing value as it appears in the file, for an error message."""
    if isinstance(value, (list, tuple, MultiValue)):
        text = "\\".join(str(v) for v in value)
    else:
        text = str(value)
    return repr(text if len(text) <= 60 else text[:57] + "...")


def _spacing_values(value, count: int, name: str, where: Path) -> np.ndarray:
    """Validated spacing values: `count` positive finite millimetres, else `InvalidSpacingError`."""
    values = value if isinstance(value, (list, tuple, MultiValue)) else [value]
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
    valid spacing. The notes become the image's `warnings` and are logged at INFO level."""
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
