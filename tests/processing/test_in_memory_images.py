"""Images already in memory (pydicom Datasets, nibabel images, MONAI MetaTensors, the values a `datasets`
table decodes) read as the files they come from: the same array, geometry and model tensor."""

import io
import logging
import subprocess
import sys
from pathlib import Path

import nibabel as nib
import numpy as np
import pydicom
import pytest
import torch
from transformers import AutoTokenizer

from io_helpers import FAKE_IDENTITY, box_phantom, write_nifti_volume, write_series
from medreco.data.phantom.dicom import DicomIdentity, write_radiograph
from medreco.errors import (
    InconsistentGeometryError,
    MedicalImageError,
    MissingSliceError,
    SeriesError,
    UnsupportedImageError,
)
from medreco.factory import bundled_text_encoder_path
from medreco.processing import MedReCoImageProcessor, MedReCoProcessor, ReaderOptions, load_image, read_in_memory

PYDICOM_FILES = sorted(p for p in (Path(pydicom.__file__).parent / "data" / "test_files").glob("*") if p.is_file())
NIBABEL_DATA = Path(nib.__file__).parent / "tests" / "data"
NIBABEL_FILES = ["anatomical.nii", "standard.nii.gz", "example_nifti2.nii.gz", "example4d.nii.gz"]
RECIPES = {
    "chest_xray": {"size": [1, 32, 32]},
    "chest_ct": {"size": [10, 24, 24], "spacing": [4.0, 2.0, 2.0]},
    "brain_mri": {"size": [10, 24, 24], "spacing": [4.0, 2.0, 2.0]},
    "ct_slice": {"kind": "projection", "size": [1, 32, 32], "dicom_modalities": ["CT"]},  # one CT slice
}


@pytest.fixture(scope="module")
def processor():
    return MedReCoImageProcessor(modalities=list(RECIPES), recipes=RECIPES)


def assert_same_image(a, b, exact=True):
    if exact:
        np.testing.assert_array_equal(a.array, b.array)
    else:
        np.testing.assert_allclose(a.array, b.array, rtol=1e-5, atol=1e-4)
    assert a.geometry.spacing == pytest.approx(b.geometry.spacing)
    if a.geometry.affine is None:
        assert b.geometry.affine is None
    else:
        np.testing.assert_allclose(a.geometry.affine, b.geometry.affine, atol=1e-6)
    assert (a.modality, a.photometric, a.display_window) == (b.modality, b.photometric, b.display_window)


def flat_nifti(path: Path) -> Path:
    """A 2D image as NIfTI (one slice, i and j flipped)."""
    data = np.random.default_rng(2).random((30, 40)).astype(np.float32)
    nib.save(nib.Nifti1Image(data, np.diag([-0.5, -0.5, 1.0, 1.0])), path)
    return path


def oblique_nifti(path: Path) -> Path:
    """A volume stored with flipped and permuted axes (not the canonical layout), NIfTI-1."""
    rng = np.random.default_rng(0)
    data = rng.normal(100.0, 20.0, size=(12, 9, 14)).astype(np.float32)
    affine = np.array([[0.0, -2.0, 0.0, 30.0], [0.0, 0.0, 3.0, -10.0], [-1.5, 0.0, 0.0, 50.0], [0, 0, 0, 1]])
    nib.save(nib.Nifti1Image(data, affine), path)
    return path


# ------------------------------------------------------------------ pydicom


@pytest.mark.parametrize("path", PYDICOM_FILES, ids=lambda p: p.name)
def test_every_pydicom_test_file_reads_as_a_dataset_as_it_does_as_a_file(path):
    if path.read_bytes()[:2] == b"\x1f\x8b":
        pytest.skip("gzip-wrapped DICOM: the file reader inflates it, pydicom does not")
    try:
        dataset = pydicom.dcmread(path, force=True)
    except Exception:
        pytest.skip("pydicom itself cannot parse this file")
    try:
        from_file = load_image(path)
    except MedicalImageError:
        with pytest.raises(MedicalImageError) as raised:
            read_in_memory(dataset)
        assert raised.value.path == str(path) and raised.value.problem
        return
    from_dataset = read_in_memory(dataset)
    assert_same_image(from_dataset, from_file)
    assert from_dataset.source == str(path)


