import logging
import shutil
from io import BytesIO

import numpy as np
import pydicom
import pytest
from pydicom.data import get_testdata_file
from pydicom.datadict import dictionary_VR, tag_for_keyword
from pydicom.dataset import Dataset
from pydicom.sequence import Sequence
from pydicom.uid import CTImageStorage

from io_helpers import FAKE_IDENTITY, box_phantom, write_series
from medreco.cli import main
from medreco.data.phantom.dicom import DicomIdentity, write_radiograph
from medreco.errors import MedicalImageError, UnreadableImageError
from medreco.processing import MedReCoImageProcessor, deidentify, deidentify_file, deidentify_tree, load_image, privacy
from medreco.processing.privacy import (
    IDENTIFYING_KEYWORDS,
    basic_profile,
    identifying_values,
    pseudonymous_uid,
    rule_for,
)
from medreco.processing.readers import read_dicom_series

SECRETS = ["Zebedee", "Quixote", "PID-99173", "19421107", "St Elsewhere", "ACC-55510"]
MARKER_UID_ROOT = "1.999.7777."


def assert_no_secret_under(folder):
    for path in folder.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for secret in SECRETS:
                assert secret.encode() not in data, f"{secret!r} leaked into {path}"


def test_identifying_values_never_reach_outputs(tmp_path, caplog, capsys):
    study = tmp_path / "input"
    files = write_series(study / "ct", box_phantom())
    write_radiograph(np.random.rand(40, 40), (0.2, 0.2), study / "cxr.dcm", DicomIdentity(**FAKE_IDENTITY))
    assert all(secret in str(identifying_values(pydicom.dcmread(files[0]))) for secret in ["Zebedee", "PID-99173"])

    out = tmp_path / "out"
    caplog.set_level(logging.DEBUG)
    processor = MedReCoImageProcessor(
        recipes={"chest_ct": {"size": [20, 32, 32], "spacing": [2.0, 1.5, 1.5]}, "chest_xray": {"size": [1, 32, 32]}},
        tensor_cache_dir=str(out / "cache"),
    )
    processor([study / "ct"], "chest_ct")
    processor([study / "cxr.dcm"], "chest_xray")
    processor.save_pretrained(out / "processor")
    for target in (study / "ct", study / "cxr.dcm"):
        assert main(["inspect", str(target), "--json"]) == 0
    assert (
        main(["preprocess", str(study / "cxr.dcm"), "--modality", "chest_xray", "--out", str(out / "cxr.safetensors")])
        == 0
    )
    files[5].unlink()  # errors must not leak either
    with pytest.raises(MedicalImageError) as caught:
        load_image(study / "ct")
    assert main(["inspect", str(study / "ct")]) == 2

    captured = capsys.readouterr()
    (out / "stdout.txt").write_text(captured.out + captured.err)
    (out / "log.txt").write_text("\n".join(r.getMessage() for r in caplog.records))
    (out / "error.txt").write_text(str(caught.value))
    assert_no_secret_under(out)


def test_deidentify_removes_identity_and_keeps_pixels(tmp_path):
    files = write_series(tmp_path / "ct", box_phantom())
    assert main(["deidentify", str(tmp_path / "ct"), str(tmp_path / "clean")]) == 0
    assert_no_secret_under(tmp_path / "clean")
    cleaned = [pydicom.dcmread(p) for p in sorted((tmp_path / "clean").glob("*.dcm"))]
    original = pydicom.dcmread(files[0])
    # The profile keeps some identifying attributes present but empty (Z) or dummy (D): check values, not presence.
    assert identifying_values(cleaned[0]) == []
    assert "SeriesDescription" not in cleaned[0] and cleaned[0].PatientName == ""
    assert cleaned[0].PatientIdentityRemoved == "YES"
    assert cleaned[0].SeriesInstanceUID != original.SeriesInstanceUID
    assert len({d.SeriesInstanceUID for d in cleaned}) == 1  # still one series
    np.testing.assert_array_equal(load_image(tmp_path / "clean").array, load_image(tmp_path / "ct").array)


