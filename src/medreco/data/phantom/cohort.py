"""The synthetic cohort: patients with prior and current studies, as real files with reports.

Layout of a cohort folder:

    manifest.jsonl            one line per study: ids, modality, study day, image paths, report
    patients/<patient>/<study>/
        image.dcm, image.png          chest X-ray (DICOM DX and 8-bit PNG)
        dicom/slice_*.dcm, image.nii.gz   chest CT, abdominal CT (DICOM series and NIfTI, same geometry)
        dicom/<n>_AX_T1_SE/, dicom/<n>_AX_T2_TSE/, dicom/<n>_AX_FLAIR/, flair.nii.gz   brain MRI
        image.dcm, cine.dcm           ultrasound (one RGB or palette frame; a multi-frame loop)
        report.txt
    answerability.json        what the images show, per modality, entity and question dimension
                              (`answerability.py`); mining copies it into each question
    ground_truth/<study>.json  findings, attributes, change labels, report mentions: for
                               evaluation only, never for training

DICOM files carry fake names, IDs, birth dates, institutions and accession numbers, to exercise
the privacy rules; the manifest and ground truth use only pseudonymous codes and study days."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image
from tqdm.auto import tqdm

from ...atomic import write_text_atomically
from .answerability import ANSWERABILITY_FILE, answerability_table
from .dicom import DicomIdentity, canonical_affine, write_ct_series, write_nifti, write_radiograph
from .families import FAMILIES, write_family_report
from .findings import Finding, evolve, finding_types_for, sample_finding
from .render import Anatomy, ct_grid, render_radiograph, render_thorax_hu
from .reports import write_report

logger = logging.getLogger(__name__)

SUPPORTED_MODALITIES = ("chest_xray", "chest_ct", "abdominal_ct", "brain_mri", "ultrasound")
DEFAULT_MODALITIES = ("chest_xray", "chest_ct")
SIZES = {  # chest families; brain.py, abdomen.py and ultrasound.py hold their own sizes per name
    # chest X-ray pixel spacing (mm); chest CT voxel spacing (mm) along (D, H, W) before jitter
    "tiny": {"cxr_pixel_mm": 6.0, "ct_spacing": (14.0, 7.5, 7.5)},
    "small": {"cxr_pixel_mm": 1.5, "ct_spacing": (7.0, 3.75, 3.75)},
    "paper": {"cxr_pixel_mm": 0.8, "ct_spacing": (1.25, 0.7, 0.7)},
}
_FIRST = ["Alder", "Briony", "Caspian", "Delphine", "Evander", "Fenella", "Gideon", "Hesper", "Ignatius", "Juniper"]
_LAST = ["Quillfeather", "Marrowby", "Thistlewood", "Ashcombe", "Pennyworth", "Vantablack", "Oakhurst", "Wrenfield"]


@dataclass
class PhantomConfig:
    """num_patients: patients; studies_per_patient: time points per modality (>= 1);
    size: "tiny" (tests), "small" (demo) or "paper" (full resolution, slow); seed: everything
    is determined by it; patients_per_modality: a modality listed is given to the first N patients
    only (the demo's brain MRI, abdominal CT and ultrasound are smaller than its chest cohort)."""

    num_patients: int = 20
    studies_per_patient: int = 2
    modalities: tuple[str, ...] = DEFAULT_MODALITIES
    patients_per_modality: dict[str, int] = field(default_factory=dict)
    size: str = "small"
    seed: int = 0
    write_png: bool = True
    write_nifti: bool = True

    def __post_init__(self):
        unknown = set(self.modalities) - set(SUPPORTED_MODALITIES)
        if unknown:
            raise ValueError(f"the synthetic cohort has no {sorted(unknown)}; choose from {SUPPORTED_MODALITIES}")
        if self.size not in SIZES:
            raise ValueError(f"size must be one of {sorted(SIZES)}, got {self.size!r}")
        if self.num_patients < 1 or self.studies_per_patient < 1:
            raise ValueError("num_patients and studies_per_patient must be at least 1")
        if set(self.patients_per_modality) - set(self.modalities) or any(
            n < 1 for n in self.patients_per_modality.values()
        ):
            raise ValueError("patients_per_modality: positive counts for modalities of the cohort only")

    def patients_with(self, modality: str) -> int:
        return min(self.num_patients, self.patients_per_modality.get(modality, self.num_patients))


@dataclass
class StudyRecord:
    """One line of the manifest."""

    patient_id: str
    study_id: str
    modality: str
    study_day: int
    study_index: int
    prior_study_id: str | None
    image: str
    alternate_images: list[str] = field(default_factory=list)
    report: str = ""


def _identity(rng: np.random.Generator, patient_index: int) -> dict:
    return {
        "patient_name": f"{rng.choice(_LAST)}^{rng.choice(_FIRST)}",
        "patient_id": f"MRN{rng.integers(10**6, 10**7)}",
        "birth_date": f"19{rng.integers(30, 99)}{rng.integers(1, 13):02d}{rng.integers(1, 28):02d}",
        "sex": str(rng.choice(["F", "M"])),
        "institution": f"Synthetic General Hospital {patient_index % 3 + 1}",
    }


def generate_cohort(config: PhantomConfig, out_dir: str | Path, progress: bool = True) -> list[StudyRecord]:
    """Write the cohort under `out_dir` and return its manifest records."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ground_truth").mkdir(exist_ok=True)
    records: list[StudyRecord] = []
    total = config.studies_per_patient * sum(config.patients_with(m) for m in config.modalities)
    bar = tqdm(total=total, desc="synthetic studies", unit="study", disable=not progress)
    for patient_index in range(config.num_patients):
        rng = np.random.default_rng([config.seed, patient_index])
        patient_id = f"P{patient_index + 1:04d}"
        identity = _identity(rng, patient_index)
        anatomy = Anatomy.sample(rng)
        for modality in config.modalities:
            if patient_index >= config.patients_with(modality):
                continue
            records.extend(_write_timeline(config, out, rng, patient_id, identity, anatomy, modality, bar))
    bar.close()
    manifest = out / "manifest.jsonl"
    write_text_atomically(out / ANSWERABILITY_FILE, json.dumps(answerability_table(config.modalities), indent=1))
    write_text_atomically(manifest, "".join(json.dumps(asdict(r)) + "\n" for r in records))
    logger.info("wrote %d studies of %d patients to %s", len(records), config.num_patients, out)
    return records


def _write_timeline(config, out, rng, patient_id, identity, anatomy, modality, bar) -> list[StudyRecord]:
    family = FAMILIES.get(modality)  # brain MRI, abdominal CT, ultrasound (families.py)
    if family is not None:
        anatomy = family.patient(rng)
        types = [t for t in finding_types_for(modality) if family.applies(t.key, anatomy)]
        findings = [family.sample(t.key, rng, rng.random() < t.prevalence) for t in types]
    else:
        findings = [sample_finding(t.key, rng, rng.random() < t.prevalence) for t in finding_types_for(modality)]
    records, prior, prior_record, day = [], None, None, 0
    base_date = np.datetime64("2019-01-01") + int(rng.integers(0, 1500))
    for index in range(config.studies_per_patient):
        changes = None
        if prior is not None:
            evolved = [evolve(f, rng) for f in prior]
            findings = [f for f, _ in evolved]
            changes = {f.key: change for f, (_, change) in zip(prior, evolved) if change is not None}
            interval = int(rng.integers(14, 400))
            day += interval
        code = family.code if family else ("CXR" if modality == "chest_xray" else "CT")
        study_id = f"{patient_id}-{code}{index + 1}"
        folder = out / "patients" / patient_id / study_id
        interval = day - (prior_record.study_day if prior_record else 0)
        if family is not None:
            report, mentions = write_family_report(family, findings, rng, prior, changes, interval)
        else:
            report, mentions = write_report(modality, findings, rng, prior, changes, interval)
        description = family.series_description if family else ("PA" if modality == "chest_xray" else "CHEST CT")
        dicom_identity = DicomIdentity(
            **identity,
            accession=f"ACC{rng.integers(10**7, 10**8)}",
            study_date=str(base_date + day).replace("-", ""),
            series_description=description,
            study_uid=_uid(config.seed, study_id, "study"),
            series_uid=_uid(config.seed, study_id, "series"),
        )
        image, alternates = _write_images(config, folder, rng, anatomy, findings, modality, dicom_identity, study_id)
        (folder / "report.txt").write_text(report)
        record = StudyRecord(
            patient_id,
            study_id,
            modality,
            day,
            index,
            prior_record.study_id if prior_record else None,
            image,
            alternates,
            report,
        )
        truth = {
            **asdict(record),
            "findings": [f.to_dict() for f in findings],
            "changes_from_prior": changes or {},
            "mentions": mentions,
        }
        (out / "ground_truth" / f"{study_id}.json").write_text(json.dumps(truth, indent=1))
        records.append(record)
        prior, prior_record = findings, record
        bar.update()
    return records


def _uid(seed: int, study_id: str, kind: str) -> str:
    from pydicom.uid import generate_uid

    return generate_uid(entropy_srcs=[str(seed), study_id, kind])


def _write_images(
    config, folder: Path, rng, anatomy: Anatomy, findings: list[Finding], modality: str, identity, study_id
):
    folder.mkdir(parents=True, exist_ok=True)
    if modality in FAMILIES:
        return FAMILIES[modality].write_images(config, folder, rng, anatomy, findings, identity, f"{config.seed}")
    size = SIZES[config.size]
    root = folder.parent.parent.parent
    if modality == "chest_xray":
        spacing = size["cxr_pixel_mm"] * float(rng.uniform(0.9, 1.1))
        image = render_radiograph(anatomy, findings, spacing, rng, shift=tuple(rng.uniform(-6, 6, 2)))
        dicom = write_radiograph(
            image,
            (spacing, spacing),
            folder / "image.dcm",
            identity,
            monochrome1=bool(rng.random() < 0.3),
            uid_seed=f"{config.seed}:{study_id}",
        )
        alternates = []
        if config.write_png:
            Image.fromarray(np.round(image * 255).astype(np.uint8)).save(folder / "image.png")
            alternates.append(str((folder / "image.png").relative_to(root)))
        return str(dicom.relative_to(root)), alternates
    base = size["ct_spacing"]
    spacing = (
        base[0] * float(rng.choice([0.8, 1.0, 1.25])),
        base[1] * float(rng.uniform(0.85, 1.15)),
        base[2],
    )
    spacing = (spacing[0], spacing[1], spacing[1])  # square pixels, as CT has
    grid = ct_grid(spacing, shift=tuple(rng.uniform(-5, 5, 3)))
    hounsfield = np.round(render_thorax_hu(grid, anatomy, findings, rng))  # both files store integers
    origin_lps = (grid.origin[2], grid.origin[1], grid.origin[0])
    write_ct_series(
        hounsfield, spacing, folder / "dicom", identity, origin=origin_lps, uid_prefix_seed=f"{config.seed}"
    )
    alternates = []
    if config.write_nifti:
        write_nifti(hounsfield, canonical_affine(spacing, origin_lps), folder / "image.nii.gz")
        alternates.append(str((folder / "image.nii.gz").relative_to(root)))
    return str((folder / "dicom").relative_to(root)), alternates


def read_manifest(cohort_dir: str | Path) -> list[StudyRecord]:
    path = Path(cohort_dir) / "manifest.jsonl"
    return [StudyRecord(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def read_ground_truth(cohort_dir: str | Path, study_id: str) -> dict:
    return json.loads((Path(cohort_dir) / "ground_truth" / f"{study_id}.json").read_text())


__all__ = [
    "DEFAULT_MODALITIES",
    "PhantomConfig",
    "SIZES",
    "SUPPORTED_MODALITIES",
    "StudyRecord",
    "generate_cohort",
    "read_ground_truth",
    "read_manifest",
]
