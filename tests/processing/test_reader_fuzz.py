"""Hostile input for the readers: a seeded corpus of damaged real files, decompression bombs, invalid
spacing, and MONOCHROME1/MONOCHROME2 twins.

Every damaged variant must either load as a finite image of plausible shape or raise a
`MedicalImageError` subclass naming the file, within a few seconds; nothing else."""

from __future__ import annotations

import gzip
import io
import math
import shutil
import signal
import struct
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import nibabel as nib
import numpy as np
import pydicom
import pytest
from pydicom.data import get_testdata_file

from io_helpers import box_phantom, write_series
from medreco.data.phantom.dicom import DicomIdentity, write_radiograph
from medreco.errors import (
    ImageTooLargeError,
    InvalidSpacingError,
    MedicalImageError,
    UnreadableImageError,
)
from medreco.processing import MedReCoImageProcessor, ReaderOptions, load_image
from medreco.processing.readers import UNEXPECTED_ERROR, _file_meta_layout

SEED = 20240611
CASE_SECONDS = 5.0
DICOM_CORPUS = (
    "CT_small.dcm",
    "MR_small.dcm",
    "MR_small_RLE.dcm",
    "MR_small_bigendian.dcm",
    "MR_small_implicit.dcm",
    "JPEG2000.dcm",
    "JPEG-lossy.dcm",
    "SC_rgb_rle.dcm",
    "SC_rgb_small_odd_jpeg.dcm",
    "rtdose.dcm",
    "image_dfl.dcm",
    "liver_1frame.dcm",
)
NIFTI_CORPUS = ("anatomical.nii", "standard.nii.gz", "example4d.nii.gz", "example_nifti2.nii.gz")
# NIfTI-1 header fields worth damaging: (offset, struct format)
NIFTI1_FIELDS = (
    (0, "<i"),  # sizeof_hdr
    (40, "<h"),  # dim[0]
    (42, "<h"),  # dim[1]
    (44, "<h"),  # dim[2]
    (46, "<h"),  # dim[3]
    (48, "<h"),  # dim[4]
    (70, "<h"),  # datatype
    (72, "<h"),  # bitpix
    (76, "<f"),  # pixdim[0] (qfac)
    (80, "<f"),  # pixdim[1]
    (84, "<f"),  # pixdim[2]
    (88, "<f"),  # pixdim[3]
    (108, "<f"),  # vox_offset
    (112, "<f"),  # scl_slope
    (116, "<f"),  # scl_inter
    (252, "<h"),  # qform_code
    (254, "<h"),  # sform_code
    (256, "<f"),  # quatern_b
    (268, "<f"),  # qoffset_x
    (280, "<f"),  # srow_x[0]
    (300, "<f"),  # srow_y[1]
    (320, "<f"),  # srow_z[2]
)
# the attributes the readers use, which field overwrites target most of the time
IMAGE_KEYWORDS = {
    "Rows",
    "Columns",
    "NumberOfFrames",
    "SamplesPerPixel",
    "PlanarConfiguration",
    "BitsAllocated",
    "BitsStored",
    "HighBit",
    "PixelRepresentation",
    "PhotometricInterpretation",
    "PixelSpacing",
    "ImagerPixelSpacing",
    "SliceThickness",
    "SpacingBetweenSlices",
    "ImagePositionPatient",
    "ImageOrientationPatient",
    "GridFrameOffsetVector",
    "RescaleSlope",
    "RescaleIntercept",
    "WindowCenter",
    "WindowWidth",
    "SeriesInstanceUID",
    "SeriesNumber",
    "Modality",
    "ImageType",
}
SPECIAL_NUMBERS = (0, -1, 1, 2**15 - 1, -(2**15), 2**31 - 1, math.nan, math.inf, -math.inf, 1e30, -1e-30)
SPECIAL_TEXT = (b"0", b"-1", b"nan", b"inf", b"1e308", b"-0.5\\-0.5", b"", b"\\\\\\", b"abc", b"\xff\xfe\x00")


# --------------------------------------------------------------------------------------- corpus


@dataclass
class Case:
    """One damaged input: what was done to which file, and where the result lies."""

    name: str
    path: Path
    options: ReaderOptions


