"""`MedReCoImageProcessor`: paths, arrays, images already in memory (pydicom, nibabel, MONAI) or loaded
images in; `pixel_values` and `modality_ids` out.

Follows the Hugging Face image-processor conventions (saved as `preprocessor_config.json`,
loadable with `AutoImageProcessor`), but speaks medical images: it reads DICOM/NIfTI/PNG through
`medreco.processing.readers`, preprocesses by modality family, and can cache the result."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import torch
from safetensors.torch import save_file
from transformers.image_processing_base import BatchFeature
from transformers.image_processing_utils import BaseImageProcessor
from transformers.image_utils import is_pil_image

from ..atomic import atomic_path
from ..modeling.configuration_vision import DEFAULT_MODALITIES
from .cache import DigestMemo, TensorCache
from .geometry import ImageGeometry, MedicalImage
from .preprocessing import DEFAULT_RECIPES, ModalityRecipe, preprocess_image
from .readers import InMemoryImage, ReaderOptions, from_pil_image, is_in_memory_image, load_image, read_in_memory
from .remote_code import AutoEntry, save_with_code

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PreprocessedImage:
    """An image already turned into its model tensor (`MedReCoImageProcessor.preprocessed`), with
    the modality and settings that made it: an evaluation that asks about each image many times
    preprocesses it once, and a processor with other settings refuses it rather than misread it."""

    pixel_values: torch.Tensor
    modality: str
    settings: str


# or a PIL image, or a MONAI MetaTensor (a torch.Tensor)
ImageLike = str | Path | np.ndarray | torch.Tensor | MedicalImage | PreprocessedImage | InMemoryImage


class MedReCoImageProcessorKwargs(TypedDict, total=False):
    modalities: list[str]
    recipes: dict[str, dict]
    pad_value: float
    tensor_cache_dir: str | None
    cache_dtype: str
    nan_policy: str
    allow_uneven_spacing: bool


def image_processor_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The settings among `from_pretrained`'s keyword arguments (not the Hub's: revision, token, ...)."""
    return {k: v for k, v in kwargs.items() if k in MedReCoImageProcessorKwargs.__annotations__}


