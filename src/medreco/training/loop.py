"""The training loop shared by stage 1 (alignment and ranking phases) and the reranker.

One phase = a model, a batch sampler, a collate function and a loss function. The loop runs it
under Accelerate (one CPU process, DDP over gloo or NCCL, DeepSpeed ZeRO-1/2/3 from a JSON config
or a launcher config, FSDP2 from a launcher config; see `distributed.py` for sharded models):
AdamW with linear warm-up and cosine decay, gradient accumulation and clipping, bf16 autocast where
the hardware has it, resumable checkpoints, TensorBoard (and Weights & Biases when installed)
logging, a progress bar, and a `history.jsonl` of every logged value."""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import multiprocessing
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import send_to_device
from tqdm.auto import tqdm

from ..atomic import commit_folder, remove_stale_temporaries, save_folder_atomically
from .checkpoint import CheckpointManager, TrainingState
from .config import OptimizationConfig, RunConfig
from .data import ModalityBatchSampler
from .distributed import (
    check_deepspeed_launch,
    complete_optimizer_state,
    deepspeed_requested,
    fsdp_requested,
    parameter_share,
    strategy_name,
    use_fsdp_on_cpu,
    whole_model,
)
from .launch import deepspeed_config_path

logger = logging.getLogger(__name__)


