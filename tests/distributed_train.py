"""Every training stage in one launch, run under torchrun by tests/training/test_distributed.py:
stage 1 (alignment then ranking), the reranker on stage 1's model, stage 2 with and without LoRA.

    python -m torch.distributed.run --nproc_per_node 2 distributed_train.py MINED OUT [options]

Options: --deepspeed NAME_OR_JSON, --accumulation N (gradient accumulation of every stage),
--stages stage1,reranker,stage2,stage2_lora, --resume, --save-every N (checkpoints of stage 1 and
stage 2), --kill-after-save K (stage 2: SIGKILL the first rank once step K's checkpoint is written).
Dropout is switched off, so that a run's weights depend only on its global batches, not on how
they are split over processes. Each rank
writes OUT/<stage>/ranks/rank<R>.json (a digest of its whole trained model); the first rank
writes OUT/<stage>/initial.safetensors (the weights before training)."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).parent))
from medreco.training import load_recipe
from medreco.training.reranker import RerankerTrainer
from medreco.training.stage1 import Stage1Trainer
from medreco.training.stage2 import Stage2Trainer
from toy_mined import RECIPES

STEPS = 2  # optimiser steps of stage 1's alignment and of the reranker
RANKING_STEPS = 4  # optimiser steps of stage 1's ranking phase and of stage 2
BATCH = 4


def rank() -> int:
    return torch.distributed.get_rank() if torch.distributed.is_initialized() else 0


def record(model: torch.nn.Module, folder: Path) -> None:
    """This rank's view of the whole trained model: a digest of every tensor and a few values."""
    digest = hashlib.sha256()
    state = model.state_dict()
    for name, tensor in sorted(state.items()):
        digest.update(name.encode())
        digest.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"rank{rank()}.json").write_text(json.dumps({"digest": digest.hexdigest(), "tensors": len(state)}))


def switch_off_dropout(model: torch.nn.Module) -> None:
    """The pretrained text encoder's dropout (its config's, so that copies made from it agree)."""
    text_config = model.config.text_config
    text_config.hidden_dropout_prob = text_config.attention_probs_dropout_prob = 0.0
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0


def snapshot(model: torch.nn.Module, folder: Path) -> None:
    """The weights a stage starts from (the first rank's), to measure how far training moved them."""
    if rank() == 0:
        folder.mkdir(parents=True, exist_ok=True)
        weights = {k: v.detach().float().contiguous().clone() for k, v in model.state_dict().items()}
        save_file(_untie(weights), folder / "initial.safetensors")


def _untie(weights: dict) -> dict:
    seen, kept = set(), {}
    for name, tensor in weights.items():
        if tensor.data_ptr() not in seen:
            kept[name] = tensor
            seen.add(tensor.data_ptr())
    return kept


def common(out: Path, args: argparse.Namespace) -> list[str]:
    overrides = [f"run.output_dir={out}", "run.progress=false", "run.report_to=[]", f"run.resume={args.resume}"]
    if args.deepspeed:
        overrides.append(f"run.deepspeed_config={args.deepspeed}")
    return overrides


def stage1(args: argparse.Namespace) -> None:
    out = args.out / "stage1"
    phase = [f"batch_size_2d={BATCH}", f"gradient_accumulation_steps={args.accumulation}"]
    overrides = [
        f"data.mined_dir={args.mined}",
        f"data.recipes={json.dumps(RECIPES)}",
        f"run.save_every={args.save_every}",
        f"alignment.max_steps={STEPS}",
        f"ranking.max_steps={RANKING_STEPS}",
        *[f"alignment.{p}" for p in phase],
        *[f"ranking.{p}" for p in phase],
        *common(out, args),
    ]
    torch.manual_seed(0)
    trainer = Stage1Trainer(load_recipe("tiny", "stage1", overrides))
    switch_off_dropout(trainer.model)
    snapshot(trainer.model, out)
    trainer.train()
    record(trainer.model, out / "ranks")


def reranker(args: argparse.Namespace) -> None:
    out = args.out / "reranker"
    overrides = [
        f"retrieval_model={args.out / 'stage1' / 'final'}",
        f"data.mined_dir={args.mined}",
        f"optimization.max_steps={STEPS}",
        f"optimization.batch_size_2d={BATCH}",
        f"optimization.gradient_accumulation_steps={args.accumulation}",
        *common(out, args),
    ]
    torch.manual_seed(0)
    trainer = RerankerTrainer(load_recipe("tiny", "reranker", overrides))
    snapshot(trainer.model, out)
    trainer.train()
    record(trainer.model, out / "ranks")


def stage2(args: argparse.Namespace, lora: bool) -> None:
    out = args.out / ("stage2_lora" if lora else "stage2")
    overrides = [
        f"data.mined_dir={args.mined}",
        f"vision_model={args.out / 'stage1' / 'final'}",
        f"optimization.max_steps={RANKING_STEPS}",
        f"run.save_every={args.save_every}",
        f"optimization.batch_size_2d={BATCH}",
        f"optimization.gradient_accumulation_steps={args.accumulation}",
        "data.max_train_samples=32",
        "run.log_every=1",
        *(["lora.enabled=true", "lora.r=4", "lora.dropout=0", "lora.keep_adapter=true"] if lora else []),
        *common(out, args),
    ]
    trainer = Stage2Trainer(load_recipe("tiny", "stage2", overrides))
    if args.kill_after_save:
        build = trainer.trainer
        trainer.trainer = lambda stop_after=None: killed_after_save(build(stop_after), args.kill_after_save)
    snapshot(trainer.model, out)
    trainer.train()
    record(trainer.model, out / "ranks")


def killed_after_save(sft_trainer, step: int):
    """The SFTTrainer, with the first rank killed (SIGKILL) once the checkpoint of `step` is written."""
    from transformers import TrainerCallback

    class KillAfterSave(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            if state.global_step == step and rank() == 0:
                os.kill(os.getpid(), signal.SIGKILL)

    sft_trainer.add_callback(KillAfterSave())
    return sft_trainer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mined", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--deepspeed", default="")
    parser.add_argument("--accumulation", type=int, default=1)
    parser.add_argument("--stages", default="stage1,reranker,stage2,stage2_lora")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--save-every", type=int, default=0)
    parser.add_argument("--kill-after-save", type=int, default=0, help="stage 2: kill after this step's checkpoint")
    args = parser.parse_args()
    stages = args.stages.split(",")
    if "stage1" in stages:
        stage1(args)
    if "reranker" in stages:
        reranker(args)
    if "stage2" in stages:
        stage2(args, lora=False)
    if "stage2_lora" in stages:
        stage2(args, lora=True)


if __name__ == "__main__":
    main()