def _dicom_value_spans(data: bytes) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(offset, length) of the short top-level element values of a DICOM file (from pydicom's raw
    elements): those of the image attributes the readers use, and all of them."""
    try:
        dataset = pydicom.dcmread(io.BytesIO(data), force=True, stop_before_pixels=True)
    except Exception:
        return [], []
    targeted, spans = [], []
    for tag in list(dataset.keys()):
        try:
            raw = dataset.get_item(tag)
        except Exception:  # a value damaged by an earlier mutation
            continue
        if getattr(raw, "value_tell", None) is not None and 0 < raw.length < 256:
            spans.append((raw.value_tell, raw.length))
            if pydicom.datadict.keyword_for_tag(tag) in IMAGE_KEYWORDS:
                targeted.append((raw.value_tell, raw.length))
    return targeted, spans


def _flip_bits(data: bytes, rng: np.random.Generator) -> bytes:
    damaged = bytearray(data)
    header = min(len(damaged), 2048)
    for _ in range(int(rng.integers(1, 17))):
        at = int(rng.integers(0, header)) if rng.random() < 0.7 else int(rng.integers(0, len(damaged)))
        damaged[at] ^= 1 << int(rng.integers(0, 8))
    return bytes(damaged)


def _truncate(data: bytes, rng: np.random.Generator) -> bytes:
    return data[: int(rng.integers(0, len(data)))]


def _zero_run(data: bytes, rng: np.random.Generator) -> bytes:
    damaged = bytearray(data)
    length = int(rng.integers(1, 513))
    at = int(rng.integers(0, min(len(damaged), 4096))) if rng.random() < 0.7 else int(rng.integers(0, len(damaged)))
    damaged[at : at + length] = bytes(len(damaged[at : at + length]))
    return bytes(damaged)


def _overwrite_dicom_field(data: bytes, rng: np.random.Generator) -> bytes:
    targeted, spans = _dicom_value_spans(data)
    spans = targeted if targeted and rng.random() < 0.8 else spans
    if not spans:
        return _flip_bits(data, rng)
    damaged = bytearray(data)
    at, length = spans[int(rng.integers(0, len(spans)))]
    if rng.random() < 0.5:
        text = SPECIAL_TEXT[int(rng.integers(0, len(SPECIAL_TEXT)))]
        replacement = text.ljust(length, b" ")[:length]
    else:
        number = SPECIAL_NUMBERS[int(rng.integers(0, len(SPECIAL_NUMBERS)))]
        packed = struct.pack("<d", float(number)) if rng.random() < 0.5 else struct.pack("<q", _as_int(number))
        replacement = (packed * (length // 8 + 1))[:length]
    damaged[at : at + length] = replacement
    return bytes(damaged)


def _as_int(number: float) -> int:
    return int(number) if math.isfinite(number) and abs(number) < 2**62 else -(2**62)


def _overwrite_nifti_field(data: bytes, rng: np.random.Generator) -> bytes:
    damaged = bytearray(data)
    for _ in range(int(rng.integers(1, 3))):
        offset, layout = NIFTI1_FIELDS[int(rng.integers(0, len(NIFTI1_FIELDS)))]
        number = SPECIAL_NUMBERS[int(rng.integers(0, len(SPECIAL_NUMBERS)))]
        if layout == "<f":
            packed = struct.pack(
                layout, np.float32(number) if abs(number) < 3e38 or not math.isfinite(number) else 3e38
            )
        else:
            limit = 2 ** (8 * struct.calcsize(layout) - 1)
            value = _as_int(number) if math.isfinite(number) else limit - 1
            packed = struct.pack(layout, max(-limit, min(limit - 1, value)))
        damaged[offset : offset + len(packed)] = packed
    return bytes(damaged)


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _dicom_cases(source: Path, folder: Path, rng: np.random.Generator) -> list[Case]:
    data = source.read_bytes()
    stem = source.stem

    def store(name: str, content: bytes, suffix: str = ".dcm") -> Case:
        return Case(f"{stem}-{name}", _write(folder / f"{stem}-{name}{suffix}", content), ReaderOptions())

    cases = [store(f"flip{index}", _flip_bits(data, rng)) for index in range(2)]
    cases += [store(f"cut{index}", _truncate(data, rng)) for index in range(2)]
    cases += [store(f"zero{index}", _zero_run(data, rng)) for index in range(2)]
    cases += [store(f"field{index}", _overwrite_dicom_field(data, rng)) for index in range(6)]
    cases.append(store("gz", gzip.compress(_flip_bits(data, rng), 1)))  # a gzip-wrapped file named .dcm
    cases.append(store("gzcut", _truncate(gzip.compress(data, 1), rng), ".dcm.gz"))
    return cases


def _nifti_cases(source: Path, folder: Path, rng: np.random.Generator) -> list[Case]:
    raw = source.read_bytes()
    compressed = source.name.endswith(".gz")
    plain = gzip.decompress(raw) if compressed else raw
    suffix = ".nii.gz" if compressed else ".nii"
    stem = source.name.split(".")[0]
    options = ReaderOptions(volume_index=0)

    def store(name: str, content: bytes) -> Case:
        packed = gzip.compress(content, 1) if compressed else content
        return Case(f"{stem}-{name}", _write(folder / f"{stem}-{name}{suffix}", packed), options)

    cases = [store(f"flip{index}", _flip_bits(plain, rng)) for index in range(3)]
    cases += [store(f"cut{index}", _truncate(plain, rng)) for index in range(2)]
    cases += [store(f"zero{index}", _zero_run(plain, rng)) for index in range(2)]
    is_nifti1 = struct.unpack("<i", plain[:4])[0] == 348
    for index in range(6):
        damaged = _overwrite_nifti_field(plain, rng) if is_nifti1 else _flip_bits(plain[:540], rng) + plain[540:]
        cases.append(store(f"field{index}", damaged))
    if compressed:
        cases.append(Case(f"{stem}-rawflip", _write(folder / f"{stem}-rawflip{suffix}", _flip_bits(raw, rng)), options))
        cases.append(Case(f"{stem}-rawcut", _write(folder / f"{stem}-rawcut{suffix}", _truncate(raw, rng)), options))
    return cases


def _series_cases(folder: Path, rng: np.random.Generator) -> list[Case]:
    volume = box_phantom(shape=(6, 20, 24), box=((1, 5), (4, 16), (5, 19)))
    pristine = folder / "series-pristine"
    files = write_series(pristine, volume)
    cases = [Case("series-pristine", pristine, ReaderOptions())]
    mutations = (_flip_bits, _truncate, _zero_run, _overwrite_dicom_field)
    for index in range(16):
        copy = folder / f"series-{index}"
        shutil.copytree(pristine, copy)
        victim = copy / files[int(rng.integers(0, len(files)))].name
        mutate = mutations[index % len(mutations)]
        victim.write_bytes(mutate(victim.read_bytes(), rng))
        cases.append(Case(f"series-{mutate.__name__}{index}", copy, ReaderOptions()))
    return cases


def _raster_cases(folder: Path, rng: np.random.Generator) -> list[Case]:
    from PIL import Image

    pixels = np.linspace(0, 65535, 40 * 30).reshape(30, 40).astype(np.uint16)
    sources = {"png16": (pixels, ".png"), "png8": ((pixels // 257).astype(np.uint8), ".png")}
    cases = []
    folder.mkdir(parents=True, exist_ok=True)
    for name, (array, suffix) in sources.items():
        target = folder / f"{name}{suffix}"
        Image.fromarray(array).save(target)
        data = target.read_bytes()
        for index, mutate in enumerate((_flip_bits, _flip_bits, _truncate, _zero_run)):
            damaged = _write(folder / f"{name}-{index}{suffix}", mutate(data, rng))
            cases.append(Case(f"{name}-{mutate.__name__}{index}", damaged, ReaderOptions()))
    jpeg = folder / "photo.jpg"
    Image.fromarray((pixels // 257).astype(np.uint8)).convert("RGB").save(jpeg)
    for index, mutate in enumerate((_flip_bits, _truncate, _zero_run)):
        damaged = _write(folder / f"photo-{index}.jpg", mutate(jpeg.read_bytes(), rng))
        cases.append(Case(f"jpeg-{mutate.__name__}{index}", damaged, ReaderOptions()))
    return cases


@pytest.fixture(scope="module")
def damaged_corpus(tmp_path_factory) -> list[Case]:
    folder = tmp_path_factory.mktemp("fuzz")
    rng = np.random.default_rng(SEED)
    cases: list[Case] = []
    for name in DICOM_CORPUS:
        cases += _dicom_cases(Path(get_testdata_file(name)), folder / "dicom", rng)
    nibabel_data = Path(nib.__file__).parent / "tests" / "data"
    for name in NIFTI_CORPUS:
        cases += _nifti_cases(nibabel_data / name, folder / "nifti", rng)
    cases += _series_cases(folder, rng)
    cases += _raster_cases(folder / "raster", rng)
    return cases


# ---------------------------------------------------------------------------------- the fuzz run


class CaseTimeout(BaseException):
    """Raised by the alarm inside a case that runs too long (a BaseException: no reader swallows it)."""


def _outcome(case: Case) -> tuple[str, float]:
    """What loading a damaged case did ("ok", or the error class), and how long it took; fails the
    test on anything but a finite plausible image or a `MedicalImageError` naming the file."""
    timed_out = False

    def alarm(signum, frame):
        nonlocal timed_out
        timed_out = True
        raise CaseTimeout

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    start = time.monotonic()
    try:
        image = load_image(case.path, case.options)
        result = "ok"
    except MedicalImageError as error:
        image = None
        result = type(error).__name__
        assert str(case.path) in str(error), f"{case.name}: the error does not name the file: {error}"
        assert UNEXPECTED_ERROR not in error.problem, f"{case.name}: unanticipated failure: {error}"
    except CaseTimeout:
        image, result = None, "timeout"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    elapsed = time.monotonic() - start
    assert not timed_out and elapsed < CASE_SECONDS, f"{case.name}: took {elapsed:.1f} s"
    if image is not None:
        array = image.array
        assert array.dtype == np.float32 and array.ndim == 3, case.name
        assert 0 < array.size <= 2**28 and min(array.shape) >= 1, f"{case.name}: shape {array.shape}"
        assert np.isfinite(array).all(), f"{case.name}: non-finite values"
        assert all(math.isfinite(s) and s > 0 for s in image.geometry.spacing), f"{case.name}: {image.geometry}"
        if image.display_window is not None:
            assert all(math.isfinite(v) for v in image.display_window), case.name
    return result, elapsed


def test_damaged_files_load_or_raise_a_typed_error(damaged_corpus):
    """~250 seeded damaged variants of real files: each a plausible image or a typed error, in < 5 s."""
    assert 150 <= len(damaged_corpus) <= 300
    outcomes = {case.name: _outcome(case) for case in damaged_corpus}
    kinds = {result for result, _ in outcomes.values()}
    # the corpus exercises both paths: damage that readers tolerate and damage they refuse
    assert "ok" in kinds and "UnreadableImageError" in kinds
    slowest = max(outcomes.items(), key=lambda item: item[1][1])
    assert slowest[1][1] < CASE_SECONDS, slowest


# ------------------------------------------------------------------------- bombs and size claims


def _dicom_prefix(source: Path) -> tuple[bytes, int]:
    """A real file's bytes and the offset where its data set starts (after the file meta group)."""
    data = source.read_bytes()
    return data, _file_meta_layout(io.BytesIO(data), 132)[0]