def test_deidentify_warns_of_its_public_salt_and_summarises_what_it_skipped(tmp_path, capsys):
    write_series(tmp_path / "archive" / "ct", box_phantom(shape=(2, 8, 8), box=((0, 1), (0, 4), (0, 4))))
    for i in range(7):
        (tmp_path / "archive" / f"report{i}.txt").write_text("No effusion.\n")
    assert main(["deidentify", str(tmp_path / "archive"), str(tmp_path / "public")]) == 0
    out, err = capsys.readouterr()
    assert "warning: no --salt" in err and "2 file(s) written" in out
    assert out.count("report") == 5 and "and 2 more" in out  # seven skipped files, five named
    assert main(["deidentify", str(tmp_path / "archive"), str(tmp_path / "secret"), "--salt", "s3cret"]) == 0
    assert "warning" not in capsys.readouterr().err
    public, secret = (pydicom.dcmread(next((tmp_path / d / "ct").glob("*.dcm"))) for d in ("public", "secret"))
    assert public.SOPInstanceUID != secret.SOPInstanceUID  # the salt is what makes them unguessable


def test_single_file_deidentification_is_atomic_and_repeatable(tmp_path):
    files = write_series(tmp_path / "ct", box_phantom(shape=(2, 8, 8), box=((0, 1), (0, 4), (0, 4))))
    first = deidentify_file(files[0], tmp_path / "a.dcm", salt="s")
    second = deidentify_file(files[0], tmp_path / "b.dcm", salt="s")
    assert pydicom.dcmread(first).SOPInstanceUID == pydicom.dcmread(second).SOPInstanceUID
    assert not list(tmp_path.glob(".*.tmp"))
    assert identifying_values(pydicom.dcmread(first)) == []


# ------------------------------------------------------------------ the profile's table


def test_the_table_holds_every_row_of_ps3_15_table_e_1_1():
    rules = basic_profile()
    assert len(rules) >= 600  # 621 rows in the 2024b edition
    assert len({rule.tag for rule in rules}) == len(rules)
    assert {rule.code for rule in rules} <= {"D", "Z", "X", "U", "Z/D", "X/Z", "X/D", "X/Z/D", "X/Z/U*"}
    by_keyword = {rule.keyword: rule.code for rule in rules if rule.keyword}
    expected = {
        "PatientName": "Z",
        "PatientBirthDate": "Z",
        "PatientAge": "X",
        "PatientWeight": "X",
        "StudyDescription": "X",
        "SeriesDescription": "X",
        "ImageComments": "X",
        "PerformingPhysicianName": "X",
        "StudyInstanceUID": "U",
        "ReferencedSOPInstanceUID": "U",
        "MediaStorageSOPInstanceUID": "U",
        "InstitutionName": "X/Z/D",
        "SourceImageSequence": "X/Z/U*",
    }
    assert {keyword: by_keyword[keyword] for keyword in expected} == expected
    assert {rule.tag for rule in rules if not rule.keyword} == {
        "(50XX,XXXX)",
        "(60XX,3000)",
        "(60XX,4000)",
        "(GGGG,EEEE)",
    }
    assert "PatientName" in IDENTIFYING_KEYWORDS and "StudyInstanceUID" not in IDENTIFYING_KEYWORDS


def test_what_the_reader_needs_is_not_in_the_table():
    needed = [
        "ImagePositionPatient",
        "ImageOrientationPatient",
        "PixelSpacing",
        "SliceThickness",
        "SpacingBetweenSlices",
        "SeriesNumber",
        "InstanceNumber",
        "Modality",
        "PhotometricInterpretation",
        "WindowCenter",
        "WindowWidth",
        "RescaleSlope",
        "RescaleIntercept",
        "Rows",
        "Columns",
        "PixelData",
        "PerFrameFunctionalGroupsSequence",
        "GridFrameOffsetVector",
    ]
    assert [keyword for keyword in needed if rule_for(tag_for_keyword(keyword)) is not None] == []
    assert rule_for(0x60003000).code == "X" and rule_for(0x50020010).code == "X"  # overlay data, curves


# ------------------------------------------------------------------ markers in every attribute