def cpu_supports_bf16() -> bool:
    """True when the CPU has native bf16 instructions (AVX512-BF16 or AMX), where autocast pays off."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_mixed_precision(setting: str) -> str:
    """ "auto" becomes "bf16" on GPUs and CPUs with bf16 support, else "no"."""
    if setting != "auto":
        if setting == "fp16" and not torch.cuda.is_available():
            raise ValueError("fp16 mixed precision needs a GPU; use bf16 or no on a CPU")
        return setting
    if torch.cuda.is_available():
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return "bf16" if cpu_supports_bf16() else "no"


def available_trackers(report_to: Sequence[str]) -> list[str]:
    """The requested trackers whose packages are installed (wandb is optional; tensorboard is a dependency)."""
    modules = {"tensorboard": "tensorboard", "wandb": "wandb"}
    trackers = []
    for name in report_to:
        if importlib.util.find_spec(modules.get(name, name)) is not None:
            trackers.append(name)
        elif name != "wandb":
            logger.warning("tracker %r requested but its package is not installed; skipped", name)
    return trackers


def make_accelerator(run: RunConfig, optimization: OptimizationConfig, project_dir: str | Path):
    """An Accelerator for this machine: CPU/gloo without CUDA, DeepSpeed when a JSON config is given
    (or the launcher asks for it), FSDP2 when the launcher asks for it (on CPU ranks too)."""
    from accelerate import Accelerator, DeepSpeedPlugin
    from accelerate.state import AcceleratorState
    from accelerate.utils import DistributedDataParallelKwargs, InitProcessGroupKwargs

    AcceleratorState._reset_state()  # each phase sets its own precision/plugins; the process group stays

    on_cpu = not torch.cuda.is_available()
    handlers = [DistributedDataParallelKwargs(find_unused_parameters=True)]  # experts of other modalities idle
    if on_cpu and int(os.environ.get("WORLD_SIZE", "1")) > 1:  # torchrun on CPUs: gloo
        handlers.append(InitProcessGroupKwargs(backend="gloo", timeout=timedelta(minutes=30)))
    plugin = None
    check_deepspeed_launch(run.deepspeed_config)
    if run.deepspeed_config:
        plugin = DeepSpeedPlugin(hf_ds_config=str(deepspeed_config_path(run.deepspeed_config)))
    elif deepspeed_requested():  # `accelerate launch` with a DeepSpeed config: its JSON from the environment
        plugin = DeepSpeedPlugin()
    accelerator = Accelerator(
        cpu=on_cpu and plugin is None,  # DeepSpeed's own launcher path; it runs on the CPU when there is no GPU
        mixed_precision=resolve_mixed_precision(optimization.mixed_precision),
        gradient_accumulation_steps=optimization.gradient_accumulation_steps,
        log_with=available_trackers(run.report_to) or None,
        project_dir=str(project_dir),
        kwargs_handlers=handlers,
        deepspeed_plugin=plugin,
        step_scheduler_with_optimizer=False,  # our schedule counts this process's optimiser steps
    )
    if on_cpu and plugin is None and fsdp_requested():
        use_fsdp_on_cpu(accelerator)
    return accelerator


def parameter_groups(model: torch.nn.Module, weight_decay: float, learning_rates: dict[str, float] | None = None):
    """AdamW groups: no decay on biases and norms; optional learning rate per name substring."""
    groups: dict[tuple[float | None, bool], list] = {}
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        decay = parameter.ndim >= 2 and "norm" not in name.lower()
        rate = next((lr for key, lr in (learning_rates or {}).items() if key in name), None)
        groups.setdefault((rate, decay), []).append(parameter)
    result = []
    for (rate, decay), parameters in groups.items():
        group = {"params": parameters, "weight_decay": weight_decay if decay else 0.0}
        if rate is not None:
            group["lr"] = rate
        result.append(group)
    return result


@dataclass
class Phase:
    """What one training phase needs besides the model and settings."""

    name: str
    items: Sequence[Any]
    modalities: Sequence[str]  # one per item, for modality-homogeneous batches
    batch_size_for: Callable[[str], int]
    collate: Callable[[list[Any]], dict[str, torch.Tensor]]
    loss: Callable[[torch.nn.Module, dict[str, torch.Tensor]], torch.Tensor]
    # told each epoch before its batches are collated (e.g. an ImageStore's augmentation seeds)
    set_epoch: Callable[[int], None] | None = None


class _Items(torch.utils.data.Dataset):
    """A phase's items as a map-style dataset, for a DataLoader driven by the phase's batch sampler."""

    def __init__(self, items: Sequence[Any]):
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> Any:
        return self.items[index]


def phase_batches(phase: Phase, sampler: ModalityBatchSampler, workers: int, device: torch.device) -> Iterable[dict]:
    """The collated batches of the sampler's (current) epoch: in this process with `workers` 0, else
    by a DataLoader with that many worker processes (forked, so a phase's collate closure needs no
    pickling; prefetching two batches each, in pinned memory for a GPU). Same batches, in the same
    order, either way; the collate functions draw no random numbers from a process's random state
    (augmentations are seeded by the batch, `ImageStore.batch`)."""
    if workers <= 0:
        return (phase.collate([phase.items[i] for i in indices]) for indices in sampler)
    if "fork" not in multiprocessing.get_all_start_methods():
        logger.warning("loader_workers=%d needs the fork start method, which this platform lacks", workers)
        return phase_batches(phase, sampler, 0, device)
    return torch.utils.data.DataLoader(
        _Items(phase.items),
        batch_sampler=sampler,
        collate_fn=phase.collate,
        num_workers=workers,
        pin_memory=device.type == "cuda",
        multiprocessing_context="fork",
    )


def total_steps(optimization: OptimizationConfig, steps_per_epoch: int) -> int:
    if optimization.max_steps:
        return int(optimization.max_steps)
    return max(1, math.ceil(optimization.epochs * steps_per_epoch / optimization.gradient_accumulation_steps))


def train_phase(
    model: torch.nn.Module,
    phase: Phase,
    optimization: OptimizationConfig,
    run: RunConfig,
    output_dir: str | Path,
    learning_rates: dict[str, float] | None = None,
    stop_after: int | None = None,
) -> PhaseResult:
    """Train `model` in place for one phase; resumes from `output_dir/checkpoints` when allowed.
    `stop_after` ends the run early after that many optimiser steps (as a kill would; for tests).
    Returns the summary (first and last logged losses, wall time) and what saving needs."""
    prepared = _prepare_phase(model, phase, optimization, run, Path(output_dir), learning_rates)
    accelerator, state = prepared.accelerator, prepared.resume(run, phase.name)
    if state.extra.get("completed"):
        summary = {**state.extra.get("summary", {}), "resumed_completed": True}
        return PhaseResult(summary, prepared.model, accelerator)
    if accelerator.is_main_process:
        prepared.output_dir.mkdir(parents=True, exist_ok=True)
    accelerator.init_trackers(phase.name.replace("/", "_"), config=_flat_hparams(optimization))
    losses = _LossLog(phase.name, run, accelerator, prepared.output_dir / "history.jsonl", prepared.steps, state.step)
    started, steps = time.perf_counter(), prepared.steps
    prepared.model.train()
    while state.step < steps:
        prepared.sampler.set_epoch(state.epoch, state.step_in_epoch)
        if phase.set_epoch is not None:
            phase.set_epoch(state.epoch)
        for batch in phase_batches(phase, prepared.sampler, run.loader_workers, accelerator.device):
            batch = send_to_device(batch, accelerator.device)
            losses.add(prepared.micro_step(phase, optimization, batch, state.step))
            state.step_in_epoch += 1
            if not accelerator.sync_gradients:
                continue
            prepared.scheduler.step()
            state.step += 1
            losses.optimiser_step(state, prepared.scheduler.get_last_lr()[0], log=_logs_at(state.step, steps, run))
            if run.save_every and state.step % run.save_every == 0 and state.step < steps:
                prepared.save(state)
            if state.step >= steps or (stop_after is not None and state.step >= stop_after):
                break
        else:
            state.epoch, state.step_in_epoch = state.epoch + 1, 0
            continue
        if stop_after is not None and state.step >= stop_after and state.step < steps:
            prepared.save(state)
            losses.close()
            _finish_trackers(accelerator)
            summary = {"phase": phase.name, "steps": state.step, "stopped_early": True}
            return PhaseResult(summary, prepared.model, accelerator)
    losses.close()
    summary = {
        "phase": phase.name,
        "steps": state.step,
        "first_loss": losses.first,
        "last_loss": losses.last,
        "seconds": round(time.perf_counter() - started, 2),
        "processes": accelerator.num_processes,
        "strategy": strategy_name(accelerator),
        "parameter_share": prepared.parameter_share,
        "mixed_precision": accelerator.mixed_precision,
    }
    state.extra = {"completed": True, "summary": summary}
    prepared.save(state)
    _finish_trackers(accelerator)
    return PhaseResult(summary, prepared.model, accelerator)


def _logs_at(step: int, steps: int, run: RunConfig) -> bool:
    return step % max(1, run.log_every) == 0 or step == steps or step == 1


@dataclass
class _PreparedPhase:
    """One phase's prepared training objects (the model and optimiser wrapped by the accelerator)."""

    accelerator: Any
    model: torch.nn.Module
    optimizer: Any
    scheduler: Any
    sampler: ModalityBatchSampler
    steps: int
    checkpoints: CheckpointManager
    output_dir: Path
    engine_state: str | None
    parameter_share: float

    def micro_step(self, phase: Phase, optimization: OptimizationConfig, batch, step: int) -> float:
        """Forward and backward of one micro-batch; the optimiser steps when the accumulation is full."""
        accelerator, model = self.accelerator, self.model
        with accelerator.accumulate(model), accelerator.autocast():
            loss = phase.loss(model, batch)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"{phase.name}: loss is {loss.item()} at step {step}")
            accelerator.backward(loss)
            uses_deepspeed = accelerator.state.deepspeed_plugin is not None  # DeepSpeed clips itself
            if accelerator.sync_gradients and optimization.max_grad_norm and not uses_deepspeed:
                accelerator.clip_grad_norm_(model.parameters(), optimization.max_grad_norm)
            self.optimizer.step()
            self.optimizer.zero_grad()
        return loss.detach().float().item()

    def save(self, state: TrainingState) -> None:
        _save(
            self.accelerator,
            self.model,
            self.optimizer,
            self.scheduler,
            self.checkpoints,
            self.output_dir,
            state,
            self.engine_state,
        )

    def resume(self, run: RunConfig, name: str) -> TrainingState:
        """The saved training state when the run may resume and a checkpoint exists, else a fresh one."""
        engine_state, output_dir = self.engine_state, self.output_dir
        saved = self.checkpoints.latest() is not None or (engine_state and _engine_latest(output_dir, engine_state))
        if not (run.resume and saved):
            return TrainingState()
        state = _resume(
            self.accelerator, self.model, self.optimizer, self.scheduler, self.checkpoints, output_dir, engine_state
        )
        logger.info("%s: resumed at step %d (epoch %d, batch %d)", name, state.step, state.epoch, state.step_in_epoch)
        return state


