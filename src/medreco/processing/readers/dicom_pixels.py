"""DICOM pixel data -> float32 modality values (e.g. HU): the claimed size checked before decoding,
pydicom's decoder failures as typed errors that say what to install, colour to luminance, the
rescale or modality LUT applied; then the display convention (MONOCHROME1 inverted with its window)."""

from __future__ import annotations

import logging
import math
import warnings
from pathlib import Path

import numpy as np
import pydicom
from pydicom.pixels import apply_color_lut, apply_modality_lut

from ...errors import (
    ImageTooLargeError,
    InvalidPixelDataError,
    MedicalImageError,
    MissingCodecError,
    UnreadableImageError,
    UnsupportedImageError,
)
from .base import _LIBRARY_LOGS, ReaderOptions, _shown, _size_text
from .dicom_dataset import _attribute, _int_attribute

PIXEL_DATA_KEYWORDS = ("PixelData", "FloatPixelData", "DoubleFloatPixelData")


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


# SOP classes whose pixel data are labels (segment masks), by their UID (DICOM PS3.4 Annex B)
MASK_SOP_CLASSES = {
    "1.2.840.10008.5.1.4.1.1.66.4": "Segmentation (SEG)",
    "1.2.840.10008.5.1.4.1.1.66.7": "Label Map Segmentation",
}


def _decode_pixels(dataset: pydicom.Dataset, path: Path, notes: list[str], options: ReaderOptions) -> np.ndarray:
    """The modality values (rescaled, e.g. HU) of every frame, as float32, in the file's own value space:
    MONOCHROME1 is not inverted here (see `_display_convention`)."""
    if not any(keyword in dataset for keyword in PIXEL_DATA_KEYWORDS):
        kind = _attribute(dataset, "Modality") or "non-image"
        raise UnsupportedImageError(path, f"no pixel data (a {kind} object, not an image)")
    mask = MASK_SOP_CLASSES.get(str(_attribute(dataset, "SOPClassUID") or ""))
    if mask is not None:  # its pixels are labels, not intensities: never read one as a study's image
        raise UnsupportedImageError(path, f"a DICOM {mask} object: a mask, not an image; give the series it labels")
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
