"""Small real DICOM/NIfTI inputs written by medreco's writers, for the I/O tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pydicom
from pydicom.uid import generate_uid

from medreco.data.phantom.dicom import DicomIdentity, canonical_affine, write_ct_series, write_nifti

FAKE_IDENTITY = dict(
    patient_name="Zebedee^Quixote",
    patient_id="PID-99173",
    birth_date="19421107",
    institution="St Elsewhere General",
    accession="ACC-55510",
)


def box_phantom(shape=(20, 40, 50), box=((5, 15), (10, 30), (15, 35)), inside=400.0, outside=-1000.0) -> np.ndarray:
    volume = np.full(shape, outside, dtype=np.float32)
    (d0, d1), (h0, h1), (w0, w1) = box
    volume[d0:d1, h0:h1, w0:w1] = inside
    return volume


def write_series(folder: Path, volume: np.ndarray, spacing=(2.0, 0.8, 0.6), series_number=1, **identity) -> list[Path]:
    identity = DicomIdentity(series_number=series_number, series_uid=generate_uid(), **{**FAKE_IDENTITY, **identity})
    return write_ct_series(volume, spacing, folder, identity, origin=(-20.0, -15.0, 40.0))


def write_nifti_volume(path: Path, volume: np.ndarray, spacing=(2.0, 0.8, 0.6)) -> Path:
    return write_nifti(volume, canonical_affine(spacing, (-20.0, -15.0, 40.0)), path, dtype=np.float32)


def mirror_series_left_right(files: list[Path]) -> None:
    """Rewrite a standard axial series with columns running toward the patient's right instead of
    left (ImageOrientationPatient row cosine -x), the pixels mirrored to match: the same anatomy
    stored the other way round."""
    for file in files:
        dataset = pydicom.dcmread(file)
        pixels = dataset.pixel_array[:, ::-1].copy()
        columns, spacing = dataset.Columns, float(dataset.PixelSpacing[1])
        x, y, z = (float(v) for v in dataset.ImagePositionPatient)
        dataset.ImagePositionPatient = [x + (columns - 1) * spacing, y, z]
        dataset.ImageOrientationPatient = [-1, 0, 0, 0, 1, 0]
        dataset.PixelData = pixels.tobytes()
        dataset.save_as(file)