def _prepare_phase(
    model: torch.nn.Module,
    phase: Phase,
    optimization: OptimizationConfig,
    run: RunConfig,
    output_dir: Path,
    learning_rates: dict[str, float] | None,
) -> _PreparedPhase:
    """The accelerator, batch sampler, optimiser and cosine schedule of a phase, prepared."""
    from transformers import get_cosine_schedule_with_warmup

    accelerator = make_accelerator(run, optimization, output_dir)
    sampler = ModalityBatchSampler(
        phase.modalities,
        phase.batch_size_for,
        seed=run.seed,
        num_replicas=accelerator.num_processes,
        rank=accelerator.process_index,
        accumulation=optimization.gradient_accumulation_steps,
    )
    steps_per_epoch = sampler.steps_per_epoch()
    if steps_per_epoch == 0:
        raise ValueError(f"{phase.name}: not one full batch per process; lower the batch sizes or add data")
    steps = total_steps(optimization, steps_per_epoch)
    if optimization.gradient_checkpointing and hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable()  # transformers 5's name; gradient_checkpointing_enable goes in v6
    optimizer = torch.optim.AdamW(
        parameter_groups(model, optimization.weight_decay, learning_rates), lr=optimization.learning_rate
    )
    scheduler = get_cosine_schedule_with_warmup(optimizer, int(optimization.warmup_ratio * steps), steps)
    if accelerator.state.deepspeed_plugin is not None:
        _fill_deepspeed_auto_values(accelerator, model, phase, optimization)
    engine_state = _engine_state_kind(accelerator)
    model, optimizer = accelerator.prepare(model, optimizer)
    checkpoints = CheckpointManager(output_dir / "checkpoints", keep=run.keep_checkpoints)
    return _PreparedPhase(
        accelerator, model, optimizer, scheduler, sampler, steps, checkpoints, output_dir, engine_state,
        parameter_share(model),
    )  # fmt: skip


