import numpy as np
import pytest
import torch
from transformers import AutoImageProcessor

from io_helpers import box_phantom, write_series
from medreco.errors import InvalidPixelDataError, ModalityError, UnsupportedImageError
from medreco.processing import MedReCoImageProcessor, load_image, resample_to_grid
from medreco.processing.preprocessing import DEFAULT_RECIPES, ModalityRecipe, preprocess_image

SMALL = {
    "chest_ct": {"size": [40, 64, 64], "spacing": [1.0, 1.0, 1.0]},
    "chest_xray": {"size": [1, 32, 32]},
}


def test_paper_defaults():
    ct = DEFAULT_RECIPES["chest_ct"]
    assert ct.size == (240, 480, 480) and ct.spacing == (1.5, 0.75, 0.75) and ct.window == (-1000.0, 1000.0)
    assert DEFAULT_RECIPES["chest_xray"].size == (1, 480, 480)


def test_resampler_identity_upsampling_and_box_downsampling():
    volume = torch.rand(4, 6, 8)
    torch.testing.assert_close(resample_to_grid(volume, (1, 1, 1), (4, 6, 8), (1, 1, 1)), volume)
    ramp = torch.arange(8.0).expand(1, 1, 8)
    up = resample_to_grid(ramp, (1, 1, 2), (1, 1, 16), (1, 1, 1))[0, 0]
    # output centres sit at input index (o - 7.5) / 2 + 3.5; linear interpolation, clamped at the ends
    torch.testing.assert_close(up[1:-1], (torch.arange(1, 15.0) - 7.5) / 2 + 3.5)
    down = resample_to_grid(torch.arange(16.0).expand(1, 1, 16), (1, 1, 1), (1, 1, 8), (1, 1, 2))[0, 0]
    torch.testing.assert_close(down, torch.arange(8.0) * 2 + 0.5)  # mean of each pair: no aliasing


def test_crop_and_pad_are_centred_with_one_pad_value():
    padded = resample_to_grid(torch.ones(1, 4, 4), (1, 1, 1), (1, 8, 8), (1, 1, 1), pad_value=0.25)[0]
    assert padded[2:6, 2:6].eq(1).all() and padded[:2].eq(0.25).all() and padded[:, 6:].eq(0.25).all()
    cropped = resample_to_grid(torch.arange(10.0).expand(1, 1, 10), (1, 1, 1), (1, 1, 4), (1, 1, 1))[0, 0]
    torch.testing.assert_close(cropped, torch.tensor([3.0, 4, 5, 6]))


def test_series_resamples_to_the_right_physical_extent(tmp_path):
    # a 20 mm x 16 mm x 12 mm box: 10 slices of 2 mm, 20 rows of 0.8 mm, 20 columns of 0.6 mm
    volume = box_phantom(shape=(20, 40, 50), box=((5, 15), (10, 30), (15, 35)))
    write_series(tmp_path / "s", volume, spacing=(2.0, 0.8, 0.6))
    processor = MedReCoImageProcessor(recipes=SMALL)
    tensor = processor.preprocess_one(tmp_path / "s", "chest_ct")[0]
    assert tensor.shape == (40, 64, 64)
    # HU 400 -> 0.7 in the window [-1000, 1000]; half the box value marks its edge under linear interpolation
    inside = tensor > 0.35
    extent_mm = [int(inside.any(dim=tuple(a for a in range(3) if a != axis)).sum()) * 1.0 for axis in range(3)]
    assert extent_mm == pytest.approx([20, 16, 12], abs=1.0)
    assert tensor.max() == pytest.approx((400 + 1000) / 2000, abs=0.01)


def test_ct_window_and_mri_percentiles():
    image = MedReCoImageProcessor.array_to_image(np.linspace(-2000, 2000, 4 * 8 * 8).reshape(4, 8, 8), (1, 1, 1))
    ct = preprocess_image(image, ModalityRecipe("ct", (4, 8, 8), (1, 1, 1), window=(-1000, 1000)), "chest_ct")
    assert ct.min() == 0 and ct.max() == 1
    mri = preprocess_image(image, ModalityRecipe("mri", (4, 8, 8), (1, 1, 1), percentiles=(10, 90)), "brain_mri")
    assert mri.min() == 0 and mri.max() == 1 and (mri == 0).float().mean() == pytest.approx(0.1, abs=0.02)


