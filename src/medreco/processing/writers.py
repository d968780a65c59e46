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
from pydicom.uid import CTImageStorage, DigitalXRayImageStorageForPresentation, ExplicitVRLittleEndian, generate_uid

from ..atomic import atomic_path
from .geometry import LPS_TO_RAS


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


__all__ = ["DicomIdentity", "canonical_affine", "write_ct_series", "write_nifti", "write_radiograph"]
