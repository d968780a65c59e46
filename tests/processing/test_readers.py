import logging
import os
import shutil
import sys
from pathlib import Path

import nibabel as nib
import numpy as np
import pydicom
import pytest

import medreco
from io_helpers import box_phantom, mirror_series_left_right, write_nifti_volume, write_series
from medreco.errors import (
    DuplicateSliceError,
    InconsistentGeometryError,
    InvalidPixelDataError,
    MedicalImageError,
    MissingCodecError,
    MissingSliceError,
    MultipleSeriesError,
    SeriesError,
    UnreadableImageError,
    UnsupportedImageError,
)
from medreco.processing import MedReCoImageProcessor, ReaderOptions, list_dicom_series, load_image

PYDICOM_FILES = sorted((Path(pydicom.__file__).parent / "data" / "test_files").glob("*"))
NIBABEL_FILES = sorted(
    p for p in Path(nib.__file__).parent.rglob("*") if p.name.endswith((".nii", ".nii.gz", ".dcm", ".dcm.gz"))
)
THIRD_PARTY = [p for p in PYDICOM_FILES + NIBABEL_FILES if p.is_file()]
FAMILY_FOR = {"CT": "chest_ct", "MR": "brain_mri", "US": "ultrasound"}


@pytest.mark.parametrize(
    "path", THIRD_PARTY, ids=lambda p: f"{p.parent.parent.parent.name}/{p.parent.parent.name}/{p.name}"
)
def test_third_party_files_load_or_raise_our_error(path):
    """Every file pydicom and nibabel ship: a finite image of a sane shape, or a MedicalImageError."""
    try:
        image = load_image(path)
    except MedicalImageError as error:
        assert str(path) in str(error) and error.problem
        return
    assert image.array.ndim == 3 and image.array.dtype == np.float32 and np.isfinite(image.array).all()
    assert all(s > 0 for s in image.geometry.spacing)
    family = FAMILY_FOR.get(image.modality, "chest_xray" if image.shape[0] == 1 else "brain_mri")
    processor = MedReCoImageProcessor(
        recipes={
            "chest_ct": {"size": [20, 32, 32], "spacing": [4.0, 2.0, 2.0]},
            "brain_mri": {"size": [10, 32, 32], "spacing": [4.0, 2.0, 2.0]},
            "chest_xray": {"size": [1, 32, 32]},
            "ultrasound": {"size": [1, 32, 32]},
        }
    )
    try:
        tensor = processor.preprocess_one(image, family)
    except MedicalImageError as error:
        assert error.problem
        return
    recipe = processor.recipe(family)
    assert tuple(tensor.shape) == (1, *recipe.size)
    assert tensor.isfinite().all() and tensor.min() >= 0 and tensor.max() <= 1


def test_series_geometry_and_order(tmp_path):
    volume = box_phantom()
    files = write_series(tmp_path / "series", volume)
    for file in files[::2]:  # file names must not matter: shuffle by renaming
        file.rename(file.with_name("z" + file.name))
    image = load_image(tmp_path / "series")
    np.testing.assert_array_equal(image.array, np.round(volume))
    assert image.geometry.spacing == pytest.approx((2.0, 0.8, 0.6))
    assert image.geometry.axes == ("S", "P", "L") and image.modality == "CT"


def test_mirrored_storage_gives_the_same_canonical_volume(tmp_path):
    volume = box_phantom()
    volume[:, :, :5] = 1000  # a marker on the patient's right
    standard = load_image(write_series(tmp_path / "a", volume)[0].parent)
    mirror_series_left_right(write_series(tmp_path / "b", volume))
    mirrored = load_image(tmp_path / "b")
    np.testing.assert_array_equal(mirrored.array, standard.array)
    np.testing.assert_allclose(mirrored.geometry.affine, standard.geometry.affine, atol=1e-4)


def test_dicom_and_nifti_of_the_same_volume_agree(tmp_path):
    volume = box_phantom()
    dicom = load_image(write_series(tmp_path / "series", volume)[0].parent)
    nifti = load_image(write_nifti_volume(tmp_path / "v.nii.gz", np.round(volume)))
    np.testing.assert_array_equal(dicom.array, nifti.array)
    np.testing.assert_allclose(dicom.geometry.affine, nifti.geometry.affine, atol=1e-4)