def test_gzip_bomb_is_refused_quickly(tmp_path):
    bomb = tmp_path / "bomb.dcm"
    bomb.write_bytes(gzip.compress(bytes(64 * 2**20), 9))  # 64 MiB of zeros in 64 KiB
    start = time.monotonic()
    with pytest.raises(UnreadableImageError, match=r"bomb\.dcm: not a DICOM file"):
        load_image(bomb)
    assert time.monotonic() - start < 2.0
    data, dataset_start = _dicom_prefix(Path(get_testdata_file("CT_small.dcm")))
    headed = tmp_path / "headed.dcm.gz"  # a real file meta followed by 64 MiB of zeros
    headed.write_bytes(gzip.compress(data[:dataset_start] + bytes(64 * 2**20), 9))
    start = time.monotonic()
    with pytest.raises(UnreadableImageError, match="zero bytes where the data set should begin"):
        load_image(headed)
    assert time.monotonic() - start < 2.0
    tailed = tmp_path / "tailed.dcm.gz"  # a whole image followed by zeros past the size limit
    tailed.write_bytes(gzip.compress(data + bytes(16 * 2**20), 9))
    start = time.monotonic()
    with pytest.raises(ImageTooLargeError, match=r"tailed\.dcm\.gz: gzip data inflating to more than 8\.0 MiB"):
        load_image(tailed, ReaderOptions(max_image_bytes=8 * 2**20))
    assert time.monotonic() - start < 2.0
    image = load_image(tailed)  # under the default limit: trailing zero padding is ignored, with a note
    assert image.shape == (1, 128, 128) and any("after the pixel data" in w for w in image.warnings)


