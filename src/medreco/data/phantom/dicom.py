"""Writing real DICOM and NIfTI files: synthetic studies, test fixtures, de-identified exports.

Files are written atomically (a temporary name, then a rename), so an interrupted run never
leaves a half-written image where a reader would find it."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

import nibabel as nib
import numpy as np
import pydicom
from pydicom.dataset import FileMetaDataset
from pydicom.uid import (
    CTImageStorage,
    DigitalXRayImageStorageForPresentation,
    ExplicitVRLittleEndian,
    MRImageStorage,
    UltrasoundImageStorage,
    UltrasoundMultiFrameImageStorage,
    generate_uid,
)

from ...atomic import atomic_path
from ...processing.geometry import LPS_TO_RAS


@dataclass
class DicomIdentity:
    """The patient and study attributes a DICOM writer stamps on every file (fake in synthetic data)."""

    patient_name: str = "Anonymous"
    patient_id: str = "0"
    birth_date: str = "19000101"
    sex: str = "O"
    institution: str = ""
    accession: str = ""
    study_date: str = "20000101"
    study_uid: str = field(default_factory=generate_uid)
    series_uid: str = field(default_factory=generate_uid)
    series_number: int = 1
    series_description: str = ""


def _base_dataset(sop_class: str, modality: str, identity: DicomIdentity, sop_uid: str) -> pydicom.Dataset:
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = sop_class
    meta.MediaStorageSOPInstanceUID = sop_uid
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    dataset = pydicom.Dataset()
    dataset.file_meta = meta
    dataset.SOPClassUID = sop_class
    dataset.SOPInstanceUID = sop_uid
    dataset.Modality = modality
    dataset.PatientName = identity.patient_name
    dataset.PatientID = identity.patient_id
    dataset.PatientBirthDate = identity.birth_date
    dataset.PatientSex = identity.sex
    dataset.InstitutionName = identity.institution
    dataset.AccessionNumber = identity.accession
    dataset.StudyDate = dataset.SeriesDate = identity.study_date
    dataset.StudyTime = "120000"
    dataset.StudyInstanceUID = identity.study_uid
    dataset.SeriesInstanceUID = identity.series_uid
    dataset.SeriesNumber = identity.series_number
    dataset.SeriesDescription = identity.series_description
    dataset.ContentDate = dt.date.today().strftime("%Y%m%d")
    return dataset


def _set_pixels(dataset: pydicom.Dataset, pixels: np.ndarray, photometric: str = "MONOCHROME2") -> None:
    dataset.Rows, dataset.Columns = pixels.shape
    dataset.SamplesPerPixel = 1
    dataset.PhotometricInterpretation = photometric
    dataset.BitsAllocated = 16
    dataset.BitsStored = 16
    dataset.HighBit = 15
    dataset.PixelRepresentation = 1 if pixels.dtype == np.int16 else 0
    dataset.PixelData = np.ascontiguousarray(pixels).tobytes()


def _save(dataset: pydicom.Dataset, path: Path) -> Path:
    with atomic_path(path) as temporary:
        dataset.save_as(temporary, enforce_file_format=True)
    return path


def write_ct_series(
    hounsfield: np.ndarray,
    spacing: tuple[float, float, float],
    folder: str | Path,
    identity: DicomIdentity,
    origin: tuple[float, float, float] = (0.0, 0.0, 0.0),
    uid_prefix_seed: str | None = None,
) -> list[Path]:
    """A (D, H, W) volume in HU, canonical orientation (D toward superior), as one axial CT file per
    slice with standard orientation, stored as int16 with RescaleIntercept -1024."""
    folder = Path(folder)
    depth = hounsfield.shape[0]
    slice_spacing, row_spacing, column_spacing = spacing
    paths = []
    for index in range(depth):
        seed = None if uid_prefix_seed is None else [f"{uid_prefix_seed}:{identity.series_uid}:{index}"]
        dataset = _base_dataset(CTImageStorage, "CT", identity, generate_uid(entropy_srcs=seed))
        dataset.ImageOrientationPatient = [1, 0, 0, 0, 1, 0]
        dataset.ImagePositionPatient = [origin[0], origin[1], origin[2] + index * slice_spacing]
        dataset.PixelSpacing = [row_spacing, column_spacing]
        dataset.SliceThickness = slice_spacing
        dataset.InstanceNumber = index + 1
        dataset.FrameOfReferenceUID = generate_uid(entropy_srcs=[identity.study_uid, "frame-of-reference"])
        dataset.RescaleIntercept = -1024
        dataset.RescaleSlope = 1
        dataset.RescaleType = "HU"
        stored = np.clip(np.round(hounsfield[index] + 1024), -32768, 32767).astype(np.int16)
        _set_pixels(dataset, stored)
        paths.append(_save(dataset, folder / f"slice_{index:04d}.dcm"))
    return paths


def write_radiograph(
    image: np.ndarray,
    pixel_spacing: tuple[float, float],
    path: str | Path,
    identity: DicomIdentity,
    monochrome1: bool = False,
    uid_seed: str | None = None,
) -> Path:
    """A 2D image in [0, 1] as a 12-bit digital radiograph (optionally MONOCHROME1, as many CR/DX are)."""
    seed = None if uid_seed is None else [uid_seed]
    dataset = _base_dataset(DigitalXRayImageStorageForPresentation, "DX", identity, generate_uid(entropy_srcs=seed))
    stored = np.clip(np.round(image * 4095), 0, 4095).astype(np.uint16)
    if monochrome1:
        stored = 4095 - stored
    _set_pixels(dataset, stored, "MONOCHROME1" if monochrome1 else "MONOCHROME2")
    dataset.BitsStored = 12
    dataset.HighBit = 11
    dataset.ImagerPixelSpacing = list(pixel_spacing)
    dataset.PixelSpacing = list(pixel_spacing)
    dataset.ViewPosition = "PA"
    dataset.WindowCenter = 2048
    dataset.WindowWidth = 4096
    return _save(dataset, Path(path))


@dataclass(frozen=True)
class MRSequence:
    """The acquisition attributes an MR scanner stamps on a series of one pulse sequence."""

    description: str
    scanning_sequence: tuple[str, ...]
    sequence_variant: tuple[str, ...]
    sequence_name: str
    echo_time: float
    repetition_time: float
    inversion_time: float | None = None
    echo_train_length: int = 1
    flip_angle: float = 90.0


# Descriptions as a GE/Siemens console exports them; each names its contrast by one word
# (T1, T2, FLAIR), which is what `ReaderOptions(series="FLAIR")` selects on.
MR_SEQUENCES: dict[str, MRSequence] = {
    "T1": MRSequence("AX T1 SE", ("SE",), ("SP",), "*se2d1", 12.0, 550.0),
    "T2": MRSequence("AX T2 TSE", ("SE",), ("SK", "SP"), "*tse2d1_15", 102.0, 4500.0, echo_train_length=15),
    "FLAIR": MRSequence(
        "AX FLAIR", ("SE", "IR"), ("SK", "SP", "MP"), "*tir2d1_16", 125.0, 9000.0, 2500.0, echo_train_length=16
    ),
}


def write_mr_series(
    volumes: dict[str, np.ndarray],
    spacing: tuple[float, float, float],
    folder: str | Path,
    identity: DicomIdentity,
    origin: tuple[float, float, float] = (0.0, 0.0, 0.0),
    one_folder: bool = False,
    uid_seed: str | None = None,
    field_strength: float = 1.5,
) -> dict[str, Path]:
    """Canonical (D, H, W) magnitude volumes, one per sequence (keys of `MR_SEQUENCES`: T1, T2,
    FLAIR, ...), as an MR study is exported: one axial series per sequence (MR Image Storage,
    unsigned 16-bit, no rescale), numbered 2, 3, 4... in acquisition order, with its description,
    protocol and sequence timing; slices are written head first (InstanceNumber 1 is the most
    superior), as most consoles do. All series share the study's frame of reference.

    `one_folder=False`: each series in its own sub-folder `<number>_<description>/IM00001.dcm ...`;
    `one_folder=True`: every series' files in `folder` itself, named `S<series>I<instance>.dcm` (readers
    must then select a series).
    Returns the folder of each sequence (all the same with `one_folder`)."""
    folder = Path(folder)
    slice_spacing, row_spacing, column_spacing = spacing
    frame_of_reference = generate_uid(entropy_srcs=[identity.study_uid, "frame-of-reference"])
    folders = {}
    for number, (name, volume) in enumerate(volumes.items(), start=identity.series_number + 1):
        sequence = MR_SEQUENCES.get(name) or MRSequence(name, ("GR",), ("NONE",), name, 5.0, 20.0)
        series_uid = generate_uid(entropy_srcs=None if uid_seed is None else [uid_seed, identity.series_uid, name])
        series = DicomIdentity(**{**identity.__dict__, "series_uid": series_uid, "series_number": number})
        series.series_description = sequence.description
        target = folder if one_folder else folder / f"{number:03d}_{sequence.description.replace(' ', '_')}"
        stored = np.clip(np.round(np.asarray(volume, dtype=np.float64)), 0, 65535).astype(np.uint16)
        depth = stored.shape[0]
        high = float(np.percentile(stored, 99.5)) or 1.0
        for order, index in enumerate(range(depth - 1, -1, -1)):  # head first
            seed = None if uid_seed is None else [f"{uid_seed}:{series_uid}:{index}"]
            dataset = _base_dataset(MRImageStorage, "MR", series, generate_uid(entropy_srcs=seed))
            dataset.ImageType = ["ORIGINAL", "PRIMARY", "M", "ND"]
            dataset.ProtocolName = sequence.description
            dataset.ScanningSequence = list(sequence.scanning_sequence)
            dataset.SequenceVariant = list(sequence.sequence_variant)
            dataset.ScanOptions = ["IR"] if sequence.inversion_time else ""
            dataset.MRAcquisitionType = "2D"
            dataset.SequenceName = sequence.sequence_name
            dataset.EchoTime = sequence.echo_time
            dataset.RepetitionTime = sequence.repetition_time
            if sequence.inversion_time is not None:
                dataset.InversionTime = sequence.inversion_time
            dataset.EchoTrainLength = sequence.echo_train_length
            dataset.FlipAngle = sequence.flip_angle
            dataset.MagneticFieldStrength = field_strength
            dataset.ImagingFrequency = round(42.577478 * field_strength, 6)
            dataset.ImagedNucleus = "1H"
            dataset.ImageOrientationPatient = [1, 0, 0, 0, 1, 0]
            z = origin[2] + index * slice_spacing
            dataset.ImagePositionPatient = [origin[0], origin[1], z]
            dataset.SliceLocation = z
            dataset.PixelSpacing = [row_spacing, column_spacing]
            dataset.SliceThickness = slice_spacing
            dataset.SpacingBetweenSlices = slice_spacing
            dataset.InstanceNumber = order + 1
            dataset.FrameOfReferenceUID = frame_of_reference
            dataset.WindowCenter = round(high / 2)
            dataset.WindowWidth = round(high)
            _set_pixels(dataset, stored[index])
            filename = f"S{number:03d}I{order + 1:05d}.dcm" if one_folder else f"IM{order + 1:05d}.dcm"
            _save(dataset, target / filename)
        folders[name] = target
    return folders


def _palette(dataset: pydicom.Dataset) -> None:
    """A 256-entry palette with the slight warm tint many ultrasound consoles use (16-bit entries)."""
    levels = np.arange(256, dtype=np.float64)
    for colour, gain in (("Red", 1.0), ("Green", 0.94), ("Blue", 0.82)):
        setattr(dataset, f"{colour}PaletteColorLookupTableDescriptor", [256, 0, 16])
        table = np.round(levels * gain * 257).astype("<u2")
        setattr(dataset, f"{colour}PaletteColorLookupTableData", table.tobytes())


def write_ultrasound(
    image: np.ndarray,
    pixel_spacing_mm: float | tuple[float, float],
    path: str | Path,
    identity: DicomIdentity,
    photometric: str = "RGB",
    region: tuple[int, int, int, int] | None = None,
    frame_time_ms: float = 33.3,
    burned_in_annotation: bool = True,
    planar_configuration: int = 0,
    transducer: str = "C5-1",
    uid_seed: str | None = None,
) -> Path:
    """An ultrasound image as consoles store it: 8-bit, US Image Storage for one frame or US
    Multi-frame Image Storage (NumberOfFrames, FrameTime) for a cine loop.

    image: greyscale in [0, 1], (H, W) or frames (N, H, W); or 8-bit RGB (H, W, 3) / (N, H, W, 3)
      (e.g. with coloured annotations). photometric: "RGB" (SamplesPerPixel 3, interleaved, or
      planar with `planar_configuration=1`), "PALETTE COLOR" (8-bit indices and a palette) or
      "MONOCHROME2"; colour input is reduced to its luminance for the last two.
    pixel_spacing_mm: (row, column) spacing of the imaged region; written, as scanners do, only in
      the SequenceOfUltrasoundRegions (PhysicalDeltaX/Y in cm, PhysicalUnits 3), not as PixelSpacing.
    region: (x0, y0, x1, y1), the pixel box of the tissue image (default: the whole image). A
      second region (the console's greyscale bar, without physical units) is listed before it.
    burned_in_annotation: the image holds text burned into its pixels (BurnedInAnnotation YES)."""
    frames = _ultrasound_frames(image)
    count, rows, columns = frames.shape[:3]
    seed = None if uid_seed is None else [uid_seed]
    sop_class = UltrasoundMultiFrameImageStorage if count > 1 else UltrasoundImageStorage
    dataset = _base_dataset(sop_class, "US", identity, generate_uid(entropy_srcs=seed))
    dataset.ImageType = ["ORIGINAL", "PRIMARY", "ABDOMINAL", "0001"]
    dataset.Rows, dataset.Columns = rows, columns
    dataset.BitsAllocated = dataset.BitsStored = 8
    dataset.HighBit = 7
    dataset.PixelRepresentation = 0
    dataset.BurnedInAnnotation = "YES" if burned_in_annotation else "NO"
    dataset.LossyImageCompression = "00"
    dataset.TransducerData = [transducer, "", ""]
    dataset.InstanceNumber = 1
    if count > 1:
        dataset.NumberOfFrames = count
        dataset.FrameTime = frame_time_ms
        dataset.FrameIncrementPointer = pydicom.tag.Tag("FrameTime")
        dataset.CineRate = round(1000.0 / frame_time_ms)
        dataset.RecommendedDisplayFrameRate = round(1000.0 / frame_time_ms)
    _set_ultrasound_pixels(dataset, frames, photometric, planar_configuration)
    dataset.SequenceOfUltrasoundRegions = _ultrasound_regions(pixel_spacing_mm, region, rows, columns)
    return _save(dataset, Path(path))


def _ultrasound_frames(image: np.ndarray) -> np.ndarray:
    """(N, H, W, 3) uint8 frames of `write_ultrasound`'s input: 8-bit RGB as given, greyscale in
    [0, 1] scaled to 8 bits and repeated over the three channels."""
    array = np.asarray(image)
    colour_input = array.dtype == np.uint8 and array.shape[-1] == 3 and array.ndim in (3, 4)
    if colour_input:
        rgb = array
    else:
        grey = np.clip(np.round(np.asarray(array, dtype=np.float64) * 255), 0, 255).astype(np.uint8)
        rgb = np.repeat(grey[..., None], 3, axis=-1)
    return rgb if rgb.ndim == 4 else rgb[None]


def _set_ultrasound_pixels(
    dataset: pydicom.Dataset, frames: np.ndarray, photometric: str, planar_configuration: int
) -> None:
    """The 8-bit pixel data in `photometric`: the RGB frames (interleaved, or planar), or their
    luminance as palette indices or MONOCHROME2, padded to an even length."""
    if photometric == "RGB":
        dataset.SamplesPerPixel = 3
        dataset.PhotometricInterpretation = "RGB"
        dataset.PlanarConfiguration = planar_configuration
        data = frames.transpose(0, 3, 1, 2) if planar_configuration == 1 else frames
    elif photometric in ("PALETTE COLOR", "MONOCHROME2"):
        dataset.SamplesPerPixel = 1
        dataset.PhotometricInterpretation = photometric
        luminance = np.round(frames.astype(np.float32) @ np.array([0.299, 0.587, 0.114], dtype=np.float32))
        data = np.clip(luminance, 0, 255).astype(np.uint8)
        if photometric == "PALETTE COLOR":
            _palette(dataset)
    else:
        raise ValueError(f"photometric must be RGB, PALETTE COLOR or MONOCHROME2, not {photometric!r}")
    payload = np.ascontiguousarray(data, dtype=np.uint8).tobytes()
    dataset.PixelData = payload + (b"\0" if len(payload) % 2 else b"")


def _ultrasound_regions(
    pixel_spacing_mm: float | tuple[float, float], region: tuple[int, int, int, int] | None, rows: int, columns: int
) -> list[pydicom.Dataset]:
    """The SequenceOfUltrasoundRegions: the console's greyscale bar (a graphics region without
    physical units), then the tissue image with its spacing in cm."""
    row_mm, column_mm = (pixel_spacing_mm, pixel_spacing_mm) if np.isscalar(pixel_spacing_mm) else pixel_spacing_mm
    x0, y0, x1, y1 = region if region is not None else (0, 0, columns - 1, rows - 1)
    bar = pydicom.Dataset()
    bar.RegionSpatialFormat, bar.RegionDataType, bar.RegionFlags = 0, 0, 0
    bar.RegionLocationMinX0, bar.RegionLocationMinY0 = max(columns - 12, 0), 0
    bar.RegionLocationMaxX1, bar.RegionLocationMaxY1 = columns - 1, min(60, rows - 1)
    bar.PhysicalUnitsXDirection = bar.PhysicalUnitsYDirection = 0
    bar.PhysicalDeltaX = bar.PhysicalDeltaY = 0.0
    tissue = pydicom.Dataset()
    tissue.RegionSpatialFormat, tissue.RegionDataType, tissue.RegionFlags = 1, 1, 0
    tissue.RegionLocationMinX0, tissue.RegionLocationMinY0 = int(x0), int(y0)
    tissue.RegionLocationMaxX1, tissue.RegionLocationMaxY1 = int(x1), int(y1)
    tissue.PhysicalUnitsXDirection = tissue.PhysicalUnitsYDirection = 3  # cm
    tissue.PhysicalDeltaX = float(column_mm) / 10.0
    tissue.PhysicalDeltaY = float(row_mm) / 10.0
    tissue.ReferencePixelX0, tissue.ReferencePixelY0 = int((x0 + x1) // 2), int(y0)
    return [bar, tissue]


def canonical_affine(
    spacing: tuple[float, float, float], origin_lps: tuple[float, float, float] = (0, 0, 0)
) -> np.ndarray:
    """The RAS affine of a canonical (D, H, W) = (S, P, L) array with this spacing."""
    affine_lps = np.eye(4)
    affine_lps[:3, 0] = (0, 0, spacing[0])
    affine_lps[:3, 1] = (0, spacing[1], 0)
    affine_lps[:3, 2] = (spacing[2], 0, 0)
    affine_lps[:3, 3] = origin_lps
    return LPS_TO_RAS @ affine_lps


def write_nifti(volume: np.ndarray, affine_dhw: np.ndarray, path: str | Path, dtype=np.int16) -> Path:
    """A canonical (D, H, W) volume with its (d, h, w) -> RAS affine, stored the usual NIfTI way:
    array axes (i, j, k) = (W, H, D)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = np.asarray(volume).transpose(2, 1, 0)
    affine_ijk = affine_dhw[:, [2, 1, 0, 3]]
    image = nib.Nifti1Image(
        np.round(data).astype(dtype) if np.issubdtype(dtype, np.integer) else data.astype(dtype), affine_ijk
    )
    image.set_qform(affine_ijk, code=1)
    image.set_sform(affine_ijk, code=1)
    with atomic_path(path) as temporary:
        nib.save(image, temporary)
    return path


__all__ = [
    "MR_SEQUENCES",
    "DicomIdentity",
    "canonical_affine",
    "write_ct_series",
    "write_mr_series",
    "write_nifti",
    "write_radiograph",
    "write_ultrasound",
]