def test_flipped_affine_nifti_matches_its_canonical_twin(tmp_path):
    rng = np.random.default_rng(0)
    data = rng.normal(size=(6, 7, 8)).astype(np.float32)
    affine = np.diag([2.0, 3.0, 4.0, 1.0])
    nib.save(nib.Nifti1Image(data, affine), tmp_path / "canonical.nii")
    flip = np.eye(4)
    flip[0, 0], flip[0, 3] = -1, 5  # i -> 5 - i
    flipped = np.diag([1.0, -1.0, 1.0, 1.0])
    flipped[1, 3] = 6  # also j -> 6 - j
    nib.save(nib.Nifti1Image(data[::-1, ::-1].copy(), affine @ flip @ flipped), tmp_path / "flipped.nii.gz")
    a, b = load_image(tmp_path / "canonical.nii"), load_image(tmp_path / "flipped.nii.gz")
    np.testing.assert_array_equal(a.array, b.array)
    np.testing.assert_allclose(a.geometry.affine, b.geometry.affine)
    assert a.shape == (8, 7, 6)  # (i, j, k) -> (D, H, W) = (k, j, i)


def test_missing_slice(tmp_path):
    files = write_series(tmp_path / "s", box_phantom())
    files[7].unlink()
    with pytest.raises(MissingSliceError, match=r"gap of 4\.00 mm"):
        load_image(tmp_path / "s")


def test_duplicate_slice(tmp_path):
    files = write_series(tmp_path / "s", box_phantom())
    copy = pydicom.dcmread(files[3])
    copy.SOPInstanceUID = pydicom.uid.generate_uid()
    copy.save_as(tmp_path / "s" / "copy.dcm")
    with pytest.raises(DuplicateSliceError):
        load_image(tmp_path / "s")


def test_uneven_spacing_is_refused_unless_allowed(tmp_path):
    files = write_series(tmp_path / "s", box_phantom())
    for file in files[10:]:
        dataset = pydicom.dcmread(file)
        dataset.ImagePositionPatient[2] += 0.5
        dataset.save_as(file)
    with pytest.raises(InconsistentGeometryError, match="uneven slice spacing"):
        load_image(tmp_path / "s")
    image = load_image(tmp_path / "s", ReaderOptions(allow_uneven_spacing=True))
    assert any("uneven" in w for w in image.warnings)


def test_two_series_in_one_folder(tmp_path):
    write_series(tmp_path / "s" / "a", box_phantom(), series_number=3)
    write_series(tmp_path / "s" / "b", box_phantom(inside=100), series_number=5)
    with pytest.raises(MultipleSeriesError) as caught:
        load_image(tmp_path / "s")
    assert sorted(s["series_number"] for s in caught.value.series) == [3, 5]
    assert [s["selector"] for s in caught.value.series] == ["3", "5"]
    assert "[3] series 3" in caught.value.problem and "--series" in caught.value.problem
    assert_no_identifying_values(str(caught.value))
    assert load_image(tmp_path / "s", ReaderOptions(series=5)).array.max() == 100
    assert load_image(tmp_path / "s", ReaderOptions(series="5")).array.max() == 100  # as the CLI passes it
    with pytest.raises(SeriesError, match=r"no series number 4 here; found \[3\] series 3"):
        load_image(tmp_path / "s", ReaderOptions(series=4))


def assert_no_identifying_values(text: str) -> None:
    """None of the fake patient's identifying values (names, IDs, dates) in `text`."""
    for value in ("Zebedee", "Quixote", "PID-99173", "19421107", "St Elsewhere", "ACC-55510", "20000101"):
        assert value not in text


def _drop_series_number(files: list[Path]) -> None:
    for file in files:
        dataset = pydicom.dcmread(file)
        del dataset.SeriesNumber
        dataset.save_as(file)