def test_deflated_dicom_bomb_is_refused(tmp_path):
    data, dataset_start = _dicom_prefix(Path(get_testdata_file("image_dfl.dcm")))
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    inflated = zlib.decompress(data[dataset_start:], -zlib.MAX_WBITS)
    bomb = compressor.compress(inflated + bytes(32 * 2**20)) + compressor.flush()
    (tmp_path / "dfl.dcm").write_bytes(data[:dataset_start] + bomb)
    start = time.monotonic()
    with pytest.raises(ImageTooLargeError, match="deflated data set inflating to more than"):
        load_image(tmp_path / "dfl.dcm", ReaderOptions(max_image_bytes=4 * 2**20))
    assert time.monotonic() - start < 2.0
    assert load_image(Path(get_testdata_file("image_dfl.dcm"))).shape == (1, 512, 512)


def test_many_empty_elements_stop_at_the_element_limit(tmp_path):
    data, dataset_start = _dicom_prefix(Path(get_testdata_file("CT_small.dcm")))
    sequence = struct.pack("<HH", 0x0008, 0x0006) + b"SQ\0\0" + struct.pack("<I", 0xFFFFFFFF)
    empty_items = struct.pack("<HHI", 0xFFFE, 0xE000, 0) * 200_000
    (tmp_path / "items.dcm").write_bytes(data[:dataset_start] + sequence + empty_items + data[dataset_start:])
    start = time.monotonic()
    with pytest.raises(UnreadableImageError, match=r"more than 20,000 elements.*max_dicom_elements"):
        load_image(tmp_path / "items.dcm", ReaderOptions(max_dicom_elements=20_000))
    assert time.monotonic() - start < 2.0


