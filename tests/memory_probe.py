"""Measure the peak memory of a few real optimiser steps of one training stage on the CPU in
float32, for tests/training/test_planner.py. Run in a fresh process:

    python tests/memory_probe.py '{"recipe": "tiny", "stage": "stage1/ranking", "steps": 3}'

prints one JSON line: the planner's heaviest batch it ran (modality, micro batch, tokens) and the
measured peaks in bytes.

Two measures. The one the test asserts on counts live tensor bytes: a dispatch mode
(`LiveTensors`) sees every tensor storage the steps create (activations, gradients, optimiser
states, temporaries) and drops it when the storage is freed; with the parameters as the baseline
its peak is what the planner estimates, and what a GPU's caching allocator must hold. It is
deterministic. torch 2.13 has no statistics for its CPU allocator (`torch.cpu` has no memory API);
torch's own `MemTracker` (torch.distributed._tools) does the same counting but fails on frozen
parameters (it hooks every parameter's gradient). The process's resident set is a poor stand-in:
glibc keeps freed blocks, library pages and thread arenas come and go; its peak growth (VmHWM,
reset through /proc/self/clear_refs, less the resident set before the model was built) is
reported beside, not asserted."""

from __future__ import annotations

import json
import sys
import time
import weakref
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakIdKeyDictionary


class LiveTensors(TorchDispatchMode):
    """Bytes of the CPU tensor storages alive: those of `tensors` (the weights), plus every storage
    created under the mode until it is freed; and their peak since `mark()`."""

    def __init__(self, tensors: list[torch.Tensor]):
        super().__init__()
        self._seen = WeakIdKeyDictionary()
        for tensor in tensors:  # in-place updates return the weights: never count them twice
            self._seen[tensor.untyped_storage()] = tensor.untyped_storage().nbytes()
        self.live = self.peak = sum(self._seen.values())

    def _free(self, size: int) -> None:
        self.live -= size

    def mark(self) -> int:
        self.peak = self.live
        return self.live

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in tree_leaves(out):
            if isinstance(tensor, torch.Tensor) and tensor.device.type == "cpu":
                storage = tensor.untyped_storage()
                if storage not in self._seen:
                    size = storage.nbytes()
                    self._seen[storage] = size
                    self.live += size
                    weakref.finalize(storage, self._free, size)
        self.peak = max(self.peak, self.live)
        return out


def resident(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def ranking_batch(model, case, text_length: int) -> dict:
    from medreco.modeling import CandidateBatch, TextBatch

    config = model.config
    batch, shape = case.micro_batch, (1, *case.size)
    modality = config.vision_config.modality_id(case.modality)
    if not config.freeze_text_encoder:
        vocabulary = config.text_config.vocab_size
        entities = TextBatch(
            torch.randint(1, vocabulary, (batch, text_length)), torch.ones(batch, text_length, dtype=torch.long)
        )
    else:
        entities = TextBatch(pooled=torch.randn(batch, config.text_config.hidden_size))
    return {
        "pixel_values": torch.randn(batch, *shape),
        "modality_ids": torch.full((batch,), modality),
        "entities": entities,
        "candidates": CandidateBatch(torch.randn(2 * batch, *shape), torch.full((2 * batch,), modality)),
    }


def vlm_batch(model, case, text_tokens: int) -> dict:
    config = model.config
    batch, shape = case.micro_batch, (1, *case.size)
    per_image = case.grid_tokens + int(config.entity_tokens)
    image = torch.full((batch, per_image), config.image_token_id)
    text = torch.randint(1, config.text_config.vocab_size, (batch, text_tokens))
    half = text_tokens // 2
    input_ids = torch.cat([image, text[:, :half], image, text[:, half:]], dim=1)
    modality = config.vision_config.modality_id(case.modality)
    inputs = {
        "input_ids": input_ids,
        "attention_mask": torch.ones_like(input_ids),
        "labels": input_ids.clone(),
        "pixel_values": torch.randn(2 * batch, *shape),
        "modality_ids": torch.full((2 * batch,), modality),
    }
    if config.entity_tokens:
        inputs["entity_ids"] = torch.full((2 * batch,), -1)
    return inputs


def measure(spec: dict) -> dict:
    from medreco.training.planner import ENTITY_PROMPT_TOKENS, build_stage_model, plan_stage

    torch.manual_seed(0)
    stage, text_tokens = spec["stage"], spec.get("text_tokens", 64)
    planned = plan_stage(spec["recipe"], stage, text_tokens)
    case = planned.case
    before = resident("VmRSS")
    model = build_stage_model(planned.spec).float().train()
    if planned.spec.optimization.gradient_checkpointing:
        model.activation_checkpointing_enable()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    if stage == "stage1/ranking":
        make = lambda: ranking_batch(model, case, ENTITY_PROMPT_TOKENS)  # noqa: E731
    elif stage == "stage2":
        make = lambda: vlm_batch(model, case, text_tokens)  # noqa: E731
    else:
        raise ValueError(f"the probe runs stage1/ranking and stage2, not {stage}")
    tracker = LiveTensors([*model.parameters(), *model.buffers()])
    weights = sum(p.untyped_storage().nbytes() for p in model.parameters())
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    step_peaks, backward_peaks = [], []
    started = time.perf_counter()
    with tracker:
        tracker.mark()
        for _ in range(spec.get("steps", 3)):
            start = tracker.mark()  # weights and optimiser states; no gradients (set to None)
            loss = model(**make()).loss
            loss.backward()
            backward_peaks.append(tracker.peak - start)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            step_peaks.append(tracker.peak)
            optimizer.zero_grad(set_to_none=True)
    return {
        "modality": case.modality,
        "micro_batch": case.micro_batch,
        "sequence_length": planned.sequence_length,
        "weights": weights,
        # the whole steps' peak: weights, gradients, optimiser states, activations, temporaries
        "peak": max(step_peaks),
        # forward and backward alone: activations, gradients and temporaries above weights and states
        "backward_peak": max(backward_peaks),
        "rss_peak_growth": resident("VmHWM") - before,
        "seconds": round(time.perf_counter() - started, 2),
    }


if __name__ == "__main__":
    torch.set_num_threads(1)
    print(json.dumps(measure(json.loads(sys.argv[1]))))