def test_series_without_series_numbers_are_selectable(tmp_path):
    _drop_series_number(write_series(tmp_path / "s" / "a", box_phantom()))
    _drop_series_number(write_series(tmp_path / "s" / "b", box_phantom(inside=100)))
    uid_b = str(pydicom.dcmread(next((tmp_path / "s" / "b").iterdir())).SeriesInstanceUID)
    with pytest.raises(MultipleSeriesError) as caught:
        load_image(tmp_path / "s")
    listing = caught.value.series
    assert [s["series_number"] for s in listing] == [None, None]
    selectors = [s["selector"] for s in listing]
    assert all(selector.startswith("key:") for selector in selectors) and len(set(selectors)) == 2
    assert all(f"[{selector}] no SeriesNumber" in caught.value.problem for selector in selectors)
    assert uid_b not in str(caught.value)  # UIDs are pseudonymised on export: never shown
    assert_no_identifying_values(str(caught.value))
    maxima = sorted(load_image(tmp_path / "s", ReaderOptions(series=selector)).array.max() for selector in selectors)
    assert maxima == [100, 400]
    assert load_image(tmp_path / "s", ReaderOptions(series=uid_b)).array.max() == 100
    assert load_image(tmp_path / "s", ReaderOptions(series=uid_b[:-3])).array.max() == 100  # a unique start
    assert [s["selector"] for s in list_dicom_series(tmp_path / "s")] == selectors
    with pytest.raises(SeriesError, match="no series whose description has the word"):
        load_image(tmp_path / "s", ReaderOptions(series="CT"))


def test_series_sharing_a_series_number_are_told_apart(tmp_path):
    write_series(tmp_path / "s" / "a", box_phantom(), series_number=1)
    write_series(tmp_path / "s" / "b", box_phantom(inside=100), series_number=1)
    with pytest.raises(MultipleSeriesError, match=r"2 series match series number 1: \[key:") as caught:
        load_image(tmp_path / "s", ReaderOptions(series=1))
    keys = [s["selector"] for s in caught.value.series]
    assert sorted(load_image(tmp_path / "s", ReaderOptions(series=key)).array.max() for key in keys) == [100, 400]


def test_non_image_and_unreadable_files_in_a_series_folder(tmp_path):
    files = write_series(tmp_path / "s", box_phantom())
    shutil.copy(Path(pydicom.__file__).parent / "data" / "test_files" / "rtplan.dcm", tmp_path / "s" / "plan.dcm")
    (tmp_path / "s" / "notes.txt").write_text("not an image")
    image = load_image(tmp_path / "s")
    assert image.shape == (20, 40, 50)
    assert any("without an image" in w for w in image.warnings)
    assert any("1 unreadable or non-DICOM file(s) ignored (notes.txt: not a DICOM file" in w for w in image.warnings)
    files[7].write_bytes(files[7].read_bytes()[:300])  # a damaged slice shows as a gap: say why
    skipped = r"a damaged slice\? 2 unreadable file\(s\) were skipped: slice_0007\.dcm: truncated"
    with pytest.raises(MissingSliceError, match=skipped):
        load_image(tmp_path / "s")


def test_truncated_and_random_files(tmp_path):
    files = write_series(tmp_path / "s", box_phantom())
    truncated = tmp_path / "truncated.dcm"
    truncated.write_bytes(files[0].read_bytes()[:-700])
    with pytest.raises(UnreadableImageError, match=r"truncated\.dcm"):
        load_image(truncated)
    random = tmp_path / "random.dcm"
    random.write_bytes(os.urandom(4096))
    with pytest.raises(UnreadableImageError, match="not a DICOM file"):
        load_image(random)
    with pytest.raises(UnreadableImageError, match="no such file"):
        load_image(tmp_path / "absent.nii")


def test_nan_volumes(tmp_path):
    nib.save(nib.Nifti1Image(np.full((4, 4, 4), np.nan, dtype=np.float32), np.eye(4)), tmp_path / "nan.nii")
    with pytest.raises(InvalidPixelDataError, match="every pixel value is NaN"):
        load_image(tmp_path / "nan.nii")
    data = np.ones((4, 4, 4), dtype=np.float32)
    data[0, 0, 0] = np.nan
    nib.save(nib.Nifti1Image(data, np.eye(4)), tmp_path / "some.nii")
    with pytest.raises(InvalidPixelDataError, match="1 of 64"):
        load_image(tmp_path / "some.nii")
    assert np.isfinite(load_image(tmp_path / "some.nii", ReaderOptions(nan_policy="zero")).array).all()


def test_4d_nifti_needs_an_explicit_volume(tmp_path):
    data = np.stack([np.zeros((3, 4, 5)), np.ones((3, 4, 5))], axis=-1).astype(np.float32)
    nib.save(nib.Nifti1Image(data, np.eye(4)), tmp_path / "4d.nii.gz")
    with pytest.raises(UnsupportedImageError, match="4D image with 2 volumes; choose one"):
        load_image(tmp_path / "4d.nii.gz")
    assert load_image(tmp_path / "4d.nii.gz", ReaderOptions(volume_index=1)).array.min() == 1