def test_headers_claiming_huge_images_are_refused_before_allocating(tmp_path):
    dataset = pydicom.dcmread(get_testdata_file("JPEG2000.dcm"))
    dataset.NumberOfFrames = 2_000_000
    dataset.save_as(tmp_path / "frames.dcm")
    with pytest.raises(ImageTooLargeError, match=r"frames\.dcm: the header claims 2000000 frame"):
        load_image(tmp_path / "frames.dcm")
    for name in ("huge.nii", "huge.nii.gz"):
        nib.save(nib.Nifti1Image(np.zeros((4, 4, 4), dtype=np.int16), np.eye(4)), tmp_path / name)
        patch_nifti_header(tmp_path / name, {42: ("<h", 2000), 44: ("<h", 2000), 46: ("<h", 2000)})
        start = time.monotonic()
        with pytest.raises(ImageTooLargeError, match=rf"{name}: the header claims 2000x2000x2000 voxels"):
            load_image(tmp_path / name)
        assert time.monotonic() - start < 1.0
    for name in ("short.nii", "short.nii.gz"):  # within the limit, but more than the file holds
        nib.save(nib.Nifti1Image(np.zeros((4, 4, 4), dtype=np.int16), np.eye(4)), tmp_path / name)
        patch_nifti_header(tmp_path / name, {42: ("<h", 512), 44: ("<h", 512), 46: ("<h", 512)})
        with pytest.raises(UnreadableImageError, match="truncated or corrupt NIfTI"):
            load_image(tmp_path / name)


