"""Training: checkpoints now; the stage-1, reranker and stage-2 recipes build on them."""

from .checkpoint import CheckpointManager, TrainingState

__all__ = ["CheckpointManager", "TrainingState"]