class _LossLog:
    """The running loss of a phase: averaged over the micro-batches between log points, written to
    the trackers, `history.jsonl` (main process) and the progress bar."""

    def __init__(self, name: str, run: RunConfig, accelerator, history: Path, steps: int, initial: int):
        self.name, self.accelerator, self.history = name, accelerator, history
        self.progress = tqdm(
            total=steps, initial=initial, desc=name, disable=not run.progress or not accelerator.is_main_process
        )
        self.first: float | None = None
        self.last: float | None = None
        self.running: list[float] = []

    def add(self, loss: float) -> None:
        self.running.append(loss)

    def optimiser_step(self, state: TrainingState, learning_rate: float, log: bool) -> None:
        self.progress.update(1)
        if not log:
            return
        value = sum(self.running) / len(self.running)
        self.first = value if self.first is None else self.first
        self.last = value
        record = {"step": state.step, "loss": value, "lr": learning_rate, "epoch": state.epoch}
        self.accelerator.log({f"{self.name}/loss": value, f"{self.name}/lr": learning_rate}, step=state.step)
        self.progress.set_postfix(loss=f"{value:.4f}")
        if self.accelerator.is_main_process:
            with self.history.open("a") as handle:
                handle.write(json.dumps({"phase": self.name, **record}) + "\n")
        self.running = []

    def close(self) -> None:
        self.progress.close()


@dataclass
class PhaseResult:
    """A finished phase: its summary, the (possibly wrapped) model and its accelerator."""

    summary: dict
    wrapped_model: torch.nn.Module
    accelerator: Any
    _whole: torch.nn.Module | None = None

    @property
    def model(self) -> torch.nn.Module:
        """The plain, whole model on every rank: unwrapped from DDP, or gathered from DeepSpeed's or
        FSDP's partitions into a fresh copy (collective the first time: every rank must ask)."""
        if self._whole is None:
            self._whole = whole_model(self.accelerator, self.wrapped_model)
        return self._whole

    @property
    def is_main_process(self) -> bool:
        return self.accelerator.is_main_process

    def save_pretrained(self, directory: str | Path, extra_files: Callable[[Path], None] | None = None) -> Path:
        """`save_pretrained` of the whole model (gathered from every rank under DeepSpeed/FSDP) from
        the main process, written atomically; `extra_files(folder)` adds e.g. the processor before
        the folder is renamed into place. Every rank must call it."""
        directory = Path(directory)
        model = self.model
        if self.accelerator.is_main_process:
            save_folder_atomically(directory, lambda folder: _save_with_extras(model, folder, extra_files))
        self.accelerator.wait_for_everyone()
        return directory


def _save_with_extras(model, folder: Path, extra_files) -> None:
    model.save_pretrained(folder)
    if extra_files is not None:
        extra_files(folder)


def write_run_record(folder: Path, config, summaries: dict, family: str) -> None:
    """What every final folder holds beside the weights: the recipe it was trained with
    (`training_config.json`), the phases' summaries (`summary.json`) and a Hub model card
    (`README.md`) built from them and the folder (its processor's recipes, the recipe's base models)."""
    from ..hub import model_card, write_model_card
    from .config import to_dict

    (folder / "training_config.json").write_text(json.dumps(to_dict(config), indent=2))
    (folder / "summary.json").write_text(json.dumps(summaries, indent=2))
    write_model_card(model_card(family, phase_summaries(summaries), folder=folder), folder)