def test_png_radiograph(tmp_path):
    from PIL import Image

    pixels = (np.linspace(0, 65535, 60 * 80).reshape(60, 80)).astype(np.uint16)
    Image.fromarray(pixels).save(tmp_path / "cxr.png")
    image = load_image(tmp_path / "cxr.png")
    assert image.shape == (1, 60, 80) and image.display_window == (0.0, 65535.0)
    assert not image.geometry.spacing_known
    Image.fromarray((pixels // 257).astype(np.uint8)).convert("RGB").save(tmp_path / "cxr.jpg")
    assert "colour converted" in load_image(tmp_path / "cxr.jpg").warnings[0]


def test_monochrome1_is_inverted_to_match_monochrome2(tmp_path):
    from medreco.data.phantom.dicom import DicomIdentity, write_radiograph

    image = np.linspace(0, 1, 30 * 40).reshape(30, 40)
    write_radiograph(image, (0.2, 0.2), tmp_path / "m1.dcm", DicomIdentity(), monochrome1=True)
    write_radiograph(image, (0.2, 0.2), tmp_path / "m2.dcm", DicomIdentity(), monochrome1=False)
    inverted, plain = load_image(tmp_path / "m1.dcm"), load_image(tmp_path / "m2.dcm")
    np.testing.assert_allclose(inverted.array, plain.array)
    assert "MONOCHROME1 inverted" in inverted.warnings[0] and plain.array[0, -1, -1] > plain.array[0, 0, 0]
    # the window is mirrored with the values: (c - high, c - low) with c = 4095 for 12-bit data
    assert plain.display_window == (0.0, 4096.0) and inverted.display_window == (-1.0, 4095.0)


def test_decoder_failures_reach_the_user_as_one_clean_error(capfd, caplog):
    """pydicom's decoders log tracebacks before raising: none reaches stderr or the log; the typed error
    carries the hint (12-bit JPEG needs pylibjpeg-libjpeg or GDCM)."""
    handler = logging.StreamHandler(sys.stderr)
    logging.getLogger().addHandler(handler)
    try:
        for name in ("JPEG-lossy.dcm", "GDCMJ2K_TextGBR.dcm"):
            path = Path(pydicom.data.get_testdata_file(name))
            try:
                load_image(path)
            except MissingCodecError as error:
                assert "12-bit" in error.problem and "pylibjpeg" in error.problem and "gdcm" in error.problem
            except UnreadableImageError as error:
                assert "cannot decode" in error.problem and name in str(error)
    finally:
        logging.getLogger().removeHandler(handler)
    captured = capfd.readouterr()
    assert "Traceback" not in captured.err + captured.out and "pydicom" not in captured.err
    assert not [r for r in caplog.records if r.name.startswith(("pydicom", "nibabel"))]


def test_reader_notes_are_warnings_on_the_image_and_in_the_info_log(tmp_path, caplog):
    """On the image for the caller (`medreco preprocess` prints them); logged at INFO only, so an
    archive of PNGs does not log one line per image (`-v` shows them)."""
    from PIL import Image

    Image.fromarray(np.arange(60 * 80, dtype=np.uint8).reshape(60, 80)).convert("RGB").save(tmp_path / "us.png")
    with caplog.at_level(logging.INFO, logger="medreco.processing.readers"):
        image = load_image(tmp_path / "us.png")
    assert image.warnings == [
        "RGB colour converted to greyscale luminance",
        "no pixel spacing in PNG/JPEG: 1 mm assumed",
    ]
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert logged == [f"{tmp_path / 'us.png'}: {note}" for note in image.warnings]


def test_hints_name_python_options_and_only_existing_cli_flags(tmp_path):
    files = write_series(tmp_path / "s", box_phantom())
    for file in files[10:]:
        dataset = pydicom.dcmread(file)
        dataset.ImagePositionPatient[2] += 0.5
        dataset.save_as(file)
    with pytest.raises(InconsistentGeometryError) as caught:
        load_image(tmp_path / "s")
    assert "ReaderOptions(allow_uneven_spacing=True)" in caught.value.problem and "--" not in caught.value.problem
    data = np.stack([np.zeros((3, 4, 5)), np.ones((3, 4, 5))], axis=-1).astype(np.float32)
    nib.save(nib.Nifti1Image(data, np.eye(4)), tmp_path / "4d.nii")
    with pytest.raises(UnsupportedImageError, match=r"ReaderOptions\(volume_index=N\), or --volume-index N"):
        load_image(tmp_path / "4d.nii")
    data[0, 0, 0, 0] = np.nan
    nib.save(nib.Nifti1Image(data[..., 0], np.eye(4)), tmp_path / "nan.nii")
    with pytest.raises(InvalidPixelDataError, match=r"ReaderOptions\(nan_policy='zero'\).*--nan-policy zero"):
        load_image(tmp_path / "nan.nii")


def test_missing_codec_names_the_plugin_to_install():
    path = Path(pydicom.__file__).parent / "data" / "test_files" / "MR_small_jpeg_ls_lossless.dcm"
    try:
        load_image(path)
    except MissingCodecError as error:
        assert "JPEG-LS" in error.problem and ("pylibjpeg" in error.problem or "gdcm" in error.problem)
    else:  # a JPEG-LS decoder is installed here: then the file must load
        assert load_image(path).shape == (1, 64, 64)


def test_gzipped_dicom_and_siemens_mosaics(tmp_path):
    import gzip

    source = Path(pydicom.__file__).parent / "data" / "test_files" / "CT_small.dcm"
    (tmp_path / "ct.dcm.gz").write_bytes(gzip.compress(source.read_bytes()))
    np.testing.assert_array_equal(load_image(tmp_path / "ct.dcm.gz").array, load_image(source).array)
    mosaics = [p for p in NIBABEL_FILES if p.name.startswith("siemens_dwi")]
    for path in mosaics:
        with pytest.raises(UnsupportedImageError, match="mosaic"):
            load_image(path)
    (tmp_path / "broken.dcm.gz").write_bytes(gzip.compress(source.read_bytes())[:100])
    with pytest.raises(UnreadableImageError, match="gzip"):
        load_image(tmp_path / "broken.dcm.gz")


def test_public_api():
    assert medreco.load_image is load_image


# ------------------------------------------------------------------ MR and ultrasound as scanners write them


def _mr_volumes():
    rng = np.random.default_rng(3)
    return {name: rng.integers(0, 3000, size=(5, 12, 14)).astype(np.float64) for name in ("T1", "T2", "FLAIR")}


def test_mr_study_exported_one_series_per_folder_and_all_in_one_folder(tmp_path):
    from medreco.data.phantom.dicom import DicomIdentity, write_mr_series

    volumes = _mr_volumes()
    folders = write_mr_series(volumes, (5.0, 0.9, 0.9), tmp_path / "split", DicomIdentity(), origin=(-6, -5, 40))
    for name, folder in folders.items():
        image = load_image(folder)
        np.testing.assert_array_equal(image.array, volumes[name])  # unsigned 16-bit, no rescale, head first on disk
        assert image.modality == "MR" and image.geometry.axes == ("S", "P", "L")
        assert image.geometry.spacing == pytest.approx((5.0, 0.9, 0.9))
    header = pydicom.dcmread(folders["FLAIR"] / "IM00001.dcm")
    assert header.SOPClassUID == pydicom.uid.MRImageStorage and header.PixelRepresentation == 0
    assert "IR" in header.ScanningSequence and header.InversionTime and header.SeriesDescription == "AX FLAIR"
    assert header.InstanceNumber == 1 and header.ImagePositionPatient[2] == pytest.approx(40 + 4 * 5.0)

    write_mr_series(volumes, (5.0, 0.9, 0.9), tmp_path / "one", DicomIdentity(), one_folder=True)
    with pytest.raises(MultipleSeriesError, match="'AX FLAIR'"):
        load_image(tmp_path / "one")
    assert [s["description"] for s in list_dicom_series(tmp_path / "one")] == ["AX T1 SE", "AX T2 TSE", "AX FLAIR"]
    for selector, name in (("FLAIR", "FLAIR"), ("t2", "T2"), ("AX T1 SE", "T1"), ("3", "T2"), ("T2 TSE", "T2")):
        np.testing.assert_array_equal(load_image(tmp_path / "one", ReaderOptions(series=selector)).array, volumes[name])
    with pytest.raises(MultipleSeriesError, match="3 series match"):
        load_image(tmp_path / "one", ReaderOptions(series="AX"))
    with pytest.raises(SeriesError, match="DWI"):
        load_image(tmp_path / "one", ReaderOptions(series="DWI"))
    tensor = MedReCoImageProcessor(recipes={"brain_mri": {"size": [4, 16, 16], "spacing": [6.0, 1.0, 1.0]}})
    assert tuple(tensor.preprocess_one(load_image(folders["T2"]), "brain_mri").shape) == (1, 4, 16, 16)


@pytest.mark.parametrize(
    "photometric, planar", [("RGB", 0), ("RGB", 1), ("PALETTE COLOR", 0), ("MONOCHROME2", 0)], ids=str
)
def test_ultrasound_single_frames_as_consoles_store_them(tmp_path, photometric, planar):
    from medreco.data.phantom.dicom import DicomIdentity, write_ultrasound

    grey = np.random.default_rng(4).uniform(0, 1, size=(30, 40))
    path = write_ultrasound(
        grey, (0.25, 0.3), tmp_path / "us.dcm", DicomIdentity(), photometric=photometric, planar_configuration=planar
    )
    header = pydicom.dcmread(path)
    assert header.SOPClassUID == pydicom.uid.UltrasoundImageStorage and header.BurnedInAnnotation == "YES"
    assert "PixelSpacing" not in header and len(header.SequenceOfUltrasoundRegions) == 2
    image = load_image(path)
    assert image.shape == (1, 30, 40) and image.modality == "US"
    # spacing from the tissue region (cm), not from the unitless bar region listed first
    assert image.geometry.spacing == pytest.approx((1.0, 0.25, 0.3)) and image.geometry.spacing_known
    stored = np.round(grey * 255)
    tint = 0.299 + 0.587 * 0.94 + 0.114 * 0.82 if photometric == "PALETTE COLOR" else 1.0  # the console's palette
    np.testing.assert_allclose(image.array[0], stored * tint, atol=0.6)
    processor = MedReCoImageProcessor(recipes={"ultrasound": {"size": [1, 32, 32]}})
    tensor = processor.preprocess_one(image, "ultrasound")
    assert tuple(tensor.shape) == (1, 1, 32, 32) and tensor.isfinite().all()


def test_ultrasound_cine_loop_reads_one_frame(tmp_path):
    from medreco.data.phantom.dicom import DicomIdentity, write_ultrasound

    frames = np.random.default_rng(5).uniform(0, 1, size=(7, 20, 24))
    path = write_ultrasound(frames, 0.4, tmp_path / "cine.dcm", DicomIdentity(), frame_time_ms=40.0)
    header = pydicom.dcmread(path)
    assert header.SOPClassUID == pydicom.uid.UltrasoundMultiFrameImageStorage
    assert int(header.NumberOfFrames) == 7 and float(header.FrameTime) == 40.0
    image = load_image(path)
    assert image.shape == (1, 20, 24)
    np.testing.assert_allclose(image.array[0], np.round(frames[3] * 255), atol=0.6)  # the middle frame
    assert any("frame 3 (the middle one)" in w for w in image.warnings)
    chosen = load_image(path, ReaderOptions(volume_index=6))
    np.testing.assert_allclose(chosen.array[0], np.round(frames[6] * 255), atol=0.6)
    with pytest.raises(UnsupportedImageError, match=r"volume_index 7 outside 0\.\.6"):
        load_image(path, ReaderOptions(volume_index=7))


def test_ultrasound_written_another_way(tmp_path):
    """A file built directly with pydicom as another console writes it: RGB planar configuration 1 (all
    red, then green, then blue), no preamble meta quirks, one region in cm with negative deltas, and a
    two-frame loop without FrameTime."""
    rng = np.random.default_rng(6)
    rgb = rng.integers(0, 256, size=(2, 10, 12, 3), dtype=np.uint8)
    dataset = pydicom.Dataset()
    dataset.file_meta = pydicom.dataset.FileMetaDataset()
    dataset.file_meta.MediaStorageSOPClassUID = pydicom.uid.UltrasoundMultiFrameImageStorage
    dataset.file_meta.MediaStorageSOPInstanceUID = pydicom.uid.generate_uid()
    dataset.file_meta.TransferSyntaxUID = pydicom.uid.ExplicitVRLittleEndian
    dataset.SOPClassUID = dataset.file_meta.MediaStorageSOPClassUID
    dataset.SOPInstanceUID = dataset.file_meta.MediaStorageSOPInstanceUID
    dataset.Modality = "US"
    dataset.Rows, dataset.Columns, dataset.NumberOfFrames = 10, 12, 2
    dataset.SamplesPerPixel, dataset.PhotometricInterpretation, dataset.PlanarConfiguration = 3, "RGB", 1
    dataset.BitsAllocated, dataset.BitsStored, dataset.HighBit, dataset.PixelRepresentation = 8, 8, 7, 0
    region = pydicom.Dataset()
    region.RegionSpatialFormat, region.RegionDataType = 1, 1
    region.PhysicalUnitsXDirection = region.PhysicalUnitsYDirection = 3
    region.PhysicalDeltaX, region.PhysicalDeltaY = -0.02, 0.05
    dataset.SequenceOfUltrasoundRegions = [region]
    dataset.PixelData = np.ascontiguousarray(rgb.transpose(0, 3, 1, 2)).tobytes()
    dataset.save_as(tmp_path / "other.dcm", enforce_file_format=True)
    image = load_image(tmp_path / "other.dcm")
    luminance = rgb[1].astype(np.float32) @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
    np.testing.assert_allclose(image.array[0], luminance, atol=1e-3)
    assert image.geometry.spacing == pytest.approx((1.0, 0.5, 0.2))


def test_load_image_reads_with_the_first_reader_that_takes_the_path(tmp_path):
    """One reader per format (`verify_suffix`, `read`, `get_data`); a folder is a series whatever its
    name, and DICOM, which has no fixed suffix, takes every file no other format claims."""
    from medreco.processing.readers import (
        READERS,
        DicomFileReader,
        DicomSeriesReader,
        NiftiReader,
        RasterReader,
        VolumeFileReader,
    )

    expected = {
        "scan.nii.gz": NiftiReader,
        "SCAN.NII": NiftiReader,
        "ct.volume.json": VolumeFileReader,
        "cxr.png": RasterReader,
        "us.JPEG": RasterReader,
        "IM0001": DicomFileReader,
        "slice.dcm.gz": DicomFileReader,
        "brain.mgz": None,  # refused: convert it first
    }
    for name, reader in expected.items():
        (tmp_path / name).write_bytes(b"")
        assert next((r for r in READERS if r().verify_suffix(tmp_path / name)), None) is reader, name
    (tmp_path / "series.nii").mkdir()
    assert next(r for r in READERS if r().verify_suffix(tmp_path / "series.nii")) is DicomSeriesReader
    with pytest.raises(UnsupportedImageError, match="convert it to NIfTI"):
        load_image(tmp_path / "brain.mgz")
    path = write_nifti_volume(tmp_path / "volume.nii.gz", box_phantom())
    reader = NiftiReader(ReaderOptions())
    image = reader.get_data(reader.read(path))
    assert np.array_equal(image.array, load_image(path).array) and np.allclose(image.geometry.spacing, (2.0, 0.8, 0.6))


def test_a_segmentation_object_is_refused_as_a_mask_not_read_as_an_image(tmp_path):
    """A DICOM SEG's pixels are segment labels: indexed or trained on as a study's image they would be
    silent garbage. Refused, naming the file and what it is."""
    dataset = pydicom.dcmread(pydicom.data.get_testdata_file("CT_small.dcm"))
    dataset.SOPClassUID = "1.2.840.10008.5.1.4.1.1.66.4"
    dataset.file_meta.MediaStorageSOPClassUID = dataset.SOPClassUID
    dataset.Modality = "SEG"
    dataset.save_as(tmp_path / "seg.dcm")
    with pytest.raises(UnsupportedImageError, match=r"Segmentation \(SEG\) object: a mask, not an image") as error:
        load_image(tmp_path / "seg.dcm")
    assert str(tmp_path / "seg.dcm") in str(error.value)


def test_inspect_describes_a_4d_nifti_and_says_how_to_pick_a_volume(capsys):
    import json

    from medreco.cli import main

    path = Path(nib.__file__).parent / "tests" / "data" / "example4d.nii.gz"
    assert main(["inspect", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["volumes"] == 2 and "--volume-index" in report["note"] and len(report["shape"]) == 3
