"""How a training run is distributed, and whole models out of sharded ones.

Under DDP and ZeRO-1/2 every rank holds the whole model; under ZeRO-3 and FSDP2 each holds a
shard, so saving, merging a LoRA adapter or starting the next phase from a phase's weights first
gathers the full state dict (every parameter all-gathered; on the main process only for a save,
on every rank for a next phase) and loads it into a fresh, unsharded copy of the model.

FSDP2 on CPU ranks: Accelerate enables FSDP only on GPUs (on CPUs it silently falls back to DDP),
while PyTorch's `fully_shard` runs over gloo. Without a GPU, `make_accelerator` switches the
Accelerator to FSDP itself (`use_fsdp_on_cpu`) so that the sharded code paths (wrapping, sharded
checkpoints, gathered saves) run in CPU-only CI exactly as on a cluster; on GPUs nothing changes."""

from __future__ import annotations

import contextlib
import logging
import os

import torch

from ..errors import LaunchConfigError
from .checkpoint import tied_weight_names

logger = logging.getLogger(__name__)

STRATEGIES = ("single", "ddp", "zero1", "zero2", "zero3", "fsdp2")


def deepspeed_requested() -> bool:
    """True when the launcher asked for DeepSpeed (`accelerate launch` with a DeepSpeed config)."""
    return os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"


def fsdp_requested() -> bool:
    """True when the launcher asked for FSDP (`accelerate launch` with an FSDP config sets this)."""
    return os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"


def check_deepspeed_launch(deepspeed_config: str | None) -> None:
    """Refuse DeepSpeed (the recipe's `deepspeed_config`, or the launcher's) beside `ACCELERATE_USE_CPU`:
    that variable makes Accelerate start plain CPU processes (DDP) and ignore DeepSpeed, so stage 1
    would train unsharded without a word and stage 2 crash inside TRL. DeepSpeed runs on CPU ranks
    without it."""
    from accelerate.utils import parse_flag_from_env

    if (deepspeed_config or deepspeed_requested()) and parse_flag_from_env("ACCELERATE_USE_CPU"):
        raise LaunchConfigError(
            "ACCELERATE_USE_CPU=1 makes Accelerate run plain DDP and ignore DeepSpeed; unset it for a DeepSpeed "
            "run (`torchrun --nproc_per_node 2 -m medreco train ... --deepspeed zero3` runs on CPUs as it is)"
        )


def is_main_launch_process() -> bool:
    """True on the launcher's rank 0 (or without a launcher), before any Accelerator exists.
    (`PartialState()` cannot tell: on CPU ranks it reports every process as the main one.)"""
    return int(os.environ.get("RANK", "0")) == 0


def strategy_name(accelerator) -> str:
    """The strategy a prepared run uses: one of STRATEGIES."""
    from accelerate.utils import DistributedType

    kind = accelerator.distributed_type
    if kind == DistributedType.DEEPSPEED:
        return f"zero{accelerator.state.deepspeed_plugin.zero_stage}"
    if kind == DistributedType.FSDP:
        return "fsdp2"
    return "ddp" if accelerator.num_processes > 1 else "single"


def use_fsdp_on_cpu(accelerator) -> None:
    """Switch an Accelerator built on CPU ranks (DDP over gloo) to FSDP2, with the launcher's FSDP
    settings; see the module docstring. Only for runs without GPUs."""
    from accelerate import FullyShardedDataParallelPlugin
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType

    if torch.cuda.is_available():
        raise RuntimeError("use_fsdp_on_cpu is for machines without GPUs; Accelerate enables FSDP on GPUs itself")
    plugin = FullyShardedDataParallelPlugin()  # its settings from the launcher's environment
    if plugin.fsdp_version != 2:
        raise ValueError("FSDP on CPU ranks needs fsdp_version: 2 (FSDP2) in the launch config")
    accelerator.state.distributed_type = DistributedType.FSDP
    accelerator.state.fsdp_plugin = plugin
    # every later AcceleratorState() copies the process state over its own, as Accelerate does for GPUs
    PartialState._shared_state["distributed_type"] = DistributedType.FSDP
    logger.info("FSDP2 over gloo on CPU ranks (Accelerate enables FSDP on GPUs only)")


