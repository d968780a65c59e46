"""medreco's exceptions. Messages name the file and the problem, never identifying DICOM values."""

from __future__ import annotations

from pathlib import Path


class MedReCoError(Exception):
    """Base of every error medreco raises on purpose."""


class UnknownEntityError(MedReCoError, ValueError):
    """An entity name or id that the ontology, or a model's entity vocabulary, does not hold."""


class TrainingDataError(MedReCoError, ValueError):
    """Missing or unusable training data; names the folder or file."""


class LaunchConfigError(MedReCoError, ValueError):
    """An unknown launch or DeepSpeed config name, a bad process count, or a launch config file
    that would overwrite a different one; names the value and the choices."""


class PresetError(MedReCoError, ValueError):
    """A model size preset file that cannot be read or is not of the preset form; names the file."""


class TextFileError(MedReCoError, ValueError):
    """A recipe, vocabulary, manifest or evaluation-set file that is not readable text."""


def read_text_file(path: str | Path, what: str = "text file") -> str:
    """The UTF-8 text of `path`; a binary file (an image given as a recipe) gets a typed error
    naming it, not a codec message naming nothing."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise TextFileError(f"{path}: not a {what} (not UTF-8 text)") from None


class MedicalImageError(MedReCoError, ValueError):
    """A medical image could not be turned into model input. `path` names the file or folder."""

    def __init__(self, path: str | Path | None, problem: str):
        self.path = None if path is None else str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}" if self.path else problem)


class UnreadableImageError(MedicalImageError):
    """Not a readable image of the expected format: corrupt, truncated, random bytes."""


class UnsupportedImageError(MedicalImageError):
    """A valid file that medreco does not turn into an image (no pixel data, 4D, other format)."""


class MissingCodecError(UnsupportedImageError):
    """Compressed pixel data whose decoder plugin is not installed; the message names the plugin."""


class InvalidPixelDataError(MedicalImageError):
    """Pixel values that cannot be used: NaN or infinite values, an empty image."""


class InvalidSpacingError(MedicalImageError):
    """A pixel spacing, slice thickness or voxel size that is zero, negative, NaN, infinite or not a number."""


class ImageTooLargeError(MedicalImageError):
    """An image (or compressed data) larger than the reader's size limit: a decompression bomb or a damaged
    header claiming a huge size. The message names the limit and the option that raises it."""


class ModalityError(MedicalImageError):
    """The image's own modality contradicts the one requested."""


class SeriesError(MedicalImageError):
    """A DICOM series that cannot be assembled into one volume."""


class MultipleSeriesError(SeriesError):
    """A folder holds several series and none was chosen. `series` lists them."""

    def __init__(self, path: str | Path, problem: str, series: list[dict]):
        self.series = series
        super().__init__(path, problem)


class MissingSliceError(SeriesError):
    """A gap in the slice positions of a series."""


class DuplicateSliceError(SeriesError):
    """Two slices of a series at the same position."""


class InconsistentGeometryError(SeriesError):
    """Slices that disagree in orientation, size or pixel spacing, or uneven slice spacing."""


__all__ = [
    "DuplicateSliceError",
    "InconsistentGeometryError",
    "ImageTooLargeError",
    "InvalidPixelDataError",
    "InvalidSpacingError",
    "LaunchConfigError",
    "PresetError",
    "MedReCoError",
    "MedicalImageError",
    "MissingCodecError",
    "MissingSliceError",
    "ModalityError",
    "MultipleSeriesError",
    "SeriesError",
    "TextFileError",
    "TrainingDataError",
    "UnknownEntityError",
    "read_text_file",
    "UnreadableImageError",
    "UnsupportedImageError",
]