class Markers:
    """Unique marker values for every VR, remembered so that the output can be searched for them."""

    def __init__(self):
        self.count = 0
        self.texts: list[bytes] = []

    def _next(self) -> int:
        self.count += 1
        return self.count

    def value(self, vr: str):
        n = self._next()
        if vr == "DA":
            text = f"{1000 + n % 9000:04d}0202"
        elif vr == "TM":
            text = f"235958.{n:06d}"
        elif vr == "DT":
            text = f"{1000 + n % 9000:04d}0202235958.{n:06d}"
        elif vr == "UI":
            return f"{MARKER_UID_ROOT}{n}"  # searched as the root
        elif vr == "DS":
            text = f"97{n:06d}.5"
        elif vr == "IS":
            text = f"97{n:06d}"
        elif vr == "AS":
            return f"{n % 1000:03d}Y"  # too short to search: checked through identifying_values
        elif vr == "UR":
            text = f"http://MARKER{n:05d}.example"
        elif vr in ("OB", "OW", "UN", "OF", "OD", "OL", "OV"):
            text = f"MARKER{n:05d}"
            self.texts.append(text.encode())
            return text.encode() + b"\x00" * (8 - len(text) % 8 if len(text) % 8 else 0)
        elif vr in ("US", "SS", "UL", "SL", "FL", "FD", "AT", "SV", "UV"):
            return 7  # binary numbers: checked through identifying_values
        else:  # AE CS LO LT PN SH ST UC UT
            text = f"MARKER{n:05d}"
        self.texts.append(text.encode())
        return text


def _vr(tag: int) -> str:
    return dictionary_VR(tag).split(" or ")[0]


def _nested_item(markers: Markers, depth: int) -> Dataset:
    """An item with a person name, other table attributes and a private tag, nesting `depth` more levels."""
    item = Dataset()
    item.PatientName = markers.value("PN")
    item.StudyDescription = markers.value("LO")
    item.InstitutionName = markers.value("LO")
    item.ContentDate = markers.value("DA")
    item.ReferencedSOPClassUID = CTImageStorage
    item.ReferencedSOPInstanceUID = markers.value("UI")
    creator = markers.value("LO")
    item.private_block(0x0011, creator, create=True).add_new(0x01, "LO", markers.value("LO"))
    if depth > 0:
        item.ReferencedImageSequence = Sequence([_nested_item(markers, depth - 1)])  # a table sequence (U*)
        item.AnatomicRegionSequence = Sequence([_nested_item(markers, depth - 1)])  # a sequence outside the table
    return item


def marked_dataset(base: Dataset, markers: Markers) -> tuple[Dataset, list[str]]:
    """`base` with a unique marker in every attribute of the profile's table, nested sequences two levels
    deep, private tags, curves and overlays; returns it and the table keywords it could not carry."""
    dataset = base
    not_written = []
    for rule in basic_profile():
        if not rule.keyword:
            continue
        tag = tag_for_keyword(rule.keyword)
        if tag >> 16 in (0x0000, 0x0002):  # command group (not storable), file meta (below)
            not_written.append(rule.keyword)
            continue
        vr = _vr(tag)
        if vr == "SQ":
            dataset.add_new(tag, vr, Sequence([_nested_item(markers, 2)]))
        else:
            dataset.add_new(tag, vr, markers.value(vr))
    creator = markers.value("LO")
    dataset.private_block(0x0009, creator, create=True).add_new(0x10, "LT", markers.value("LT"))
    dataset.add_new(0x50003000, "OW", markers.value("OW"))  # curve data
    dataset.add_new(0x60003000, "OW", markers.value("OW"))  # overlay data
    dataset.add_new(0x60004000, "LT", markers.value("LT"))  # overlay comments
    dataset.AnatomicRegionSequence = Sequence([_nested_item(markers, 2)])
    code = Dataset()
    code.CodeValue, code.CodingSchemeDesignator, code.CodeMeaning = markers.value("SH"), "L", markers.value("LO")
    dataset.PersonIdentificationCodeSequence.append(code)  # D: items kept, but their coded values cleaned too
    dataset.file_meta.SourceApplicationEntityTitle = markers.value("AE")
    dataset.file_meta.MediaStorageSOPInstanceUID = dataset.SOPInstanceUID
    return dataset, not_written


def _all_uids(dataset: Dataset) -> set[str]:
    uids = set()
    for element in dataset.iterall():
        if element.VR == "UI" and element.value:
            values = element.value if isinstance(element.value, list | pydicom.multival.MultiValue) else [element.value]
            uids.update(str(v) for v in values)
    return uids


