"""MONAI dictionary transforms on stage 1's training images (DataConfig.train_transforms): seeded by
the batch, the same from loader workers and after a resume, never written to what is cached."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("monai")

from medreco.errors import TrainingDataError
from medreco.training import ModalityBatchSampler, load_recipe
from medreco.training.augmentation import TrainTransforms, image_seed
from medreco.training.config import RecipeError, TransformSpec
from medreco.training.loop import phase_batches, train_phase
from medreco.training.reranker import RerankerTrainer
from medreco.training.stage1 import Stage1Trainer
from medreco.training.stage2 import Stage2Trainer
from toy_training import stage1_config

DIMS = {"chest_xray": 2, "chest_ct": 3}
NOISE = 'data.train_transforms=[{"name": "RandGaussianNoised", "args": {"prob": 1.0, "std": 0.3, "sample_std": false}}]'
FLIP_AND_NOISE = "data.train_transforms=" + json.dumps(
    [
        {"name": "RandFlipd", "args": {"prob": 0.5, "spatial_axis": 1}},
        {"name": "RandGaussianNoised", "args": {"prob": 1.0, "std": 0.3, "sample_std": False}},
    ]
)


def test_an_image_s_draw_is_its_seed_s_and_leaves_the_process_random_state_alone():
    transforms = TrainTransforms(
        [TransformSpec("RandAffined", {"prob": 1.0, "rotate_range": 0.3}), TransformSpec("RandGaussianNoised")], DIMS
    )
    image = torch.rand(1, 1, 32, 32)
    numpy_state, torch_state = np.random.get_state()[1].copy(), torch.random.get_rng_state()
    first = transforms(image, "chest_xray", seed=11)
    assert torch.equal(first, transforms(image, "chest_xray", seed=11))
    assert not torch.equal(first, transforms(image, "chest_xray", seed=12))
    assert first.shape == image.shape and first.dtype == torch.float32 and type(first) is torch.Tensor
    assert np.array_equal(np.random.get_state()[1], numpy_state)
    assert torch.equal(torch.random.get_rng_state(), torch_state)
    # the seed is a stable hash of (run seed, epoch, batch, place), not Python's salted hash()
    assert image_seed(0, 1, ["a", "b"], 0) == image_seed(0, 1, ["a", "b"], 0) < 2**32
    assert len({image_seed(0, 1, ["a", "b"], 0), image_seed(0, 2, ["a", "b"], 0), image_seed(0, 1, ["a", "b"], 1)}) == 3
    assert image_seed(0, 1, ["a", "b"], 0) != image_seed(1, 1, ["a", "b"], 0)


def test_2d_images_have_two_spatial_axes_volumes_three_and_modalities_choose_their_transforms():
    transforms = TrainTransforms(
        [
            TransformSpec("RandFlipd", {"prob": 1.0, "spatial_axis": 1}, ["chest_xray"]),  # 2D: the width
            TransformSpec("RandFlipd", {"prob": 1.0, "spatial_axis": 0}, ["chest_ct"]),  # 3D: the depth
        ],
        {**DIMS, "brain_mri": 3},
    )
    image, volume = torch.rand(1, 1, 8, 6), torch.rand(1, 5, 8, 6)
    assert torch.equal(transforms(image, "chest_xray", 0), torch.flip(image, dims=[-1]))
    assert torch.equal(transforms(volume, "chest_ct", 0), torch.flip(volume, dims=[1]))
    assert transforms(volume, "brain_mri", 0) is volume  # no transform names it
    assert not TrainTransforms([], DIMS)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (TransformSpec("RandNoSuchThingd"), "not a transform of monai.transforms"),
        (TransformSpec("os.path"), "not a transform of monai.transforms"),
        (TransformSpec("RandAffine"), "not a dictionary transform .its dictionary form is RandAffined"),
        (TransformSpec("RandFlipd", {"keys": ["label"]}), r"args.keys: set by medreco"),
        (TransformSpec("RandFlipd", {"probability": 1.0}), r"\[0\].args: RandFlipd refuses them"),
        (TransformSpec("RandFlipd", modalities=["knee_mri"]), r"\[0\].modalities: \['knee_mri'\] are not trained"),
    ],
)
def test_transforms_that_cannot_be_built_are_refused_naming_the_recipe_key(spec, message):
    with pytest.raises(RecipeError, match=message) as error:
        TrainTransforms([spec], DIMS)
    assert str(error.value).startswith("data.train_transforms[0]")


def test_a_transform_that_changes_the_shape_or_fails_on_the_image_is_a_typed_error():
    crop = TrainTransforms([TransformSpec("RandSpatialCropd", {"roi_size": [4, 4], "random_size": False})], DIMS)
    with pytest.raises(
        TrainingDataError, match=r"chest_xray transforms changed an image's shape from \(8, 8\) to \(4, 4\)"
    ):
        crop(torch.rand(1, 1, 8, 8), "chest_xray", 0)
    flip = TrainTransforms([TransformSpec("RandFlipd", {"prob": 1.0, "spatial_axis": 3})], DIMS)  # 2D: axes 0, 1
    with pytest.raises(TrainingDataError, match="chest_xray transforms fail on its images"):
        flip(torch.rand(1, 1, 8, 8), "chest_xray", 0)


def test_without_monai_the_recipe_says_what_to_install(monkeypatch):
    import importlib

    real = importlib.import_module
    monkeypatch.setattr(
        importlib,
        "import_module",
        lambda name, *a: (_ for _ in ()).throw(ImportError(name)) if "monai" in name else real(name, *a),
    )
    with pytest.raises(RecipeError, match=r'pip install "medreco\[monai\]"'):
        TrainTransforms([TransformSpec("RandFlipd")], DIMS)


def test_recipe_entries_are_typed_and_only_stage_1_augments(toy, tmp_path):
    config = stage1_config(toy, tmp_path, FLIP_AND_NOISE)
    assert config.data.train_transforms == [
        TransformSpec("RandFlipd", {"prob": 0.5, "spatial_axis": 1}),
        TransformSpec("RandGaussianNoised", {"prob": 1.0, "std": 0.3, "sample_std": False}),
    ]
    with pytest.raises(RecipeError, match=r"train_transforms\[0\]: unknown key\(s\) \['probability'\]"):
        stage1_config(toy, tmp_path, 'data.train_transforms=[{"name": "RandFlipd", "probability": 1}]')
    for stage, trainer in (("stage2", Stage2Trainer), ("reranker", RerankerTrainer)):
        recipe = load_recipe("tiny", stage, [f"data.mined_dir={toy}", NOISE])
        with pytest.raises(RecipeError, match=f"{stage}.data.train_transforms: only stage 1 augments"):
            trainer(recipe)


def _batches(trainer: Stage1Trainer, workers: int, epoch: int) -> list[dict]:
    phase = trainer.alignment_phase()
    sampler = ModalityBatchSampler(phase.modalities, phase.batch_size_for, seed=3)
    sampler.set_epoch(epoch, start=1)
    phase.set_epoch(epoch)
    return list(phase_batches(phase, sampler, workers, torch.device("cpu")))


def test_augmented_batches_are_the_same_from_loader_workers_and_new_each_epoch(toy, tmp_path):
    plain = Stage1Trainer(stage1_config(toy, tmp_path / "plain"))
    augmented = Stage1Trainer(stage1_config(toy, tmp_path / "augmented", FLIP_AND_NOISE))
    expected = _batches(plain, 0, epoch=1)
    main = _batches(augmented, 0, epoch=1)
    workers = _batches(augmented, 2, epoch=1)
    assert len(main) == len(workers) == len(expected) > 1
    for plain_batch, batch, from_workers in zip(expected, main, workers):
        assert torch.equal(batch["pixel_values"], from_workers["pixel_values"])
        assert batch["pixel_values"].shape == plain_batch["pixel_values"].shape
        noise = batch["pixel_values"] - plain_batch["pixel_values"]
        flipped = batch["pixel_values"] - torch.flip(plain_batch["pixel_values"], dims=[-1])
        # each image is itself or its mirror image, plus noise of the recipe's spread
        residual = torch.minimum(noise.flatten(1).std(1), flipped.flatten(1).std(1))
        torch.testing.assert_close(residual, torch.full_like(residual, 0.3), atol=0.03, rtol=0)
    next_epoch = _batches(augmented, 0, epoch=2)
    plain_next = _batches(plain, 0, epoch=2)
    same_images = [
        i for i, (a, b) in enumerate(zip(plain_next, expected)) if torch.equal(a["pixel_values"], b["pixel_values"])
    ]
    assert not any(torch.equal(next_epoch[i]["pixel_values"], main[i]["pixel_values"]) for i in same_images)
    # the stored tensors are the processor's, never augmented
    study = augmented.data.study_ids("train")[0]
    assert torch.equal(augmented.store[study], plain.store[study])


def test_the_tensor_cache_holds_unaugmented_tensors_and_is_never_rewritten(toy, tmp_path):
    cache = tmp_path / "cache"
    trainer = Stage1Trainer(
        stage1_config(toy, tmp_path / "run", NOISE, f"data.tensor_cache_dir={cache}", "data.preload_images=false")
    )
    studies = sorted(trainer.data.study_ids("train"))[:6]
    trainer.store.batch(studies)
    written = {p: p.read_bytes() for p in cache.rglob("*") if p.is_file()}
    assert written
    for epoch in range(3):
        trainer.store.set_epoch(epoch)
        pixels, _ = trainer.store.batch(studies)
    assert {p: p.read_bytes() for p in cache.rglob("*") if p.is_file()} == written
    uncached = Stage1Trainer(stage1_config(toy, tmp_path / "uncached"))
    for study, augmented in zip(studies, pixels):
        # read back from the cache (stored in half precision), unaugmented
        torch.testing.assert_close(trainer.store[study], uncached.store[study], atol=1e-3, rtol=0)
        assert (augmented - uncached.store[study]).std() > 0.25


def test_a_resumed_augmented_run_ends_with_the_uninterrupted_run_s_weights(toy, tmp_path):
    def run(out: Path, stop_after=None):
        torch.manual_seed(0)
        trainer = Stage1Trainer(stage1_config(toy, out, FLIP_AND_NOISE, "alignment.max_steps=9"))
        phase = trainer.alignment_phase()
        told, set_epoch = [], phase.set_epoch
        phase.set_epoch = lambda epoch: (told.append(epoch), set_epoch(epoch))
        result = train_phase(
            trainer.model, phase, trainer.config.alignment, trainer.config.run, out, stop_after=stop_after
        )
        return result, told

    (straight, told) = run(tmp_path / "straight")
    assert told == [0, 1, 2]  # the loop tells the store each epoch: 9 steps of 3 per epoch
    assert run(tmp_path / "resumed", stop_after=5)[0].summary["stopped_early"]
    resumed, told = run(tmp_path / "resumed")
    assert told == [1, 2]  # resumed inside epoch 1
    straight, resumed = straight.model.state_dict(), resumed.model.state_dict()
    for name, tensor in straight.items():
        torch.testing.assert_close(resumed[name], tensor, msg=name)


def test_the_documented_recipe_builds_and_keeps_2d_and_3d_shapes():
    import re

    import yaml

    from medreco.training.config import Stage1Config, build_config

    docs = (Path(__file__).parents[2] / "docs" / "training.md").read_text()
    section = docs[docs.index("### Augmentation") :]
    recipe = yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))
    config = build_config(Stage1Config, recipe["stage1"], "stage1")
    dims = {"chest_xray": 2, "ultrasound": 2, "chest_ct": 3, "abdominal_ct": 3, "brain_mri": 3}
    transforms = TrainTransforms(config.data.train_transforms, dims)
    assert len(transforms.chains["chest_ct"].transforms) == 3 and len(transforms.chains["brain_mri"].transforms) == 2
    for modality, shape in (("chest_xray", (1, 1, 24, 24)), ("chest_ct", (1, 6, 24, 24))):
        image = torch.rand(shape)
        assert transforms(image, modality, seed=4).shape == image.shape