def parameter_share(model: torch.nn.Module) -> float:
    """The fraction of the model's parameter elements this rank holds: 1.0 under DDP and ZeRO-1/2,
    about 1/ranks once ZeRO-3 partitioned them (`ds_tensor`) or FSDP2 sharded them (DTensors). A run
    that silently fell back to whole copies reports 1.0, so the summaries and tests can tell."""
    from torch.distributed.tensor import DTensor

    held = total = 0
    for parameter in model.parameters():
        if hasattr(parameter, "ds_tensor"):  # ZeRO-3: the module keeps an empty placeholder
            held, total = held + parameter.ds_tensor.numel(), total + parameter.ds_numel
        elif isinstance(parameter, DTensor):
            held, total = held + parameter.to_local().numel(), total + parameter.numel()
        else:
            held, total = held + parameter.numel(), total + parameter.numel()
    return round(held / total, 4) if total else 1.0


def gathered_state_dict(accelerator, wrapped: torch.nn.Module, everywhere: bool = False) -> dict[str, torch.Tensor]:
    """The full state dict of a prepared model as CPU tensors: on the main process (every process
    when `everywhere`; the others get an empty dict). Under DeepSpeed the trained weights are the
    optimiser's fp32 master copies (the module may hold bf16 ones), gathered from every rank's
    partition. Collective under DeepSpeed and FSDP: every rank must call it."""
    module = accelerator.unwrap_model(wrapped)
    wanted = everywhere or accelerator.is_main_process
    strategy = strategy_name(accelerator)
    if strategy.startswith("zero"):
        return _deepspeed_state_dict(module, wanted)
    if strategy == "fsdp2":
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        # cpu_offload gathers onto rank 0 alone; without it every rank receives the full tensors
        options = StateDictOptions(full_state_dict=True, cpu_offload=not everywhere)
        state = get_model_state_dict(module, options=options)
        return {k: v.detach().cpu() for k, v in state.items()} if wanted else {}
    if not wanted:
        return {}
    return {k: v.detach().cpu() for k, v in module.state_dict().items()}


def _deepspeed_state_dict(module: torch.nn.Module, wanted: bool) -> dict[str, torch.Tensor]:
    import deepspeed
    from deepspeed.utils import safe_get_full_fp32_param

    parameters = dict(module.named_parameters(remove_duplicate=False))
    state = {}
    for name, tensor in module.state_dict().items():  # the same order on every rank: collectives match
        parameter = parameters.get(name)
        if parameter is None:  # a buffer: never partitioned
            value = tensor
        else:
            value = safe_get_full_fp32_param(parameter)  # trained weights; None for frozen ones
            if value is None and hasattr(parameter, "ds_id"):  # a frozen ZeRO-3 partition
                with deepspeed.zero.GatheredParameters([parameter], modifier_rank=None):
                    value = parameter.detach().cpu().clone()
            elif value is None:
                value = parameter
        if wanted:
            state[name] = value.detach().cpu().clone()
    return state


def release_engine(wrapped: torch.nn.Module) -> None:
    """Take a finished DeepSpeed engine's gradient hooks off the parameters (a next phase would
    otherwise run the old engine's reductions too) and stop transformers building models
    partitioned for it."""
    if hasattr(wrapped, "destroy"):
        wrapped.destroy()
    try:
        from transformers.integrations.deepspeed import unset_hf_deepspeed_config
    except ImportError:
        return
    unset_hf_deepspeed_config()


def whole_model(accelerator, wrapped: torch.nn.Module) -> torch.nn.Module:
    """The trained model as a plain, whole module on every rank: the unwrapped model itself under
    DDP; under DeepSpeed and FSDP a fresh copy loaded with the gathered weights (the original keeps
    the engine's partitions, hooks or DTensors and cannot be prepared again), the engine released."""
    module = accelerator.unwrap_model(wrapped)
    if strategy_name(accelerator) in ("single", "ddp"):
        return module
    state = gathered_state_dict(accelerator, wrapped, everywhere=True)
    release_engine(wrapped)
    return fresh_copy(module, state)