@pytest.mark.parametrize("name", ["CT_small.dcm", "MR_small.dcm"])
def test_no_marker_survives_anywhere(tmp_path, name):
    base = pydicom.dcmread(get_testdata_file(name))
    original_uids = {u for u in _all_uids(base) | _all_uids(base.file_meta) if not u.startswith("1.2.840.10008.")}
    assert original_uids
    markers = Markers()
    dataset, not_written = marked_dataset(base, markers)
    assert set(not_written) == {"AffectedSOPInstanceUID", "RequestedSOPInstanceUID", "MediaStorageSOPInstanceUID"}
    source = tmp_path / "marked.dcm"
    dataset.save_as(source, enforce_file_format=True)
    marked_bytes = source.read_bytes()
    assert all(marker in marked_bytes for marker in markers.texts)  # the markers were written
    assert MARKER_UID_ROOT.encode() in marked_bytes
    assert len(markers.texts) > 500

    output = deidentify_file(source, tmp_path / "clean.dcm", salt="secret")

    data = output.read_bytes()
    assert [m.decode() for m in markers.texts if m in data] == []
    assert MARKER_UID_ROOT.encode() not in data
    assert [uid for uid in original_uids if uid.encode() in data] == []
    cleaned = pydicom.dcmread(output)
    assert identifying_values(cleaned) == []
    assert not any(element.tag.is_private for element in cleaned.iterall())
    assert not any(0x5000 <= element.tag.group <= 0x60FF for element in cleaned.iterall())
    assert {str(element.value) for element in cleaned.iterall() if element.VR == "PN"} <= {"", "ANONYMOUS"}
    for rule in basic_profile():
        if rule.action == "X" and rule.keyword:
            assert rule.keyword not in cleaned, rule.keyword
    assert cleaned.PatientIdentityRemoved == "YES"
    method = cleaned.DeidentificationMethodCodeSequence[0]
    assert (method.CodeValue, method.CodingSchemeDesignator) == ("113100", "DCM")
    assert cleaned.file_meta.MediaStorageSOPInstanceUID == cleaned.SOPInstanceUID
    assert cleaned.SOPInstanceUID == pseudonymous_uid(base.SOPInstanceUID, "secret")
    nested = cleaned.AnatomicRegionSequence[0].ReferencedImageSequence[0]
    assert nested.ReferencedSOPInstanceUID.startswith("2.25.") and nested.PatientName == ""
    assert cleaned.pixel_array.shape == (base.Rows, base.Columns)


def test_nothing_is_stamped_when_an_action_fails(tmp_path, monkeypatch):
    source = get_testdata_file("CT_small.dcm")

    def failing_profile(dataset, salt, strict=False):
        raise RuntimeError("boom")

    monkeypatch.setattr(privacy, "_apply_profile", failing_profile)
    dataset = pydicom.dcmread(source)
    with pytest.raises(RuntimeError):
        deidentify(dataset)
    assert "PatientIdentityRemoved" not in dataset
    with pytest.raises(RuntimeError):
        deidentify_file(source, tmp_path / "out.dcm")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ folders


def _series_with_references(folder):
    """A 3-slice CT series whose slices reference each other (image and source image sequences)."""
    files = write_series(folder, box_phantom(shape=(3, 8, 10), box=((1, 2), (2, 6), (3, 7))))
    datasets = [pydicom.dcmread(f) for f in files]
    for index, (file, dataset) in enumerate(zip(files, datasets)):
        other = datasets[(index + 1) % len(datasets)]
        reference = Dataset()
        reference.ReferencedSOPClassUID = other.SOPClassUID
        reference.ReferencedSOPInstanceUID = other.SOPInstanceUID
        dataset.ReferencedImageSequence = Sequence([reference])
        dataset.SourceImageSequence = Sequence([reference])
        dataset.ImageComments = "Zebedee was here"
        dataset.save_as(file, enforce_file_format=True)
    return files, datasets


