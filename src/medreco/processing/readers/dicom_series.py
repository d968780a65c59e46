"""A folder of DICOM slices -> one volume: the folder's files grouped by series (each parsed once,
pixels decoded only for the series read), one series chosen (`ReaderOptions.series`, or the only one),
its slices checked for size, orientation and spacing, then sorted into a volume that is checked for
missing, duplicated and unevenly spaced slices. Series are shown by selectors that identify no one."""

from __future__ import annotations

import hashlib
import logging
import math
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pydicom

from ...errors import (
    ImageTooLargeError,
    InconsistentGeometryError,
    MissingSliceError,
    MultipleSeriesError,
    SeriesError,
    UnreadableImageError,
    UnsupportedImageError,
)
from ..geometry import ImageGeometry, MedicalImage, spacing_from_affine
from .base import ImageReader, ReaderOptions, _size_text, _typed_errors, finish_image
from .dicom import _orientation, _pixel_spacing, _Slice, assemble_volume, read_dicom_file
from .dicom_dataset import _attribute, _float_list, _int_attribute, read_dicom_dataset
from .dicom_pixels import _decode_pixels, _display_convention, _photometric

logger = logging.getLogger(__name__)


def _series_key(uid: str) -> str:
    """A selector for a series that identifies no one: the start of a hash of its SeriesInstanceUID."""
    return "key:" + hashlib.sha256(uid.encode()).hexdigest()[:8]


def list_dicom_series(folder: str | Path, options: ReaderOptions | None = None) -> list[dict]:
    """The series in a folder, as `medreco inspect` shows them: series number, modality, description,
    file count, and `selector`, the value of `ReaderOptions(series=...)` that reads it (no UIDs or
    patient data)."""
    series, _, _ = _scan_series(Path(folder), options or ReaderOptions(), headers_only=True)
    return _ordered_summaries(series)


def _ordered_summaries(series: dict[str, tuple[dict, list]]) -> list[dict]:
    summaries = [summary for summary, _ in series.values()]
    return sorted(summaries, key=lambda s: (s["series_number"] is None, s["series_number"] or 0, s["key"]))