def test_datasets_and_their_files_give_the_same_tensor(processor, tmp_path):
    radiograph = write_radiograph(
        np.random.default_rng(1).random((40, 30)), (0.2, 0.2), tmp_path / "cr.dcm", DicomIdentity(), monochrome1=True
    )
    slice_file = write_series(tmp_path / "series", box_phantom((1, 40, 50), ((0, 1), (10, 30), (15, 35))))[0]
    for path, modality in ((radiograph, "chest_xray"), (slice_file, "ct_slice")):
        expected = processor(path, modalities=modality)["pixel_values"]
        dataset = pydicom.dcmread(path)
        assert torch.equal(processor(dataset, modalities=modality)["pixel_values"], expected)
        assert torch.equal(processor.preprocess_one(dataset, modality), expected[0])
        unnamed = pydicom.dcmread(io.BytesIO(path.read_bytes()))  # as a `datasets` table holds bytes
        assert torch.equal(processor([unnamed, dataset], modalities=modality)["pixel_values"][0], expected[0])
        assert processor.load(unnamed).source == "<pydicom.Dataset>"


def test_the_datasets_of_a_series_assemble_like_its_folder(processor, tmp_path):
    files = write_series(tmp_path / "series", box_phantom())
    folder = load_image(tmp_path / "series")
    datasets = [pydicom.dcmread(f) for f in files[::-1]]  # the order does not matter
    from_datasets = read_in_memory(datasets)
    assert_same_image(from_datasets, folder)
    assert from_datasets.source == str(tmp_path / "series")
    unnamed = [pydicom.dcmread(io.BytesIO(f.read_bytes())) for f in files]
    assert read_in_memory(unnamed).source == "<pydicom.Dataset series>"
    expected = processor(tmp_path / "series", modalities="chest_ct")["pixel_values"]
    assert torch.equal(processor(processor.load(unnamed), modalities="chest_ct")["pixel_values"], expected)
    assert torch.equal(processor.preprocess_one(tuple(unnamed), "chest_ct"), expected[0])
    # a list given to __call__ is a batch: here one 2D image per slice
    assert processor(unnamed[5:8], modalities="ct_slice")["pixel_values"].shape == (3, 1, 1, 32, 32)

    with pytest.raises(MissingSliceError, match=r"^<pydicom.Dataset series>: missing slice"):
        read_in_memory(unnamed[:5] + unnamed[6:])
    other = [pydicom.dcmread(f) for f in write_series(tmp_path / "other", box_phantom(), series_number=2)]
    with pytest.raises(SeriesError, match="belong to 2 series: give those of one series"):
        read_in_memory(unnamed + other)
    unnamed[3].PixelSpacing = [0.5, 0.5]
    with pytest.raises(InconsistentGeometryError, match=r"^<pydicom.Dataset \[3\]>: pixel spacing differs"):
        read_in_memory(unnamed)


def test_errors_name_the_dataset_never_its_identifying_values(tmp_path, caplog):
    file = write_series(tmp_path / "series", box_phantom((1, 20, 20), ((0, 1), (5, 15), (5, 15))))[0]
    named, unnamed = pydicom.dcmread(file), pydicom.dcmread(io.BytesIO(file.read_bytes()))
    for dataset in (named, unnamed):
        del dataset.PixelData
    damaged = pydicom.dcmread(io.BytesIO(file.read_bytes()))
    damaged.PixelData = damaged.PixelData[:100]  # shorter than its rows x columns
    caplog.set_level(logging.DEBUG)
    with pytest.raises(UnsupportedImageError, match=rf"^{file}: no pixel data"):
        read_in_memory(named)
    with pytest.raises(UnsupportedImageError, match=r"^<pydicom.Dataset>: no pixel data \(a CT object"):
        read_in_memory(unnamed)
    with pytest.raises(MedicalImageError, match=r"^<pydicom.Dataset>: ") as raised:
        read_in_memory(damaged)
    for text in (str(raised.value), caplog.text):
        for value in FAKE_IDENTITY.values():
            assert value not in text
    with pytest.raises(TypeError, match="a pydicom Dataset, a nibabel image, a MONAI MetaTensor"):
        MedReCoImageProcessor().preprocess_one({"bytes": b""}, "chest_ct")