def phase_summaries(summary: dict) -> dict:
    """phase name -> summary, from a `summary.json` that holds one phase (with its `phase` key) or several."""
    return {summary["phase"]: summary} if "phase" in summary else summary


def _finish_trackers(accelerator) -> None:
    # not accelerator.end_training(): it also destroys the process group that later phases and the save need
    for tracker in accelerator.trackers:
        tracker.finish()


def _engine_state_kind(accelerator) -> str | None:
    """ "deepspeed" or "fsdp" when the optimiser state (or the model) is sharded over ranks and
    checkpoints are the engine's own, per-rank format; None for our single-file checkpoints."""
    strategy = strategy_name(accelerator)
    if strategy.startswith("zero"):
        return "deepspeed"
    return "fsdp" if strategy == "fsdp2" else None


def _save(accelerator, model, optimizer, scheduler, checkpoints, output_dir, state, engine_state) -> None:
    if engine_state:  # ZeRO / FSDP shard state over ranks: the engine's own (sharded) format
        # every rank writes its shards beside the checkpoint; the main process swaps the folder in whole
        folder = output_dir / f"{engine_state}_checkpoint"
        temporary = folder.with_name(f".{folder.name}.tmp")
        if accelerator.is_main_process:
            remove_stale_temporaries(output_dir)
        if engine_state == "fsdp":
            complete_optimizer_state(optimizer)
        accelerator.wait_for_everyone()
        accelerator.save_state(str(temporary))
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            (temporary / "scheduler.json").write_text(json.dumps(scheduler.state_dict()))
            (temporary / "medreco_state.json").write_text(json.dumps(vars(state)))
            commit_folder(temporary, folder)
    elif accelerator.is_main_process:
        checkpoints.save(accelerator.unwrap_model(model), optimizer, scheduler, state)
    accelerator.wait_for_everyone()


def _engine_latest(output_dir: Path, engine_state: str) -> bool:
    return (output_dir / f"{engine_state}_checkpoint" / "medreco_state.json").exists()


def _resume(accelerator, model, optimizer, scheduler, checkpoints, output_dir, engine_state) -> TrainingState:
    if engine_state:
        folder = output_dir / f"{engine_state}_checkpoint"
        accelerator.load_state(str(folder))
        scheduler.load_state_dict(json.loads((folder / "scheduler.json").read_text()))
        return TrainingState(**json.loads((folder / "medreco_state.json").read_text()))
    return checkpoints.load(accelerator.unwrap_model(model), optimizer, scheduler)


def _fill_deepspeed_auto_values(accelerator, model, phase: Phase, optimization: OptimizationConfig) -> None:
    """Fill the JSON's "auto" values Accelerate cannot infer for our models: the micro batch size
    (ours varies by modality, so the largest) and the bucket sizes (from the hidden size)."""
    config = accelerator.state.deepspeed_plugin.deepspeed_config
    model_config = getattr(model, "config", None)
    hidden = getattr(getattr(model_config, "vision_config", None), "hidden_size", None) or getattr(
        model_config, "hidden_size", 512
    )
    zero = config.get("zero_optimization", {})
    # at least the largest parameter: none takes DeepSpeed's extra-large-parameter path, which fails
    # when that parameter has no gradient in a step (another modality's expert, an unused embedding)
    largest = max((p.numel() for p in model.parameters() if p.requires_grad), default=0)
    for key, value in (
        ("reduce_bucket_size", max(hidden * hidden, largest)),
        ("stage3_prefetch_bucket_size", int(0.9 * hidden * hidden)),
        ("stage3_param_persistence_threshold", 10 * hidden),
    ):
        if zero.get(key) == "auto":
            zero[key] = value
    micro = max(phase.batch_size_for(m) for m in set(phase.modalities))
    if config.get("train_micro_batch_size_per_gpu") in (None, "auto"):
        config["train_micro_batch_size_per_gpu"] = micro
    if config.get("train_batch_size") in (None, "auto"):
        config["train_batch_size"] = micro * optimization.gradient_accumulation_steps * accelerator.num_processes
    if config.get("gradient_clipping") == "auto":
        config["gradient_clipping"] = optimization.max_grad_norm


def _flat_hparams(optimization: OptimizationConfig) -> dict:
    return {k: v for k, v in vars(optimization).items() if isinstance(v, (int, float, str, bool))}


__all__ = [
    "Phase",
    "PhaseResult",
    "available_trackers",
    "cpu_supports_bf16",
    "make_accelerator",
    "parameter_groups",
    "phase_batches",
    "resolve_mixed_precision",
    "total_steps",
    "train_phase",
]