def _scan_series(
    folder: Path, options: ReaderOptions, headers_only: bool = False
) -> tuple[dict[str, tuple[dict, list]], list[str], list[str]]:
    """Group a folder's DICOM images by series. Each file is parsed once; pixels are decoded later.
    Files that are not DICOM, or DICOM objects without an image (a DICOMDIR, a report), are skipped.
    Returns the series by SeriesInstanceUID, notes, and "name: problem" of each unreadable file."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith("."))
    groups: dict[str, list[tuple[Path, pydicom.Dataset]]] = defaultdict(list)
    unreadable: list[str] = []
    without_image: list[tuple[Path, str | None]] = []
    for file in files:
        try:
            header = read_dicom_dataset(file, stop_before_pixels=headers_only, options=options)
        except UnreadableImageError as error:
            unreadable.append(f"{file.relative_to(folder)}: {error.problem}")
            continue
        except UnsupportedImageError:
            without_image.append((file, None))
            continue
        uid = str(_attribute(header, "SeriesInstanceUID", "unknown"))
        if _attribute(header, "Rows") is None or _attribute(header, "Columns") is None:
            without_image.append((file, uid))
            continue
        groups[uid].append((file, header))
    not_images = 0
    for file, uid in without_image:  # in an image series, a file without image attributes is damaged
        if uid in groups:
            unreadable.append(f"{file.relative_to(folder)}: damaged (a slice without image attributes)")
        else:
            not_images += 1
    series = {}
    for uid, members in groups.items():
        header = members[0][1]
        summary = {
            "series_number": _int_attribute(header, "SeriesNumber"),
            "modality": str(_attribute(header, "Modality", "")),
            "description": str(_attribute(header, "SeriesDescription", "")),
            "files": len(members),
            "key": _series_key(uid),
        }
        series[uid] = (summary, members)
    numbers = [s["series_number"] for s, _ in series.values()]
    for summary, _ in series.values():
        number = summary["series_number"]
        summary["selector"] = str(number) if number is not None and numbers.count(number) == 1 else summary["key"]
    notes = []
    if unreadable:
        notes.append(f"{len(unreadable)} unreadable or non-DICOM file(s) ignored ({unreadable[0]}, ...)")
    if not_images:
        notes.append(f"{not_images} DICOM file(s) without an image (DICOMDIR, report, ...) ignored")
    return series, notes, unreadable


def _describe_series(summaries: list[dict]) -> str:
    parts = []
    for s in summaries:
        number = "no SeriesNumber" if s["series_number"] is None else f"series {s['series_number']}"
        description = f", {s['description']!r}" if s["description"] else ""
        parts.append(
            f"[{s['selector']}] {number}: {s['modality'] or 'unknown modality'}, {s['files']} file(s){description}"
        )
    return "; ".join(parts)


_SERIES_CHOICE_HINT = (
    "choose one with ReaderOptions(series=...), or --series ... on the command line, giving the value in brackets"
)


def _select_series(series: dict[str, tuple[dict, list]], wanted: int | str, folder: Path) -> tuple[dict, list]:
    """The one series `wanted` names: a SeriesNumber, a SeriesInstanceUID or its start, or a `key:...`."""
    text = str(wanted).strip()
    if isinstance(wanted, bool) or not text:
        raise SeriesError(folder, f"series={wanted!r} is not a series selector")
    if isinstance(wanted, int) or re.fullmatch(r"[+-]?\d+", text):
        number = int(text)
        matches = [uid for uid, (summary, _) in series.items() if summary["series_number"] == number]
        asked = f"series number {number}"
    elif text.lower().startswith("key:"):
        matches = [uid for uid, (summary, _) in series.items() if summary["key"] == text.lower()]
        asked = f"series {text.lower()}"
    elif re.fullmatch(r"[0-9.]+", text):
        matches = [uid for uid in series if uid.startswith(text)]
        asked = "a SeriesInstanceUID starting with the given value"
    else:
        matches, asked = _series_by_description(series, text)
    listing = _ordered_summaries(series)
    if not matches:
        raise SeriesError(folder, f"no {asked} here; found {_describe_series(listing)}")
    if len(matches) > 1:
        chosen = _ordered_summaries({uid: series[uid] for uid in matches})
        raise MultipleSeriesError(
            folder,
            f"{len(matches)} series match {asked}: {_describe_series(chosen)}; {_SERIES_CHOICE_HINT}",
            chosen,
        )
    return series[matches[0]]


def _series_by_description(series: dict[str, tuple[dict, list]], text: str) -> tuple[list[str], str]:
    """Series whose SeriesDescription is `text` (case-insensitive), else those whose description holds
    every word of `text` as a word ("FLAIR" selects "AX FLAIR", "t2 tse" selects "AX T2 TSE")."""
    wanted = text.lower()
    exact = [uid for uid, (summary, _) in series.items() if summary["description"].strip().lower() == wanted]
    if exact:
        return exact, f"series described {text!r}"
    words = set(re.split(r"[\s_\-/]+", wanted)) - {""}
    matches = [
        uid
        for uid, (summary, _) in series.items()
        if words <= set(re.split(r"[\s_\-/]+", summary["description"].lower()))
    ]
    return matches, f"series whose description has the word(s) {text!r}"


@dataclass
class DicomSeries:
    """The series `DicomSeriesReader.read` chose in a folder: its summary (as `list_dicom_series`
    shows it), its files with their parsed headers, notes about the folder, and "name: problem" of
    each unreadable file there (a skipped damaged slice explains a missing one)."""

    folder: Path
    summary: dict
    members: list[tuple[Path, pydicom.Dataset]]
    notes: list[str]
    unreadable: list[str]


class DicomSeriesReader(ImageReader[DicomSeries]):
    """A folder of DICOM slices -> one volume, checked for missing, duplicated and uneven slices."""

    def verify_suffix(self, path: Path) -> bool:
        """Any folder (whatever its name)."""
        return path.is_dir()

    def read(self, path: Path) -> DicomSeries:
        """The folder's series scanned (each file parsed once) and the one to read chosen."""
        series, notes, unreadable = _scan_series(path, self.options)
        if not series:
            raise UnreadableImageError(path, "no readable DICOM image in this folder")
        summary, members = _chosen_series(series, self.options, path)
        return DicomSeries(path, summary, members, notes, unreadable)

    def get_data(self, raw: DicomSeries) -> MedicalImage:
        """The slices checked against the first one, decoded, and sorted into a volume."""
        if len(raw.members) == 1:
            return _single_file_series(raw, self.options)
        options, notes, (first_file, first) = self.options, raw.notes, raw.members[0]
        rows, columns = _int_attribute(first, "Rows", 0), _int_attribute(first, "Columns", 0)
        _check_series_size(raw, rows, columns, options)
        orientation = _orientation(_attribute(first, "ImageOrientationPatient"))
        spacing, _ = _pixel_spacing(first, first_file)
        if orientation is None or spacing is None:
            raise InconsistentGeometryError(
                raw.folder, "slices lack ImageOrientationPatient or PixelSpacing: cannot place them"
            )
        slices = [_checked_slice(file, header, (rows, columns), orientation, spacing) for file, header in raw.members]
        frame_notes: list[str] = []
        for item, (_, dataset) in zip(slices, raw.members):
            item.pixels = _decode_pixels(dataset, item.source, frame_notes, options)
            if item.pixels.shape != (rows, columns):
                raise InconsistentGeometryError(item.source, "multi-frame or colour file inside a slice series")
        notes.extend(dict.fromkeys(frame_notes))  # each distinct note once, not once per slice
        volume, affine = _assembled(raw, slices, orientation, spacing, options)
        geometry = ImageGeometry(spacing=spacing_from_affine(affine), affine=affine)
        volume, window = _display_convention(volume, first, notes, first_file)
        modality, photometric = raw.summary["modality"], _photometric(first)
        return finish_image(volume, geometry, modality, raw.folder, photometric, notes, options, window)


