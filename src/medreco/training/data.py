"""Training data: model-ready images and modality-homogeneous batches over the mined tables.

Images of one batch must share a shape (a 2D radiograph and a CT volume cannot be stacked) and one
expert of the MoE encoder, so every batch holds one modality; 2D and 3D batches have their own
sizes. The batch order is a pure function of (seed, epoch), so a resumed run sees exactly the
batches an uninterrupted run would have, and every process of a distributed run gets the same
number of batches with the same modality at each step."""

from __future__ import annotations

import logging
import math
import random
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..data.mining.mined import Study
from ..errors import TrainingDataError
from ..processing import MedReCoImageProcessor
from .augmentation import TrainTransforms, image_seed
from .config import DataConfig, RecipeError

logger = logging.getLogger(__name__)


class ImageStore:
    """Model-ready tensors `(1, D, H, W)` of studies, preprocessed once: kept in memory when
    `preload`, otherwise read through the processor (use its tensor cache for large archives).
    With `transforms`, training batches are augmented (`batch`); the stored tensors never are."""

    def __init__(
        self,
        processor: MedReCoImageProcessor,
        studies: dict[str, Study],
        preload: bool = True,
        progress: bool = True,
        transforms: TrainTransforms | None = None,
        seed: int = 0,
    ):
        self.processor = processor
        self.studies = studies
        self.transforms = transforms or None
        self.seed = seed
        self.epoch = 0  # of the phase being trained: part of every augmentation's seed
        self._memory: dict[str, torch.Tensor] = {}
        if preload:
            for study_id in tqdm(list(studies), desc="preprocessing images", disable=not progress, leave=False):
                self._memory[study_id] = self._load(study_id)

    def _load(self, study_id: str) -> torch.Tensor:
        study = self.studies[study_id]
        return self.processor.preprocess_one(study.image, study.modality).float()

    def __contains__(self, study_id: object) -> bool:
        return study_id in self.studies

    def __getitem__(self, study_id: str) -> torch.Tensor:
        if study_id in self._memory:
            return self._memory[study_id]
        return self._load(study_id)

    def check_transforms(self, study_ids: Sequence[str]) -> None:
        """Augment one study of each modality of `study_ids`, so that transforms that cannot apply
        (a shape they change, arguments that fail on the image) are refused before training."""
        if self.transforms is None:
            return
        first = {}
        for s in study_ids:
            first.setdefault(self.studies[s].modality, s)
        for study_id in first.values():
            self.batch([study_id])

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def batch(self, study_ids: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """pixel_values `(B, 1, D, H, W)` and modality_ids `(B,)` of studies of one shape, augmented
        by the store's transforms (seeded by the run's seed, the epoch and the batch)."""
        tensors = [self[s] for s in study_ids]
        if self.transforms is not None:
            tensors = [
                self.transforms(tensor, self.studies[s].modality, image_seed(self.seed, self.epoch, study_ids, i))
                for i, (s, tensor) in enumerate(zip(study_ids, tensors))
            ]
        ids = [self.processor.modality_id(self.studies[s].modality) for s in study_ids]
        return torch.stack(tensors), torch.tensor(ids, dtype=torch.long)


def is_volumetric(modality: str, processor: MedReCoImageProcessor) -> bool:
    return processor.recipe(modality).size[0] > 1


def train_transforms(data: DataConfig, processor: MedReCoImageProcessor, modalities: Sequence[str]):
    """The recipe's `train_transforms` for these modalities, or None when it has none."""
    if not data.train_transforms:
        return None
    dims = {m: 3 if is_volumetric(m, processor) else 2 for m in modalities}
    return TrainTransforms(data.train_transforms, dims)


def refuse_train_transforms(data: DataConfig, stage: str) -> None:
    """Augmentation trains the vision encoder (stage 1). The reranker learns from the frozen encoder's
    features and stage 2 reads its images through TRL's collator with the tower frozen: neither
    applies `train_transforms`, so a recipe setting them there is refused rather than ignored."""
    if data.train_transforms:
        raise RecipeError(f"{stage}.data.train_transforms: only stage 1 augments its images (stage1.data)")


def frozen_retrieval_encoder(retrieval_model: str, data: DataConfig):
    """The trained retrieval model a later stage reads frozen (the reranker, the progression model),
    with the recipe's per-modality image settings (`data.recipes`) laid over its processor's."""
    from ..inference.encoder import RetrievalEncoder

    encoder = RetrievalEncoder.from_pretrained(retrieval_model, tensor_cache_dir=data.tensor_cache_dir)
    for name, values in (data.recipes or {}).items():
        encoder.image_processor.recipes[name] = {**encoder.image_processor.recipes[name], **values}
    return encoder


class ModalityBatchSampler:
    """Yields lists of item indices, each of one modality, for one process of a (possibly
    distributed) run. An optimiser step's micro-batches (`num_replicas` x `accumulation`: the
    global batch) share a modality, so all processes use the same expert at each step, and the
    global batches are the same however they are split over processes and accumulation (2 ranks x
    batch 4 see what 1 process x batch 4 x accumulation 2 sees); leftovers are dropped."""

    def __init__(
        self,
        modalities: Sequence[str],
        batch_size_for: Callable[[str], int],
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        drop_last: bool = False,
        accumulation: int = 1,
    ):
        self.modalities = list(modalities)
        self.batch_size_for = batch_size_for
        self.seed = seed
        self.num_replicas = num_replicas
        self.rank = rank
        self.drop_last = drop_last
        self.accumulation = max(1, int(accumulation))
        self.epoch = 0
        self.start = 0  # batches of the current epoch to skip (resume)

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        self.epoch, self.start = epoch, start

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """This rank's batches of an epoch, a pure function of (seed, epoch)."""
        rng = random.Random(self.seed * 1_000_003 + epoch)
        groups: dict[str, list[int]] = defaultdict(list)
        for index, modality in enumerate(self.modalities):
            groups[modality].append(index)
        steps = []
        for modality in sorted(groups):
            indices = groups[modality]
            rng.shuffle(indices)
            size = self.batch_size_for(modality)
            batches = [indices[i : i + size] for i in range(0, len(indices), size)]
            per_step = self.num_replicas * self.accumulation
            if batches and (self.drop_last or per_step > 1) and len(batches[-1]) < size:
                batches.pop()
            steps += [batches[i : i + per_step] for i in range(0, len(batches) - per_step + 1, per_step)]
        rng.shuffle(steps)
        return [batch for step in steps for batch in step[self.rank :: self.num_replicas]]

    def __iter__(self) -> Iterator[list[int]]:
        yield from self.epoch_batches(self.epoch)[self.start :]

    def __len__(self) -> int:
        return len(self.epoch_batches(self.epoch)) - self.start

    def steps_per_epoch(self) -> int:
        return len(self.epoch_batches(0))


def batch_size_rule(processor: MedReCoImageProcessor, size_2d: int, size_3d: int) -> Callable[[str], int]:
    """The batch size of a modality: `size_3d` for volumes, `size_2d` for projection images."""
    return lambda modality: size_3d if is_volumetric(modality, processor) else size_2d


def check_nonempty(items: Sequence, what: str, where: str | Path) -> None:
    if not items:
        raise TrainingDataError(f"{where}: no {what} to train on (check the split, modalities and mining thresholds)")


def ceil_div(a: float, b: float) -> int:
    return math.ceil(a / b)


__all__ = [
    "ImageStore",
    "ModalityBatchSampler",
    "batch_size_rule",
    "check_nonempty",
    "is_volumetric",
    "refuse_train_transforms",
    "train_transforms",
]