def patch_nifti_header(path: Path, fields: dict[int, tuple[str, float]]) -> None:
    """Overwrite NIfTI-1 header fields in place (the file gzip-compressed or not)."""
    compressed = path.name.endswith(".gz")
    data = bytearray(gzip.decompress(path.read_bytes()) if compressed else path.read_bytes())
    for offset, (layout, value) in fields.items():
        packed = struct.pack(layout, value)
        data[offset : offset + len(packed)] = packed
    path.write_bytes(gzip.compress(bytes(data)) if compressed else bytes(data))


# ------------------------------------------------------------------------------------- spacing


@pytest.mark.filterwarnings("ignore:Invalid value for VR DS")  # writing the invalid values on purpose
@pytest.mark.parametrize("spacing", [[0.0, 0.0], [-0.2, -0.2], ["nan", "nan"], ["inf", "0.2"], [0.2, 0.0]])
def test_invalid_pixel_spacing_of_a_file_is_refused(tmp_path, spacing):
    path = write_radiograph(np.linspace(0, 1, 30 * 40).reshape(30, 40), (0.2, 0.2), tmp_path / "x.dcm", DicomIdentity())
    dataset = pydicom.dcmread(path)
    dataset.PixelSpacing = spacing
    dataset.save_as(path)
    with pytest.raises(InvalidSpacingError, match=r"x\.dcm: PixelSpacing '.*': spacing must be positive and finite"):
        load_image(path)
    del dataset.PixelSpacing
    dataset.ImagerPixelSpacing = spacing
    dataset.save_as(path)
    with pytest.raises(InvalidSpacingError, match="ImagerPixelSpacing"):
        load_image(path)


@pytest.mark.filterwarnings("ignore:Invalid value for VR DS")
def test_invalid_slice_thickness_of_a_lone_slice_is_refused(tmp_path):
    files = write_series(tmp_path / "s", box_phantom(shape=(2, 8, 8), box=((0, 1), (2, 6), (2, 6))))
    dataset = pydicom.dcmread(files[0])
    for thickness in ("0", "-2", "nan"):
        dataset.SliceThickness = thickness
        dataset.save_as(files[0])
        with pytest.raises(InvalidSpacingError, match=rf"slice_0000\.dcm: SliceThickness '{thickness}'"):
            load_image(files[0])


@pytest.mark.parametrize("spacing", [[0.0, 0.8], [-0.8, -0.6]])
def test_invalid_pixel_spacing_in_a_series_names_the_slice(tmp_path, spacing):
    files = write_series(tmp_path / "s", box_phantom(shape=(5, 8, 8), box=((1, 4), (2, 6), (2, 6))))
    for file in files:
        dataset = pydicom.dcmread(file)
        dataset.PixelSpacing = spacing
        dataset.save_as(file)
    with pytest.raises(InvalidSpacingError, match=r"slice_0000\.dcm: PixelSpacing"):
        load_image(tmp_path / "s")
    files = write_series(tmp_path / "t", box_phantom(shape=(5, 8, 8), box=((1, 4), (2, 6), (2, 6))))
    dataset = pydicom.dcmread(files[3])
    dataset.PixelSpacing = spacing
    dataset.save_as(files[3])
    with pytest.raises(InvalidSpacingError, match=r"slice_0003\.dcm: PixelSpacing"):
        load_image(tmp_path / "t")


@pytest.mark.parametrize("pixdim", [0.0, -2.0, math.nan, math.inf])
def test_invalid_nifti_voxel_size_is_refused(tmp_path, pixdim):
    data = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6)
    for name, affine in (("pixdim.nii", None), ("sform.nii.gz", np.diag([2.0, 2.0, 2.0, 1.0]))):
        nib.save(nib.Nifti1Image(data, affine), tmp_path / name)
        patch_nifti_header(tmp_path / name, {80: ("<f", 2.0), 84: ("<f", pixdim), 88: ("<f", 2.0)})
        with pytest.raises(InvalidSpacingError, match=rf"{name}: voxel size \(pixdim\) 2, {pixdim:g}, 2"):
            load_image(tmp_path / name)


def test_zero_spacing_no_longer_crashes_preprocessing(tmp_path):
    path = write_radiograph(np.linspace(0, 1, 30 * 40).reshape(30, 40), (0.0, 0.0), tmp_path / "x.dcm", DicomIdentity())
    with pytest.raises(InvalidSpacingError, match=r"x\.dcm"):
        MedReCoImageProcessor().preprocess_one(path, "chest_xray")