def test_a_deidentified_series_still_reads_as_one_series(tmp_path):
    files, originals = _series_with_references(tmp_path / "ct")
    (tmp_path / "ct" / "README.txt").write_text("Zebedee's scans, PID-99173")

    report = deidentify_tree(tmp_path / "ct", tmp_path / "clean", salt="secret")

    assert sorted(p.name for p in report.written) == sorted(f.name for f in files)
    assert report.skipped == [("README.txt", "not a DICOM file")]
    assert not (tmp_path / "clean" / "README.txt").exists()
    assert_no_secret_under(tmp_path / "clean")
    before, after = read_dicom_series(tmp_path / "ct"), read_dicom_series(tmp_path / "clean")
    np.testing.assert_array_equal(after.array, before.array)
    np.testing.assert_allclose(after.geometry.spacing, before.geometry.spacing)

    cleaned = [pydicom.dcmread(tmp_path / "clean" / f.name) for f in files]
    for keyword in ("StudyInstanceUID", "SeriesInstanceUID", "FrameOfReferenceUID"):
        values = {str(d.get(keyword)) for d in cleaned}
        assert values == {pseudonymous_uid(str(originals[0].get(keyword)), "secret")}, keyword
    instance_uids = [d.SOPInstanceUID for d in cleaned]
    for index, dataset in enumerate(cleaned):
        referenced = instance_uids[(index + 1) % len(cleaned)]
        assert dataset.ReferencedImageSequence[0].ReferencedSOPInstanceUID == referenced
        assert dataset.SourceImageSequence[0].ReferencedSOPInstanceUID == referenced
        assert dataset.file_meta.MediaStorageSOPInstanceUID == dataset.SOPInstanceUID
        assert "ImageComments" not in dataset


def test_a_folder_with_other_files_is_exported_and_the_rest_reported(tmp_path):
    source = tmp_path / "study"
    write_series(source / "series" / "ct", box_phantom(shape=(2, 6, 6), box=((0, 1), (0, 3), (0, 3))))
    (source / "notes").mkdir()
    (source / "notes" / "README.txt").write_text("Zebedee Quixote, PID-99173")
    (source / "series" / "garbage.dcm").write_bytes(b"\x00" * 50)
    (source / "series" / ".DS_Store").write_bytes(b"Zebedee")
    shutil.copy(get_testdata_file("DICOMDIR"), source / "DICOMDIR")

    report = deidentify_tree(source, tmp_path / "clean", salt="secret")

    assert len(report.written) == 2
    assert all(p.parent == tmp_path / "clean" / "series" / "ct" for p in report.written)  # layout kept
    skipped = dict(report.skipped)
    assert set(skipped) == {"notes/README.txt", "series/garbage.dcm", "series/.DS_Store", "DICOMDIR"}
    assert skipped["notes/README.txt"] == "not a DICOM file" and skipped["series/.DS_Store"] == "hidden file"
    assert "DICOMDIR" in skipped["DICOMDIR"]
    assert not any(secret in str(report.skipped) for secret in SECRETS)
    assert sorted(p.relative_to(tmp_path / "clean").as_posix() for p in (tmp_path / "clean").rglob("*")) == [
        "series",
        "series/ct",
        "series/ct/slice_0000.dcm",
        "series/ct/slice_0001.dcm",
    ]
    assert_no_secret_under(tmp_path / "clean")


@pytest.mark.parametrize("kind", ["text file", "empty folder", "folder without DICOM", "missing"])
def test_nothing_to_export_is_an_error_naming_the_source(tmp_path, kind):
    source = tmp_path / "source"
    if kind == "text file":
        source.write_text("PID-99173")
    elif kind != "missing":
        source.mkdir()
        if kind == "folder without DICOM":
            (source / "README.txt").write_text("PID-99173")
    with pytest.raises(UnreadableImageError) as caught:
        deidentify_tree(source, tmp_path / "out", salt="s")
    assert caught.value.path == str(source) and "PID-99173" not in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_the_salt_decides_the_pseudonyms(tmp_path):
    files = write_series(tmp_path / "ct", box_phantom(shape=(2, 6, 6), box=((0, 1), (0, 3), (0, 3))))
    uids = {}
    for name, salt in (("a", "one"), ("b", "one"), ("c", "two")):
        deidentify_tree(tmp_path / "ct", tmp_path / name, salt=salt)
        datasets = [pydicom.dcmread(tmp_path / name / f.name) for f in files]
        uids[name] = [(d.StudyInstanceUID, d.SeriesInstanceUID, d.SOPInstanceUID) for d in datasets]
    assert uids["a"] == uids["b"]
    assert all(x != y for pair_a, pair_c in zip(uids["a"], uids["c"]) for x, y in zip(pair_a, pair_c))


def test_deidentified_output_serialises_without_warnings_in_memory():
    dataset = deidentify(pydicom.dcmread(get_testdata_file("MR_small.dcm")), salt="s")
    buffer = BytesIO()
    dataset.save_as(buffer, enforce_file_format=True)
    assert pydicom.dcmread(BytesIO(buffer.getvalue())).PatientIdentityRemoved == "YES"
