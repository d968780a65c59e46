"""Training data: the mined tables, model-ready images, and modality-homogeneous batches.

Images of one batch must share a shape (a 2D radiograph and a CT volume cannot be stacked) and one
expert of the MoE encoder, so every batch holds one modality; 2D and 3D batches have their own
sizes. The batch order is a pure function of (seed, epoch), so a resumed run sees exactly the
batches an uninterrupted run would have, and every process of a distributed run gets the same
number of batches with the same modality at each step."""

from __future__ import annotations

import json
import logging
import math
import os
import random
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..errors import MedReCoError
from ..processing import MedReCoImageProcessor

logger = logging.getLogger(__name__)
MINED_TABLES = ("studies", "triplets", "retrieval", "longitudinal", "vqa")


class TrainingDataError(MedReCoError, ValueError):
    """Missing or unusable training data; names the folder or file."""


@dataclass
class Study:
    study_id: str
    patient_id: str
    modality: str
    image: str
    split: str
    report: str = ""
    statements: dict = field(default_factory=dict)

    def status(self, entity_id: str) -> str | None:
        statement = self.statements.get(entity_id)
        return statement["status"] if statement else None


class MinedData:
    """The datasets written by `medreco mine`, read once into plain Python rows."""

    def __init__(self, mined_dir: str | Path, modalities: Sequence[str] | None = None):
        import datasets

        self.directory = Path(mined_dir)
        if not str(mined_dir) or not (self.directory / "studies").is_dir():
            raise TrainingDataError(
                f"{self.directory}: no mined data here (expected {self.directory / 'studies'}; run `medreco mine`)"
            )
        self._tables: dict[str, list[dict]] = {}
        for name in MINED_TABLES:
            path = self.directory / name
            self._tables[name] = datasets.load_from_disk(str(path)).to_list() if path.is_dir() else []
        keep = set(modalities) if modalities else None
        self.studies: dict[str, Study] = {}
        for row in self._tables["studies"]:
            if keep is not None and row["modality"] not in keep:
                continue
            image = self._image_path(row["image"])
            if not image.exists():
                raise TrainingDataError(f"{image}: image of study {row['study_id']} not found (moved cohort?)")
            self.studies[row["study_id"]] = Study(
                row["study_id"],
                row["patient_id"],
                row["modality"],
                str(image),
                row["split"],
                row.get("report") or "",
                json.loads(row["statements"]) if row.get("statements") else {},
            )

    def _image_path(self, stored: str) -> Path:
        """A study's image: `mine` stores paths relative to the mined folder. Tables mined by
        earlier versions hold paths relative to the working directory of the time, tried second."""
        image = Path(stored)
        if image.is_absolute():
            return image
        beside = Path(os.path.normpath(self.directory.resolve() / image))
        return beside if beside.exists() or not image.exists() else image

    def rows(self, table: str, split: str | None = None) -> list[dict]:
        """Rows of a table whose studies are all known (and of `split` when given)."""
        keys = {"triplets": ("anchor", "positive", "negative"), "retrieval": ("query",), "vqa": ("study_a", "study_b")}
        keys.update(longitudinal=("prior", "current"), studies=("study_id",))
        return [
            row
            for row in self._tables[table]
            if (split is None or row["split"] == split) and all(row[k] in self.studies for k in keys[table])
        ]

    def study_ids(self, split: str | None = None) -> list[str]:
        return [s for s, study in self.studies.items() if split is None or study.split == split]

    def relevance_table(self, split: str | None = None) -> dict[tuple[str, str], tuple[set[str], set[str]]]:
        """(query, entity_id) -> (judged, relevant) from the retrieval table, for training labels.

        `judged` holds the relevant studies and those the mining thresholds call irrelevant. The rest
        of the gallery is unknown, not irrelevant: a report silent on the entity ("no effusion" and
        an effusion never mentioned look the same), or statements in between the thresholds ("heart
        size is normal" against "no cardiomegaly"). Calling those negatives would teach the model
        that identical images differ. Tables mined before the `irrelevant` column existed fall back
        to the studies that mention the entity."""
        rows = self.rows("retrieval", split)
        mentioning = None if all("irrelevant" in row for row in rows) else self.mentioning(split)
        table = {}
        for row in rows:
            relevant = set(row["relevant"])
            if mentioning is None:
                judged = relevant | set(row["irrelevant"])
            else:
                judged = set(row["gallery"]) & mentioning[row["entity_id"]]
            table[(row["query"], row["entity_id"])] = (judged, relevant)
        return table

    def mentioning(self, split: str | None = None) -> dict[str, set[str]]:
        """entity_id -> the studies whose reports state something about it (queries and relevant
        studies of the retrieval table)."""
        mentioning: dict[str, set[str]] = {}
        for row in self.rows("retrieval", split):
            mentioning.setdefault(row["entity_id"], set()).update([row["query"], *row["relevant"]])
        return mentioning


class ImageStore:
    """Model-ready tensors `(1, D, H, W)` of studies, preprocessed once: kept in memory when
    `preload`, otherwise read through the processor (use its tensor cache for large archives)."""

    def __init__(
        self,
        processor: MedReCoImageProcessor,
        studies: dict[str, Study],
        preload: bool = True,
        progress: bool = True,
    ):
        self.processor = processor
        self.studies = studies
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

    def batch(self, study_ids: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """pixel_values `(B, 1, D, H, W)` and modality_ids `(B,)` of studies of one shape."""
        tensors = [self[s] for s in study_ids]
        ids = [self.processor.modality_id(self.studies[s].modality) for s in study_ids]
        return torch.stack(tensors), torch.tensor(ids, dtype=torch.long)


def is_volumetric(modality: str, processor: MedReCoImageProcessor) -> bool:
    return processor.recipe(modality).size[0] > 1


class ModalityBatchSampler:
    """Yields lists of item indices, each of one modality, for one process of a (possibly
    distributed) run. Consecutive groups of `num_replicas` batches share a modality, so all
    processes use the same expert at each step; leftovers that would unbalance ranks are dropped."""

    def __init__(
        self,
        modalities: Sequence[str],
        batch_size_for: Callable[[str], int],
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        drop_last: bool = False,
    ):
        self.modalities = list(modalities)
        self.batch_size_for = batch_size_for
        self.seed = seed
        self.num_replicas = num_replicas
        self.rank = rank
        self.drop_last = drop_last
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
            if batches and (self.drop_last or self.num_replicas > 1) and len(batches[-1]) < size:
                batches.pop()
            per_step = self.num_replicas
            steps += [batches[i : i + per_step] for i in range(0, len(batches) - per_step + 1, per_step)]
        rng.shuffle(steps)
        return [step[self.rank] for step in steps]

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
    "MinedData",
    "ModalityBatchSampler",
    "Study",
    "TrainingDataError",
    "batch_size_rule",
    "check_nonempty",
    "is_volumetric",
]