# ----------------------------------------------------------------------- MONOCHROME1 twins


def _radiograph_pair(
    folder: Path, stored: np.ndarray, window: tuple[float, float] | None, slope: float = 1.0, intercept: float = 0.0
) -> tuple[Path, Path]:
    """A MONOCHROME2 radiograph and its MONOCHROME1 twin that every viewer shows alike: the twin stores
    c - s (c = 4095, the 12-bit range) and its window centre is K - centre, where K is c mapped
    through the rescale (K = slope * c + 2 * intercept: modality value m becomes K - m)."""
    c = 4095
    paths = []
    for name, values, photometric in (("m2.dcm", stored, "MONOCHROME2"), ("m1.dcm", c - stored, "MONOCHROME1")):
        path = write_radiograph(np.zeros(stored.shape), (0.2, 0.2), folder / name, DicomIdentity())
        dataset = pydicom.dcmread(path)
        dataset.PhotometricInterpretation = photometric
        dataset.PixelData = values.astype(np.uint16).tobytes()
        dataset.RescaleSlope, dataset.RescaleIntercept = slope, intercept
        del dataset.WindowCenter, dataset.WindowWidth
        if window is not None:
            center, width = window
            mirror = slope * c + 2 * intercept
            dataset.WindowCenter = center if photometric == "MONOCHROME2" else mirror - center
            dataset.WindowWidth = width
        dataset.save_as(path)
        paths.append(path)
    return paths[0], paths[1]


@pytest.mark.parametrize(
    ("window", "slope", "intercept"),
    [((1500.0, 1000.0), 1.0, 0.0), ((800.0, 300.0), 1.0, 0.0), ((1000.0, 2000.0), 2.0, -100.0), (None, 1.0, 0.0)],
)
def test_windowed_monochrome1_twin_normalises_like_monochrome2(tmp_path, window, slope, intercept):
    rng = np.random.default_rng(3)
    stored = np.clip(rng.normal(1500, 700, size=(48, 64)), 0, 4095).round()
    plain, twin = _radiograph_pair(tmp_path, stored, window, slope, intercept)
    processor = MedReCoImageProcessor(recipes={"chest_xray": {"size": [1, 48, 64]}})
    expected = processor.preprocess_one(plain, "chest_xray")
    actual = processor.preprocess_one(twin, "chest_xray")
    assert float((expected - actual).abs().max()) <= 1e-6
    assert 0.05 < float(expected.mean()) < 0.95  # the window matters: not all black or white
    loaded = load_image(twin)
    assert loaded.photometric == "MONOCHROME1" and any("MONOCHROME1 inverted" in w for w in loaded.warnings)


def test_monochrome1_series_is_inverted_alike_in_every_slice(tmp_path):
    volume = box_phantom(shape=(6, 12, 14), box=((1, 5), (3, 9), (4, 10)))
    volume[2] += 300  # slices of different content: a per-slice inversion would differ
    plain = load_image(write_series(tmp_path / "m2", volume)[0].parent)
    for file in write_series(tmp_path / "m1", volume):
        dataset = pydicom.dcmread(file)
        stored = dataset.pixel_array.astype(np.int32)
        dataset.PhotometricInterpretation = "MONOCHROME1"
        dataset.PixelData = (-1 - stored).astype(np.int16).tobytes()  # int16 range: c = -32768 + 32767 = -1
        dataset.save_as(file)
    inverted = load_image(tmp_path / "m1")
    np.testing.assert_array_equal(inverted.array, plain.array)


def test_a_png_over_the_size_limit_is_refused_as_too_large_not_as_unreadable(tmp_path):
    from PIL import Image

    path = tmp_path / "wide.png"
    Image.new("L", (2000, 2000)).save(path)
    with pytest.raises(ImageTooLargeError, match=r"wide\.png: a 2000x2000 image \(.*\) exceeds the reader's limit"):
        load_image(path, ReaderOptions(max_image_bytes=1_000_000))
    assert load_image(path).array.shape[-2:] == (2000, 2000)  # within the default limit it reads