def test_recipe_standardisation_is_applied_after_scaling_and_saved(tmp_path):
    image = MedReCoImageProcessor.array_to_image(np.linspace(-2000, 2000, 4 * 8 * 8).reshape(4, 8, 8), (1, 1, 1))
    plain = ModalityRecipe("ct", (4, 8, 8), (1, 1, 1), window=(-1000, 1000))
    standardised = ModalityRecipe("ct", (4, 8, 8), (1, 1, 1), window=(-1000, 1000), mean=0.25, std=0.5)
    expected = (preprocess_image(image, plain, "chest_ct") - 0.25) / 0.5
    assert torch.allclose(preprocess_image(image, standardised, "chest_ct"), expected)
    with pytest.raises(ValueError, match="std must be positive"):
        ModalityRecipe("ct", (4, 8, 8), std=0.0)
    with pytest.raises(ValueError, match=r"recipe of 'chest_xray'.*mean finite"):
        MedReCoImageProcessor(recipes={"chest_xray": {"mean": float("nan")}})
    processor = MedReCoImageProcessor(
        recipes={**SMALL, "chest_xray": {**SMALL["chest_xray"], "mean": 0.5, "std": 0.25}}
    )
    processor.save_pretrained(tmp_path)
    reloaded = MedReCoImageProcessor.from_pretrained(tmp_path)
    assert reloaded.recipe("chest_xray").mean == 0.5 and reloaded.recipe("chest_xray").std == 0.25
    picture = np.tile(np.linspace(0.0, 1.0, 32, dtype=np.float32), (32, 1))
    raw = MedReCoImageProcessor(recipes=SMALL).preprocess_one(picture, "chest_xray", spacing=(1.0, 1.0))
    assert torch.allclose(reloaded.preprocess_one(picture, "chest_xray", spacing=(1.0, 1.0)), (raw - 0.5) / 0.25)


def test_projection_keeps_aspect_ratio():
    processor = MedReCoImageProcessor(recipes=SMALL)
    wide = np.tile(np.linspace(0.0, 1.0, 40, dtype=np.float32), (20, 1))
    tensor = processor.preprocess_one(wide, "chest_xray", spacing=(1.0, 1.0))[0, 0]
    rows_with_content = (tensor > 0).any(dim=1).sum().item()
    assert tensor.shape == (32, 32) and rows_with_content == pytest.approx(16, abs=1)


def test_wrong_modality_and_dimensionality(tmp_path):
    write_series(tmp_path / "s", box_phantom())
    processor = MedReCoImageProcessor(recipes=SMALL)
    with pytest.raises(ModalityError, match="CT image cannot be preprocessed as chest_xray"):
        processor.preprocess_one(tmp_path / "s", "chest_xray")
    with pytest.raises(UnsupportedImageError, match="single slice"):
        processor.preprocess_one(np.random.rand(8, 8), "chest_ct", spacing=(1, 1))
    with pytest.raises(InvalidPixelDataError, match="no contrast"):
        processor.preprocess_one(np.zeros((8, 8)), "chest_xray")
    with pytest.raises(ValueError, match="unknown modality"):
        processor.preprocess_one(np.random.rand(8, 8), "pet")


def test_batches_pairs_and_shape_errors(tmp_path):
    write_series(tmp_path / "prior", box_phantom())
    write_series(tmp_path / "current", box_phantom(inside=800))
    processor = MedReCoImageProcessor(recipes=SMALL)
    batch = processor([(tmp_path / "prior", tmp_path / "current")], "chest_ct")
    assert batch["pixel_values"].shape == (2, 1, 40, 64, 64)
    assert batch["modality_ids"].tolist() == [1, 1] and batch["images_per_sample"].tolist() == [2]
    assert batch["depth"].tolist() == [40, 40]
    assert batch["pixel_values"][1].max() > batch["pixel_values"][0].max()
    with pytest.raises(ValueError, match="batch 2D and 3D separately"):
        processor([tmp_path / "prior", np.random.rand(20, 20)], ["chest_ct", "chest_xray"], spacing=None)


def test_processor_round_trip_and_auto_class(tmp_path):
    processor = MedReCoImageProcessor(recipes=SMALL, pad_value=0.0, tensor_cache_dir=str(tmp_path / "cache"))
    processor.save_pretrained(tmp_path / "p")
    saved = (tmp_path / "p" / "preprocessor_config.json").read_text()
    assert "tensor_cache_dir" not in saved  # a machine setting, never shared
    loaded = AutoImageProcessor.from_pretrained(tmp_path / "p")
    assert type(loaded) is MedReCoImageProcessor and loaded.recipes == processor.recipes
    image = np.random.rand(24, 24).astype(np.float32)
    torch.testing.assert_close(
        loaded.preprocess_one(image, "chest_xray"), processor.preprocess_one(image, "chest_xray")
    )


def test_loaded_images_and_paths_give_the_same_tensor(tmp_path):
    write_series(tmp_path / "s", box_phantom())
    processor = MedReCoImageProcessor(recipes=SMALL)
    torch.testing.assert_close(
        processor.preprocess_one(tmp_path / "s", "chest_ct"),
        processor.preprocess_one(load_image(tmp_path / "s"), "chest_ct"),
    )