def fresh_copy(module: torch.nn.Module, state: dict[str, torch.Tensor] | None) -> torch.nn.Module:
    """A new instance of `module`'s class from its config, holding `state` (its own fresh weights
    when None), with the same trainable/frozen parameters and train/eval mode."""
    with _without_zero3_init():
        copy = _unsharded_class(module)(module.config)
    if state is None:
        return copy.train(module.training)
    trainable = {name for name, parameter in module.named_parameters() if parameter.requires_grad}
    load_whole_state(copy, state)
    for name, parameter in copy.named_parameters():
        parameter.requires_grad_(name in trainable)
    return copy.train(module.training)


@contextlib.contextmanager
def _without_zero3_init():
    """Build models whole: under ZeRO-3 transformers builds every `from_config` model (our text
    encoder and language model are built that way) partitioned, through `deepspeed.zero.Init`."""
    try:
        from transformers.integrations import deepspeed as hf_deepspeed
    except ImportError:
        yield
        return
    saved = getattr(hf_deepspeed, "_hf_deepspeed_config_weak_ref", None)
    hf_deepspeed._hf_deepspeed_config_weak_ref = None
    try:
        yield
    finally:
        hf_deepspeed._hf_deepspeed_config_weak_ref = saved


def load_whole_state(module: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load a gathered state dict, every weight accounted for (a tied weight may appear once)."""
    missing, unexpected = module.load_state_dict(state, strict=False)
    tied = tied_weight_names(module)
    missing = [name for name in missing if name not in tied]
    if missing or unexpected:
        raise RuntimeError(f"gathered weights do not fit the model: missing {missing[:5]}, unexpected {unexpected[:5]}")


def _unsharded_class(module: torch.nn.Module) -> type:
    """The model's own class: FSDP2 swaps a sharded module's class for `FSDP<Name>(FSDPModule, Name)`."""
    from torch.distributed.fsdp import FSDPModule

    cls = type(module)
    if isinstance(module, FSDPModule):
        cls = next(base for base in cls.__bases__ if not issubclass(base, FSDPModule))
    return cls


def complete_optimizer_state(optimizer) -> None:
    """Give every trainable parameter its optimiser state before a sharded (DCP) checkpoint: one that
    never had a gradient (another modality's expert) has none, while the fresh optimiser a resume
    loads into creates it for all, and the checkpoint reader refuses the missing keys. The state
    given is what AdamW creates on a parameter's first gradient (zero moments, step 0), so the run
    goes on as it would have."""
    inner = getattr(optimizer, "optimizer", optimizer)  # Accelerate's wrapper holds the torch optimiser
    parameters = [p for group in inner.param_groups for p in group["params"] if p.requires_grad]
    missing = [p for p in parameters if p not in inner.state]
    if not missing:
        return
    gradients = {p: p.grad for p in parameters}
    missing_ids = {id(p) for p in missing}
    for parameter in parameters:  # only the stateless ones step; the others keep their moments
        parameter.grad = torch.zeros_like(parameter) if id(parameter) in missing_ids else None
    rates = [group["lr"] for group in inner.param_groups]
    for group in inner.param_groups:
        group["lr"] = 0.0 * group["lr"]  # a zero of the same type (float or tensor)
    inner.step()
    for group, rate in zip(inner.param_groups, rates, strict=True):
        group["lr"] = rate
    for parameter in parameters:
        parameter.grad = gradients[parameter]
        if id(parameter) in missing_ids and "step" in inner.state[parameter]:
            inner.state[parameter]["step"].zero_()


__all__ = [
    "STRATEGIES",
    "complete_optimizer_state",
    "deepspeed_requested",
    "fresh_copy",
    "fsdp_requested",
    "gathered_state_dict",
    "is_main_launch_process",
    "load_whole_state",
    "release_engine",
    "strategy_name",
    "use_fsdp_on_cpu",
    "check_deepspeed_launch",
    "parameter_share",
    "whole_model",
]
