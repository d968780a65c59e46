"""Training: typed YAML recipes, the shared Accelerate loop, and the stages.

- `stage1`: retrieval model (alignment warm-up, then entity-conditioned ranking);
- `reranker`: the reranker over the coarse model's own top candidates;
- `progression`: BioViL-T's prior-image fusion and progression head on a frozen stage 1, with
  TILA's inversion-aware fine-tuning;
- `stage2`: the comparative VLM with TRL's SFTTrainer (optionally LoRA / QLoRA);
- `distributed`: DDP, DeepSpeed ZeRO and FSDP2 (gathered saves); `launch`: the packaged launch
  configs; `planner`: per-rank memory of each stage and strategy (`medreco plan`)."""

from ..data.mining import MinedData
from ..errors import TrainingDataError
from .checkpoint import CheckpointManager, TrainingState
from .config import (
    DataConfig,
    LoraSettings,
    ModelSource,
    OptimizationConfig,
    ProgressionTrainingConfig,
    RecipeError,
    RerankerTrainingConfig,
    RunConfig,
    Stage1Config,
    Stage2Config,
    load_recipe,
)
from .data import ImageStore, ModalityBatchSampler
from .launch import deepspeed_config_path, launch_config, write_launch_config
from .loop import Phase, PhaseResult, train_phase
from .planner import PlanRequest, format_plan, plan


def train_stage(stage: str, config) -> dict:
    """Run one stage from its config; returns the summaries of its phases."""
    if stage == "stage1":
        from .stage1 import train_stage1

        return train_stage1(config)
    if stage == "reranker":
        from .reranker import train_reranker

        return train_reranker(config)
    if stage == "progression":
        from .progression import train_progression

        return train_progression(config)
    if stage == "stage2":
        from .stage2 import train_stage2

        return train_stage2(config)
    raise RecipeError(f"unknown stage {stage!r}")


__all__ = [
    "CheckpointManager",
    "DataConfig",
    "ImageStore",
    "LoraSettings",
    "MinedData",
    "ModalityBatchSampler",
    "ModelSource",
    "OptimizationConfig",
    "Phase",
    "PhaseResult",
    "ProgressionTrainingConfig",
    "PlanRequest",
    "RecipeError",
    "RerankerTrainingConfig",
    "RunConfig",
    "Stage1Config",
    "Stage2Config",
    "TrainingDataError",
    "TrainingState",
    "deepspeed_config_path",
    "format_plan",
    "launch_config",
    "load_recipe",
    "plan",
    "train_phase",
    "train_stage",
    "write_launch_config",
]
