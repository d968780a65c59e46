"""Random MONAI dictionary transforms on training images (`DataConfig.train_transforms`).

They apply to the model-ready tensors the processor gives (after its tensor cache), so nothing
cached is ever augmented. Each image's random draw is seeded by the run's seed, the epoch and the
image's place in its batch, never by a process's random state: a resumed run, any number of loader
workers and every rank of a distributed run see the augmented batches that one uninterrupted
process would. A 2D image reaches the transforms as `(1, H, W)`, a volume as `(1, D, H, W)`; the
transforms must keep that shape (the batch stacks images of the recipe's size)."""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ..errors import TrainingDataError
from .config import RecipeError, TransformSpec

WHERE = "data.train_transforms"
IMAGE_KEY = "image"


class TrainTransforms:
    """The recipe's transforms, chained per modality. `spatial_dims` maps each trained modality to
    2 (radiographs, ultrasound) or 3 (CT, MRI)."""

    def __init__(self, specs: Sequence[TransformSpec], spatial_dims: Mapping[str, int]):
        monai_transforms = _monai_transforms()
        built = []
        for i, spec in enumerate(specs):
            where = f"{WHERE}[{i}]"
            unknown = sorted(set(spec.modalities or ()) - set(spatial_dims))
            if unknown:
                raise RecipeError(f"{where}.modalities: {unknown} are not trained (modalities: {sorted(spatial_dims)})")
            built.append((spec, _build(monai_transforms, spec, where)))
        self.spatial_dims = dict(spatial_dims)
        self.chains = {}
        for modality in spatial_dims:
            chain = [t for spec, t in built if spec.modalities is None or modality in spec.modalities]
            if chain:
                self.chains[modality] = monai_transforms.Compose(chain)

    def __bool__(self) -> bool:
        return bool(self.chains)

    def __call__(self, image: torch.Tensor, modality: str, seed: int) -> torch.Tensor:
        """`image` `(1, D, H, W)` (D = 1 for 2D) transformed with the draw of `seed`, same shape."""
        chain = self.chains.get(modality)
        if chain is None:
            return image
        flat = self.spatial_dims[modality] == 2
        chain.set_random_state(seed=seed)
        try:
            out = chain({IMAGE_KEY: image[:, 0] if flat else image})[IMAGE_KEY]
        except (RuntimeError, ValueError, TypeError, IndexError) as error:
            while error.__cause__ is not None:  # MONAI wraps the cause in "applying transform ..."
                error = error.__cause__
            raise TrainingDataError(f"{WHERE}: the {modality} transforms fail on its images ({error})") from None
        out = torch.as_tensor(out.as_tensor() if hasattr(out, "as_tensor") else out, dtype=torch.float32)
        out = out.unsqueeze(1) if flat else out
        if out.shape != image.shape:
            raise TrainingDataError(
                f"{WHERE}: the {modality} transforms changed an image's shape from {tuple(image.shape[1 + flat :])} "
                f"to {tuple(out.shape[1 + flat :])}; batches need the processor's size (leave spatial_size unset)"
            )
        return out.contiguous()


def image_seed(seed: int, epoch: int, batch: Sequence[str], position: int) -> int:
    """The random seed of the image at `position` of a batch of `batch` (study ids), a stable hash (not
    Python's salted `hash`) so that every process and every resumed run derive the same one."""
    text = "\x1f".join((str(seed), str(epoch), str(position), *batch))
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=4).digest(), "little")


def _monai_transforms():
    try:
        return importlib.import_module("monai.transforms")
    except ImportError:
        raise RecipeError(f'{WHERE} needs MONAI: pip install "medreco[monai]"') from None


def _build(monai_transforms: Any, spec: TransformSpec, where: str):
    cls = getattr(monai_transforms, spec.name, None) if spec.name.isidentifier() else None
    if not isinstance(cls, type):
        raise RecipeError(f"{where}.name: {spec.name!r} is not a transform of monai.transforms")
    if not issubclass(cls, monai_transforms.MapTransform):
        hint = f" (its dictionary form is {spec.name}d)" if hasattr(monai_transforms, f"{spec.name}d") else ""
        raise RecipeError(f"{where}.name: {spec.name} is not a dictionary transform{hint}")
    if "keys" in spec.args:
        raise RecipeError(f"{where}.args.keys: set by medreco (the image is the only key)")
    try:
        return cls(keys=[IMAGE_KEY], **spec.args)
    except (TypeError, ValueError) as error:
        raise RecipeError(f"{where}.args: {spec.name} refuses them ({error})") from None


__all__ = ["TrainTransforms", "image_seed"]
