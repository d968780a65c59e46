"""Checkpoints that resume a run exactly and survive being killed mid-save.

A checkpoint holds the model weights (safetensors), the optimiser and scheduler states, the
sampler position (epoch, step within it) and every RNG state (Python, NumPy, torch CPU and CUDA).
It is written into a temporary folder, flushed and swapped into place; the `latest` pointer is
replaced atomically afterwards (the commit point). A kill at any moment leaves the previous
checkpoint intact and pointed to, and the next save removes what the killed one left aside."""

from __future__ import annotations

import json
import logging
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from ..atomic import atomic_folder, remove_atomically, remove_stale_temporaries, write_text_atomically
from ..errors import MedReCoError

logger = logging.getLogger(__name__)


class CheckpointError(MedReCoError, RuntimeError):
    """A checkpoint that cannot be read, named with its folder."""


@dataclass
class TrainingState:
    """Where a run is: global step, epoch, and the position inside the epoch's sample order."""

    step: int = 0
    epoch: int = 0
    step_in_epoch: int = 0
    extra: dict = field(default_factory=dict)


def rng_state() -> dict:
    """Every RNG state as tensors and plain Python values (loadable with `weights_only=True`)."""
    version, internal, gauss = random.getstate()
    kind, keys, position, has_gauss, cached = np.random.get_state()
    state = {
        "python": [version, list(internal), gauss],
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, cached],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, position, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), position, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class CheckpointManager:
    """Save and restore training runs under `directory` (`step-000123/` folders, `latest` pointer)."""

    def __init__(self, directory: str | Path, keep: int = 2):
        self.directory = Path(directory)
        self.keep = keep

    def latest(self) -> Path | None:
        pointer = self.directory / "latest"
        if not pointer.exists():
            return None
        target = self.directory / pointer.read_text().strip()
        return target if target.exists() else None

    def save(self, model: torch.nn.Module, optimizer, scheduler, state: TrainingState) -> Path:
        """Write a checkpoint folder, swap it in whole, then point `latest` at it (the commit point)
        and prune the oldest; what an earlier killed save left aside is removed first."""
        self.directory.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(self.directory)
        name = f"step-{state.step:09d}"
        with atomic_folder(self.directory / name) as temporary:
            temporary.mkdir()
            weights = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
            save_file(_untie(weights), temporary / "model.safetensors", metadata={"format": "pt"})
            # optimiser, scheduler and RNG states hold only tensors and plain values: no pickle needed to read them
            torch.save(
                {
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict() if scheduler else None,
                    "rng": rng_state(),
                },
                temporary / "training_state.pt",
            )
            (temporary / "state.json").write_text(json.dumps(asdict(state), indent=2))
        final = self.directory / name
        write_text_atomically(self.directory / "latest", name)
        self._prune(final)
        logger.info("checkpoint saved: %s", final)
        return final

    def load(self, model: torch.nn.Module, optimizer, scheduler, path: str | Path | None = None) -> TrainingState:
        """Restore everything from `path` (default: the latest checkpoint); returns the run's state."""
        path = Path(path) if path is not None else self.latest()
        if path is None:
            raise CheckpointError(f"{self.directory}: no checkpoint to resume from")
        # finish what a save killed after its commit point left undone
        remove_stale_temporaries(self.directory)
        self._prune(path)
        try:
            weights = load_file(path / "model.safetensors")
            missing, unexpected = model.load_state_dict(weights, strict=False)
            missing = [k for k in missing if k not in tied_weight_names(model)]
            if missing or unexpected:
                raise CheckpointError(
                    f"{path}: weights do not match the model (missing {missing[:5]}, unexpected {unexpected[:5]})"
                )
            states = torch.load(path / "training_state.pt", weights_only=True)
            optimizer.load_state_dict(states["optimizer"])
            if scheduler is not None and states["scheduler"] is not None:
                scheduler.load_state_dict(states["scheduler"])
            set_rng_state(states["rng"])
            return TrainingState(**json.loads((path / "state.json").read_text()))
        except (OSError, KeyError, ValueError, RuntimeError, SafetensorError) as error:
            if isinstance(error, CheckpointError):
                raise
            raise CheckpointError(
                f"{path}: unreadable checkpoint, or one written by a different recipe "
                f"({error.__class__.__name__}: {error}); use a new run.output_dir or run.resume=false"
            ) from error

    def _prune(self, current: Path) -> None:
        checkpoints = sorted(p for p in self.directory.glob("step-*") if p.is_dir())
        for old in checkpoints[: max(0, len(checkpoints) - self.keep)]:
            if old != current:
                remove_atomically(old)


def _untie(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """safetensors refuses tensors sharing memory (tied embeddings): keep one copy each."""
    seen: dict[int, str] = {}
    result = {}
    for name, tensor in weights.items():
        pointer = tensor.data_ptr()
        if pointer in seen and tensor.numel():
            continue
        seen[pointer] = name
        result[name] = tensor
    return result


def tied_weight_names(model: torch.nn.Module) -> set[str]:
    """Names of the weights that share memory with one named before them (tied embeddings): a
    checkpoint may hold each tied weight once."""
    names, seen = set(), {}
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() in seen and tensor.numel():
            names.add(name)
        seen.setdefault(tensor.data_ptr(), name)
    return names


__all__ = ["CheckpointError", "CheckpointManager", "TrainingState", "rng_state", "set_rng_state", "tied_weight_names"]