# ------------------------------------------------------------------ nibabel


@pytest.mark.parametrize("name", NIBABEL_FILES)
def test_nibabel_images_read_as_their_files(name):
    path, options = NIBABEL_DATA / name, ReaderOptions(volume_index=1)  # the second volume of 4D images
    assert_same_image(read_in_memory(nib.load(path), options), load_image(path, options))


def test_nibabel_images_built_in_memory_and_4d_images(processor, tmp_path):
    path = oblique_nifti(tmp_path / "oblique.nii.gz")
    expected = processor(path, modalities="brain_mri")["pixel_values"]
    loaded = nib.load(path)
    assert torch.equal(processor(loaded, modalities="brain_mri")["pixel_values"], expected)
    built = nib.Nifti1Image(np.asanyarray(loaded.dataobj), loaded.affine)  # no file behind it
    assert read_in_memory(built).source == "<nibabel.Nifti1Image>"
    assert torch.equal(processor(built, modalities="brain_mri")["pixel_values"], expected)
    from_bytes = nib.Nifti1Image.from_bytes(loaded.to_bytes())
    assert torch.equal(processor(from_bytes, modalities="brain_mri")["pixel_values"], expected)

    four_d = NIBABEL_DATA / "example4d.nii.gz"
    in_memory = nib.Nifti1Image(np.asanyarray(nib.load(four_d).dataobj), nib.load(four_d).affine)
    for image in (nib.load(four_d), in_memory):
        with pytest.raises(UnsupportedImageError, match="4D image with 2 volumes; choose one with ReaderOptions"):
            read_in_memory(image)
        options = ReaderOptions(volume_index=1)
        assert_same_image(read_in_memory(image, options), load_image(four_d, options), exact=False)


# ------------------------------------------------------------------ MONAI


@pytest.mark.parametrize("source", ["oblique", "flat", "anatomical.nii"])
def test_monai_load_image_gives_the_tensor_of_the_path(processor, tmp_path, source):
    monai_transforms = pytest.importorskip("monai.transforms")
    written = {"oblique": oblique_nifti, "flat": flat_nifti}
    path = written[source](tmp_path / f"{source}.nii.gz") if source in written else NIBABEL_DATA / source
    modality = "chest_xray" if source == "flat" else "brain_mri"
    expected = processor(path, modalities=modality)["pixel_values"]
    loaded = monai_transforms.LoadImage(image_only=True)(str(path))
    channel_first = monai_transforms.EnsureChannelFirst()(loaded)
    assert channel_first.shape == (1, *loaded.shape)
    for tensor in (loaded, channel_first):
        assert_same_image(read_in_memory(tensor), load_image(path), exact=False)
        torch.testing.assert_close(processor(tensor, modalities=modality)["pixel_values"], expected)


def test_monai_4d_images_lps_affines_and_batches(tmp_path):
    monai_transforms = pytest.importorskip("monai.transforms")
    from monai.data import MetaTensor

    four_d = NIBABEL_DATA / "example4d.nii.gz"
    loaded = monai_transforms.LoadImage(image_only=True)(str(four_d))
    options = ReaderOptions(volume_index=1)
    for tensor in (loaded, monai_transforms.EnsureChannelFirst()(loaded)):
        assert_same_image(read_in_memory(tensor, options), load_image(four_d, options), exact=False)
        with pytest.raises(UnsupportedImageError, match=rf"^{four_d}: 4D image with 2 volumes"):
            read_in_memory(tensor)

    path = oblique_nifti(tmp_path / "oblique.nii.gz")
    image = nib.load(path)
    lps = MetaTensor(np.asanyarray(image.dataobj), affine=np.diag([-1.0, -1.0, 1.0, 1.0]) @ image.affine)
    lps.meta["space"] = "LPS"
    assert_same_image(read_in_memory(lps), load_image(path), exact=False)
    batch = monai_transforms.EnsureChannelFirst()(monai_transforms.LoadImage(image_only=True)(str(path)))[None]
    batch.is_batch = True
    with pytest.raises(UnsupportedImageError, match="a batch of MetaTensors"):
        read_in_memory(batch)


