"""The `.volume.json` format: a NIfTI volume named together with the header it should have had (voxel
size, rescale, orientation, origin, from a dataset's metadata), so that `load_image` reads the volume
in the dataset's units and spacing whatever its NIfTI header says (CT-RATE's headers state neither
reliably). Written by `write_volume_file`, read by `read_volume_file`."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...atomic import write_text_atomically
from ...errors import InvalidSpacingError, MedicalImageError, UnreadableImageError, UnsupportedImageError
from ..geometry import MedicalImage
from .base import ImageReader, ReaderOptions, _spacing_values, _typed_errors
from .nifti import NIFTI_SUFFIXES, VolumeHeader, read_nifti

VOLUME_FILE_SUFFIX = ".volume.json"  # a NIfTI volume with the geometry and rescale to use (`read_volume_file`)
VOLUME_FILE_FORMAT = "medreco.volume/1"


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


@dataclass
class VolumeFile:
    """A validated volume file (`VolumeFileReader.read`): the NIfTI it names and the header to read it with."""

    path: Path
    image: Path
    header: VolumeHeader


class VolumeFileReader(ImageReader[VolumeFile]):
    """A `.volume.json` file (see `write_volume_file`): the NIfTI it names, read with its header override."""

    def verify_suffix(self, path: Path) -> bool:
        """A `.volume.json` file."""
        return path.name.lower().endswith(VOLUME_FILE_SUFFIX)

    def read(self, path: Path) -> VolumeFile:
        """The volume file's fields, validated; the NIfTI it names must exist."""
        if not path.is_file():
            raise UnreadableImageError(path, "no such file")
        image, header = _volume_file(path)
        if not image.is_file():
            raise UnreadableImageError(path, f"the volume it names does not exist: {image}")
        if not image.name.lower().endswith(NIFTI_SUFFIXES):
            raise UnsupportedImageError(path, f"the volume it names is not NIfTI (.nii/.nii.gz): {image.name}")
        return VolumeFile(path, image, header)

    def get_data(self, raw: VolumeFile) -> MedicalImage:
        """The NIfTI read with the header override (its errors name the NIfTI)."""
        return read_nifti(raw.image, self.options, raw.header)


@_typed_errors
def read_volume_file(path: str | Path, options: ReaderOptions | None = None) -> MedicalImage:
    """A `.volume.json` file (see `write_volume_file`): the NIfTI it names, read with its header
    override, so that the volume is in the dataset's units with the dataset's spacing whatever the
    NIfTI header says (CT-RATE's headers state neither reliably)."""
    return VolumeFileReader(options).load(path)
