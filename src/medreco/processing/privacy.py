"""Patient privacy: which DICOM attributes identify a person, and de-identified export.

medreco never copies these values into its outputs (images, caches, manifests, logs, errors,
model cards). `deidentify` prepares DICOM files for sharing, in the spirit of the DICOM PS3.15
basic profile: identifying attributes removed or blanked, private tags removed, UIDs replaced
by stable pseudonyms so a study stays a study."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pydicom

from ..atomic import atomic_path

IDENTIFYING_KEYWORDS = (
    "PatientName",
    "PatientID",
    "IssuerOfPatientID",
    "OtherPatientIDs",
    "OtherPatientIDsSequence",
    "OtherPatientNames",
    "PatientBirthDate",
    "PatientBirthTime",
    "PatientBirthName",
    "PatientMotherBirthName",
    "PatientAddress",
    "PatientTelephoneNumbers",
    "MilitaryRank",
    "EthnicGroup",
    "PatientReligiousPreference",
    "MedicalRecordLocator",
    "InstitutionName",
    "InstitutionAddress",
    "InstitutionalDepartmentName",
    "ReferringPhysicianName",
    "ReferringPhysicianAddress",
    "ReferringPhysicianTelephoneNumbers",
    "PerformingPhysicianName",
    "NameOfPhysiciansReadingStudy",
    "OperatorsName",
    "PhysiciansOfRecord",
    "RequestingPhysician",
    "AccessionNumber",
    "StudyID",
    "StudyDate",
    "SeriesDate",
    "AcquisitionDate",
    "ContentDate",
    "AcquisitionDateTime",
    "StudyTime",
    "SeriesTime",
    "AcquisitionTime",
    "ContentTime",
    "StationName",
    "DeviceSerialNumber",
    "RequestAttributesSequence",
    "AdmissionID",
    "PatientComments",
    "AdditionalPatientHistory",
)
UID_KEYWORDS = ("StudyInstanceUID", "SeriesInstanceUID", "SOPInstanceUID", "FrameOfReferenceUID")
_UID_PREFIX = "2.25."  # UUID-derived UIDs need no registered root


def pseudonymous_uid(uid: str, salt: str) -> str:
    """A stable replacement UID: the same input and salt always give the same output."""
    digest = hashlib.sha256(f"{salt}:{uid}".encode()).hexdigest()
    return _UID_PREFIX + str(int(digest[:32], 16))


def deidentify(dataset: pydicom.Dataset, salt: str = "medreco") -> pydicom.Dataset:
    """Remove identifying attributes and private tags in place, pseudonymise UIDs; returns the dataset.
    Use a secret `salt` per export so pseudonyms cannot be recomputed from the original UIDs."""
    for keyword in IDENTIFYING_KEYWORDS:
        if keyword in dataset:
            delattr(dataset, keyword)
    dataset.remove_private_tags()
    for keyword in UID_KEYWORDS:
        if keyword in dataset:
            setattr(dataset, keyword, pseudonymous_uid(str(getattr(dataset, keyword)), salt))
    if getattr(dataset, "file_meta", None) is not None and "SOPInstanceUID" in dataset:
        dataset.file_meta.MediaStorageSOPInstanceUID = dataset.SOPInstanceUID
    dataset.PatientIdentityRemoved = "YES"
    dataset.DeidentificationMethod = "medreco: identity, private tags removed; UIDs pseudonymised"
    return dataset


def deidentify_file(source: str | Path, destination: str | Path, salt: str = "medreco") -> Path:
    """De-identify one DICOM file into `destination` (written atomically)."""
    from .readers import read_dicom_dataset

    dataset = deidentify(read_dicom_dataset(Path(source)), salt)
    destination = Path(destination)
    with atomic_path(destination) as temporary:
        dataset.save_as(temporary, enforce_file_format=True)
    return destination


def deidentify_tree(source: str | Path, destination: str | Path, salt: str = "medreco") -> int:
    """De-identify a DICOM file, or every file of a folder into the same layout; returns the file count."""
    source, destination = Path(source), Path(destination)
    files = [p for p in source.rglob("*") if p.is_file()] if source.is_dir() else [source]
    for file in files:
        deidentify_file(file, destination / file.relative_to(source) if source.is_dir() else destination, salt)
    return len(files)


def identifying_values(dataset: pydicom.Dataset) -> list[str]:
    """The non-empty identifying values a dataset holds (to check that none leaks)."""
    values = []
    for keyword in IDENTIFYING_KEYWORDS:
        value = dataset.get(keyword)
        if value not in (None, "") and not isinstance(value, pydicom.Sequence):
            values.append(str(value))
    return values


__all__ = [
    "IDENTIFYING_KEYWORDS",
    "deidentify",
    "deidentify_file",
    "deidentify_tree",
    "identifying_values",
    "pseudonymous_uid",
]