@_typed_errors
def read_dicom_series(folder: str | Path, options: ReaderOptions | None = None) -> MedicalImage:
    """A folder of DICOM slices -> one volume, checked for missing, duplicated and uneven slices."""
    return DicomSeriesReader(options).load(folder)


def _chosen_series(
    series: dict[str, tuple[dict, list]], options: ReaderOptions, folder: Path
) -> tuple[dict, list[tuple[Path, pydicom.Dataset]]]:
    """The series `options.series` selects, else the folder's only one (several are refused, listed)."""
    if options.series is not None:
        return _select_series(series, options.series, folder)
    if len(series) > 1:
        listing = _ordered_summaries(series)
        raise MultipleSeriesError(
            folder,
            f"{len(series)} series in one folder: {_describe_series(listing)}; {_SERIES_CHOICE_HINT}",
            listing,
        )
    return next(iter(series.values()))


def _single_file_series(raw: DicomSeries, options: ReaderOptions) -> MedicalImage:
    """A series of one file (a lone slice, or a multi-frame object) read as that file, named after the
    folder, with the folder's notes first."""
    image = read_dicom_file(raw.members[0][0], options)
    image.source = str(raw.folder)
    image.warnings = raw.notes + image.warnings
    for note in raw.notes:
        logger.info("%s: %s", raw.folder, note)
    return image


def _check_series_size(raw: DicomSeries, rows: int, columns: int, options: ReaderOptions) -> None:
    """Refuse a series whose slices would hold more pixel data than `max_image_bytes`, before decoding."""
    bits = max(_int_attribute(raw.members[0][1], "BitsAllocated", 16) or 16, 1)
    claimed = rows * columns * len(raw.members) * math.ceil(bits / 8)
    if claimed > options.max_image_bytes:
        raise ImageTooLargeError(
            raw.folder,
            f"{len(raw.members)} slices of {rows}x{columns} pixels ({_size_text(claimed)}) exceed the reader's "
            f"limit of {_size_text(options.max_image_bytes)}; ReaderOptions(max_image_bytes=...) raises it",
        )


def _checked_slice(
    file: Path,
    header: pydicom.Dataset,
    size: tuple[int, int],
    orientation: tuple[np.ndarray, np.ndarray],
    spacing: np.ndarray,
) -> _Slice:
    """A slice of the series, its pixels not yet decoded, refused when its size, orientation or pixel
    spacing differs from the first slice's, or when it has no position."""
    rows, columns = _int_attribute(header, "Rows", 0), _int_attribute(header, "Columns", 0)
    if (rows, columns) != size:
        raise InconsistentGeometryError(file, f"slice size {rows}x{columns} differs from {size[0]}x{size[1]}")
    other = _orientation(_attribute(header, "ImageOrientationPatient"))
    if other is None or not (
        np.allclose(other[0], orientation[0], atol=1e-3) and np.allclose(other[1], orientation[1], atol=1e-3)
    ):
        raise InconsistentGeometryError(file, "slice orientation differs from the rest of the series")
    other_spacing, _ = _pixel_spacing(header, file)
    if other_spacing is None or not np.allclose(other_spacing, spacing, rtol=1e-3):
        raise InconsistentGeometryError(file, "pixel spacing differs from the rest of the series")
    position = _float_list(_attribute(header, "ImagePositionPatient", []), 3)
    if position is None:
        raise InconsistentGeometryError(file, "slice has no ImagePositionPatient")
    return _Slice(position, None, file)


def _assembled(
    raw: DicomSeries,
    slices: list[_Slice],
    orientation: tuple[np.ndarray, np.ndarray],
    spacing: np.ndarray,
    options: ReaderOptions,
) -> tuple[np.ndarray, np.ndarray]:
    """`assemble_volume`; a missing slice names the folder's unreadable files, which may be that slice."""
    try:
        return assemble_volume(slices, *orientation, spacing, raw.folder, options, raw.notes)
    except MissingSliceError as error:
        if not raw.unreadable:
            raise
        damaged_first = sorted(raw.unreadable, key=lambda entry: ": not a DICOM file" in entry)
        skipped = f"{len(raw.unreadable)} unreadable file(s) were skipped: {'; '.join(damaged_first[:3])}"
        raise MissingSliceError(raw.folder, f"{error.problem}; a damaged slice? {skipped}") from None
