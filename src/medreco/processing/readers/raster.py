"""PNG/JPEG radiographs and ultrasound frames (8 or 16 bit, greyscale or colour) -> `MedicalImage`,
and `from_pil_image` for images already loaded (how `datasets` and TRL hand them over). The decoded
size is checked against `ReaderOptions.max_image_bytes` before Pillow decodes anything."""

from __future__ import annotations

import math
import struct
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ...errors import ImageTooLargeError, MedicalImageError, UnreadableImageError, UnsupportedImageError
from ..geometry import ImageGeometry, MedicalImage
from .base import ImageReader, ReaderOptions, _size_text, _typed_errors, finish_image

if TYPE_CHECKING:
    import PIL.Image

RASTER_SUFFIXES = (".png", ".jpg", ".jpeg")


@dataclass
class RasterFile:
    """A decoded PNG/JPEG (`RasterReader.read`), detached from its file."""

    path: Path
    pixels: PIL.Image.Image


class RasterReader(ImageReader[RasterFile]):
    """A PNG or JPEG radiograph or ultrasound frame (8 or 16 bit, greyscale or colour)."""

    def verify_suffix(self, path: Path) -> bool:
        """A `.png`, `.jpg` or `.jpeg` file."""
        return path.name.lower().endswith(RASTER_SUFFIXES)

    def read(self, path: Path) -> RasterFile:
        """The image decoded by Pillow, once its size (from the header) fits `max_image_bytes`."""
        from PIL import Image, UnidentifiedImageError

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with Image.open(path) as image:
                    width, height = image.size
                    claimed = width * height * max(len(image.getbands()), 1) * 4
                    if claimed > self.options.max_image_bytes:
                        raise ImageTooLargeError(
                            path,
                            f"a {width}x{height} image ({_size_text(claimed)} decoded) exceeds the reader's limit "
                            f"of {_size_text(self.options.max_image_bytes)}; ReaderOptions(max_image_bytes=...) "
                            "raises it",
                        )
                    image.load()
                    return RasterFile(path, image.copy())
        except MedicalImageError:
            raise  # our own typed refusal (too large for the limits), not a decoding failure
        except Image.DecompressionBombError:
            raise ImageTooLargeError(path, "an image too large for Pillow (a decompression bomb?)") from None
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError, EOFError, struct.error) as error:
            raise UnreadableImageError(path, f"not a readable PNG/JPEG image ({type(error).__name__})") from None

    def get_data(self, raw: RasterFile) -> MedicalImage:
        """See `from_pil_image`."""
        return from_pil_image(raw.pixels, self.options, raw.path)


@_typed_errors
def read_raster(path: str | Path, options: ReaderOptions | None = None) -> MedicalImage:
    """A PNG or JPEG radiograph or ultrasound frame (8 or 16 bit, greyscale or colour)."""
    return RasterReader(options).load(path)


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