class MedReCoImageProcessor(BaseImageProcessor):
    """Preprocess medical images for the MedReCo models.

    modalities: the expert id table (same order as the model's `vision_config.modalities`).
    recipes: per-modality settings overriding `DEFAULT_RECIPES` (see `ModalityRecipe`).
    pad_value: the value of padding everywhere (after intensity normalisation to [0, 1], before
      the recipe's standardisation).
    tensor_cache_dir: if set, preprocessed tensors of file inputs are cached there (see `TensorCache`).

    Example:
    ```python
    >>> processor = MedReCoImageProcessor(tensor_cache_dir="~/.cache/medreco")
    >>> batch = processor(["ct_series_folder/", "scan.nii.gz"], modalities="chest_ct")
    >>> batch["pixel_values"].shape, batch["modality_ids"]
    (torch.Size([2, 1, 240, 480, 480]), tensor([1, 1]))
    ```"""

    model_input_names = ["pixel_values", "modality_ids"]
    valid_kwargs = MedReCoImageProcessorKwargs

    def __init__(
        self,
        modalities: list[str] | None = None,
        recipes: dict[str, dict] | None = None,
        pad_value: float = 0.0,
        tensor_cache_dir: str | None = None,
        cache_dtype: str = "float16",
        nan_policy: str = "raise",
        allow_uneven_spacing: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.modalities = list(modalities or DEFAULT_MODALITIES)
        merged = {name: recipe.to_dict() for name, recipe in DEFAULT_RECIPES.items()}
        for name, values in (recipes or {}).items():
            merged[name] = {**merged.get(name, {}), **values}
        self.recipes = merged
        self.pad_value = float(pad_value)
        self.tensor_cache_dir = None if tensor_cache_dir is None else str(tensor_cache_dir)
        self.cache_dtype = cache_dtype
        self.nan_policy = nan_policy
        self.allow_uneven_spacing = allow_uneven_spacing
        self._digests = DigestMemo()  # not saved: to_dict leaves out private attributes
        missing = [name for name in self.modalities if name not in self.recipes]
        if missing:
            raise ValueError(f"no preprocessing recipe for modalities {missing}; pass recipes={{name: {{...}}}}")
        for name in self.modalities:  # a bad recipe fails here, named, not at the first image
            try:
                ModalityRecipe.from_dict(self.recipes[name])
            except (TypeError, ValueError) as error:
                raise ValueError(f"preprocessing recipe of {name!r}: {error}") from None

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """The saved image processor; for a model folder saved without one, the one its config implies
        (`medreco.processing.from_config`)."""
        from .from_config import image_processor_for, needs_processor_from_config, read_model_config, vision_config_of

        if needs_processor_from_config(pretrained_model_name_or_path):
            config = read_model_config(pretrained_model_name_or_path)
            return image_processor_for(vision_config_of(config), **image_processor_kwargs(kwargs))
        return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        # tensor_cache_dir is a setting of this machine, not of the model: it is never saved or shared
        return {k: v for k, v in super().to_dict().items() if not k.startswith("_") and k != "tensor_cache_dir"}

    def save_pretrained(self, save_directory, push_to_hub: bool = False, **kwargs):
        """`preprocessor_config.json`, plus this code for `trust_remote_code=True` loading."""
        entries = [AutoEntry("AutoImageProcessor", type(self), "preprocessor_config.json")]
        return save_with_code(self, super().save_pretrained, save_directory, push_to_hub, entries, **kwargs)

    def recipe(self, modality: str) -> ModalityRecipe:
        if modality not in self.modalities:
            raise ValueError(f"unknown modality {modality!r}; this processor knows {self.modalities}")
        return ModalityRecipe.from_dict(self.recipes[modality])

    def modality_id(self, modality: str) -> int:
        self.recipe(modality)
        return self.modalities.index(modality)

    @property
    def reader_options(self) -> ReaderOptions:
        return ReaderOptions(nan_policy=self.nan_policy, allow_uneven_spacing=self.allow_uneven_spacing)

    def _settings(self, modality: str) -> dict:
        return {
            "modality": modality,
            "recipe": self.recipes[modality],
            "pad_value": self.pad_value,
            "nan_policy": self.nan_policy,
            "allow_uneven_spacing": self.allow_uneven_spacing,
        }

    def _cache(self) -> TensorCache | None:
        if self.tensor_cache_dir is None:
            return None
        return TensorCache(Path(self.tensor_cache_dir).expanduser(), getattr(torch, self.cache_dtype))

    def load(self, image: str | Path | InMemoryImage) -> MedicalImage:
        """Read a file or series, or an image already in memory (a pydicom Dataset or the Datasets of one
        series, a nibabel image, a MONAI MetaTensor), with this processor's reader options, logging the
        reader's notes."""
        loaded = _read(image, self.reader_options)
        for note in loaded.warnings:
            logger.info("%s: %s", loaded.source, note)
        return loaded

    def preprocessed(
        self, image: ImageLike, modality: str, spacing: Sequence[float] | None = None
    ) -> PreprocessedImage:
        """`image` preprocessed once for this processor: later calls take its tensor as it is."""
        tensor = self.preprocess_one(image, modality, spacing)
        return PreprocessedImage(tensor, modality, json.dumps(self._settings(modality), sort_keys=True))

    def preprocess_one(self, image: ImageLike, modality: str, spacing: Sequence[float] | None = None) -> torch.Tensor:
        """One image to its model tensor `(1, D, H, W)`."""
        recipe = self.recipe(modality)
        if isinstance(image, PreprocessedImage):
            if image.modality != modality or image.settings != json.dumps(self._settings(modality), sort_keys=True):
                raise ValueError(
                    f"an image preprocessed as {image.modality} with other settings cannot be read as {modality} "
                    "by this processor: give the image itself"
                )
            return image.pixel_values
        if isinstance(image, (str, Path)):
            cache = self._cache() if Path(image).exists() else None  # a missing file: the reader's error
            key = self._digests(image, self._settings(modality)) if cache is not None else None
            if cache is not None and (cached := cache.get(key)) is not None:
                return cached
            tensor = preprocess_image(self.load(image), recipe, modality, self.pad_value)
            if cache is not None:
                cache.put(key, tensor)
                # the values every later read returns: a run sees the same input cold or warm
                tensor = tensor.to(cache.dtype).float()
            return tensor
        if isinstance(image, MedicalImage):
            return preprocess_image(image, recipe, modality, self.pad_value)
        if is_in_memory_image(image):  # before arrays: a MetaTensor is a torch.Tensor
            return preprocess_image(self.load(image), recipe, modality, self.pad_value)
        if is_pil_image(image):
            return preprocess_image(from_pil_image(image, self.reader_options), recipe, modality, self.pad_value)
        if not isinstance(image, (np.ndarray, torch.Tensor)):
            raise TypeError(
                f"cannot read a {type(image).__name__} as an image: give a path (DICOM file or series folder, "
                "NIfTI, PNG, JPEG), a pydicom Dataset, a nibabel image, a MONAI MetaTensor, a PIL image, an array "
                "or a MedicalImage"
            )
        return preprocess_image(self.array_to_image(image, spacing), recipe, modality, self.pad_value)

    @staticmethod
    def array_to_image(array: np.ndarray | torch.Tensor, spacing: Sequence[float] | None = None) -> MedicalImage:
        """Wrap a (H, W) or (D, H, W) array (canonical orientation) with its voxel spacing in mm."""
        values = np.asarray(array.detach().cpu() if isinstance(array, torch.Tensor) else array, dtype=np.float32)
        if values.ndim == 2:
            values = values[None]
        if values.ndim != 3:
            raise ValueError(f"arrays must be (H, W) or (D, H, W); got shape {values.shape}")
        if spacing is not None and len(spacing) == 2:
            spacing = (1.0, *spacing)
        geometry = ImageGeometry(
            spacing=tuple(float(s) for s in (spacing or (1.0, 1.0, 1.0))), spacing_known=spacing is not None
        )
        return MedicalImage(values, geometry, source="<array>")

    def __call__(
        self,
        images: ImageLike | Sequence[ImageLike] | Sequence[tuple[ImageLike, ...]],
        modalities: str | Sequence[str],
        spacing: Sequence[float] | None = None,
        return_tensors: str | None = "pt",
        **kwargs,
    ) -> BatchFeature:
        """Preprocess one image, a list, or a list of tuples (prior/current or query/candidate pairs,
        flattened in order). `modalities` is one name for all, or one per image (or per tuple). A list of
        pydicom Datasets is a list of images: read the Datasets of one series with `load` first.
        Returns `pixel_values` `(N, 1, D, H, W)`, `modality_ids` `(N,)`, `depth` `(N,)` (1 for 2D
        images) and `images_per_sample`."""
        single = (str, Path, np.ndarray, torch.Tensor, MedicalImage, PreprocessedImage)
        listed = isinstance(images, (list, tuple))  # a list of Datasets: one image each
        if isinstance(images, single) or is_pil_image(images) or (is_in_memory_image(images) and not listed):
            images = [images]
        samples = [tuple(item) if isinstance(item, (tuple, list)) else (item,) for item in images]
        if isinstance(modalities, str):
            modalities = [modalities] * len(samples)
        if len(modalities) != len(samples):
            raise ValueError(f"{len(modalities)} modalities for {len(samples)} samples")
        tensors, ids = [], []
        for sample, modality in zip(samples, modalities):
            for image in sample:
                tensors.append(self.preprocess_one(image, modality, spacing))
                ids.append(self.modality_id(modality))
        shapes = {tuple(t.shape) for t in tensors}
        if len(shapes) > 1:
            raise ValueError(
                f"images of different shapes cannot share a batch: {sorted(shapes)}; batch 2D and 3D separately"
            )
        data = {
            "pixel_values": torch.stack(tensors),
            "modality_ids": torch.tensor(ids, dtype=torch.long),
            "images_per_sample": torch.tensor([len(s) for s in samples], dtype=torch.long),
            "depth": torch.tensor([t.shape[1] for t in tensors], dtype=torch.long),  # 1 for 2D images
        }
        return BatchFeature(data=data, tensor_type=return_tensors)


def _read(image: str | Path | InMemoryImage, options: ReaderOptions) -> MedicalImage:
    """A path by `load_image`, an image already in memory by `read_in_memory`."""
    return read_in_memory(image, options) if is_in_memory_image(image) else load_image(image, options)


def write_model_input(
    image: ImageLike,
    modality: str,
    out: str | Path,
    options: ReaderOptions | None = None,
    processor: MedReCoImageProcessor | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Read and preprocess one image with `processor` (default: the paper's recipes; a model's own,
    `MedReCoImageProcessor.from_pretrained(folder)`, to match it) and save its tensor as safetensors
    in `dtype` (key `pixel_values`, the modality and its recipe in the metadata), written atomically;
    returns the tensor as saved."""
    processor = processor or MedReCoImageProcessor()
    if not isinstance(image, MedicalImage):
        image = _read(image, options or ReaderOptions())
    tensor = processor.preprocess_one(image, modality).to(dtype)
    metadata = {
        "modality": modality,
        "modality_id": str(processor.modality_id(modality)),
        "recipe": json.dumps(processor.recipes[modality], sort_keys=True),
    }
    with atomic_path(out) as temporary:
        save_file({"pixel_values": tensor.contiguous()}, temporary, metadata=metadata)
    return tensor


__all__ = ["MedReCoImageProcessor", "PreprocessedImage", "write_model_input"]