def test_monai_dicom_series_gives_the_volume_of_the_folder(tmp_path):
    monai_transforms = pytest.importorskip("monai.transforms")
    write_series(tmp_path / "series", box_phantom())
    folder = load_image(tmp_path / "series")
    for lps_to_ras in (True, False):
        loader = monai_transforms.LoadImage(reader="PydicomReader", image_only=True, affine_lps_to_ras=lps_to_ras)
        tensor = loader(str(tmp_path / "series"))
        image = read_in_memory(tensor)
        np.testing.assert_allclose(image.array, folder.array)
        np.testing.assert_allclose(image.geometry.affine, folder.geometry.affine, atol=1e-4)


def test_the_package_does_not_import_monai():
    code = "import sys, medreco.processing; assert 'monai' not in sys.modules, 'monai imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# ------------------------------------------------------------------ datasets tables and chat templates


def test_a_datasets_table_with_nifti_and_dicom_columns_feeds_the_processor(processor, tmp_path):
    datasets = pytest.importorskip("datasets")
    volumes = [box_phantom(), box_phantom(box=((2, 12), (5, 25), (20, 40)))]
    niftis = [write_nifti_volume(tmp_path / f"v{i}.nii.gz", np.round(v)) for i, v in enumerate(volumes)]
    slices = [write_series(tmp_path / f"s{i}", v[5:6], series_number=i + 1)[0] for i, v in enumerate(volumes)]

    # datasets 5.2 has a Nifti feature (nibabel images), from paths or from the files' bytes
    by_path = datasets.Dataset.from_dict({"image": [str(p) for p in niftis]}).cast_column("image", datasets.Nifti())
    by_bytes = datasets.Dataset.from_dict(
        {"image": [{"bytes": p.read_bytes(), "path": None} for p in niftis]},
        features=datasets.Features({"image": datasets.Nifti()}),
    )
    expected = processor(niftis, modalities="chest_ct")["pixel_values"]
    for table in (by_path, by_bytes):
        row = table[1]["image"]
        assert isinstance(row, nib.Nifti1Image)
        assert torch.equal(processor(row, modalities="chest_ct")["pixel_values"][0], expected[1])
        assert torch.equal(processor(table[:2]["image"], modalities="chest_ct")["pixel_values"], expected)

    # and no DICOM feature: a column of paths, read with pydicom as rows are taken
    table = datasets.Dataset.from_dict({"path": [str(p) for p in slices]})
    table = table.with_transform(lambda batch: {"dicom": [pydicom.dcmread(p) for p in batch["path"]]})
    row = table[0]["dicom"]
    assert isinstance(row, pydicom.Dataset)
    expected = processor(slices, modalities="ct_slice")["pixel_values"]
    assert torch.equal(processor(row, modalities="ct_slice")["pixel_values"][0], expected[0])
    assert torch.equal(processor(table[:2]["dicom"], modalities="ct_slice")["pixel_values"], expected)


def test_the_chat_template_takes_images_in_memory(processor, tmp_path):
    files = write_series(tmp_path / "series", box_phantom())
    nifti = write_nifti_volume(tmp_path / "v.nii.gz", np.round(box_phantom()))
    chat = MedReCoProcessor(processor, AutoTokenizer.from_pretrained(bundled_text_encoder_path()), patch_size=8)
    images = [[pydicom.dcmread(f) for f in files], nib.load(nifti)]  # a series (its Datasets) and a NIfTI image
    blocks = [{"type": "image", "image": image, "modality": "chest_ct"} for image in images]
    messages = [{"role": "user", "content": [*blocks, {"type": "text", "text": "Has it changed?"}]}]
    batch = chat.apply_chat_template(messages, tokenize=True, return_dict=True, return_tensors="pt")
    expected = processor([tmp_path / "series", nifti], modalities="chest_ct")["pixel_values"]
    assert torch.equal(batch["pixel_values"], expected)
