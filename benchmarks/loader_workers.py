"""Training with DataLoader workers (`run.loader_workers`) against collating in the training process.

The quick demo's cohort and mining, then stage 1's alignment phase (tiny model) with images read and
preprocessed from their files for every batch (no preload, no tensor cache: an archive too large to
hold in memory), timed for the same optimiser steps with 0 and with N workers in the same process;
the batches are the same (tests/training/test_training_data.py checks it). Prints seconds per step
and the speed-up. On a 2-core machine the workers and the training step share the cores.

    python benchmarks/loader_workers.py [--workers 2] [--steps 40]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch


def timed_steps(trainer, workers: int, steps: int) -> float:
    from medreco.training import ModalityBatchSampler
    from medreco.training.loop import phase_batches

    phase = trainer.alignment_phase()
    sampler = ModalityBatchSampler(phase.modalities, phase.batch_size_for, seed=0)
    model = trainer.model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    done, started = 0, None
    while done < steps:
        for batch in phase_batches(phase, sampler, workers, torch.device("cpu")):
            loss = phase.loss(model, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            done += 1
            if done == 2:  # the workers' start and the first batches are not the steady state
                started = time.perf_counter()
            if done >= steps:
                break
        sampler.set_epoch(sampler.epoch + 1)
    return (time.perf_counter() - started) / (steps - 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()

    from medreco.demo.pipeline import DemoConfig, prepare_data
    from medreco.training import load_recipe
    from medreco.training.stage1 import Stage1Trainer

    with tempfile.TemporaryDirectory() as folder:
        mined = prepare_data(DemoConfig(out_dir=str(Path(folder) / "demo"), quick=True, progress=False))
        overrides = [
            f"data.mined_dir={mined}",
            "data.preload_images=false",
            "data.tensor_cache_dir=null",
            f"run.output_dir={Path(folder) / 'run'}",
            "run.progress=false",
            "run.report_to=[]",
            "alignment.batch_size_2d=16",
            "alignment.batch_size_3d=2",
        ]
        trainer = Stage1Trainer(load_recipe("tiny", "stage1", overrides))
        seconds = {}
        for workers in (0, args.workers):
            torch.manual_seed(0)
            seconds[workers] = timed_steps(trainer, workers, args.steps)
    threads = torch.get_num_threads()
    print(f"stage-1 alignment, tiny model, images read per batch, {args.steps} steps, {threads} threads")
    for workers, value in seconds.items():
        print(f"  loader_workers={workers}: {value:.3f} s/step")
    print(f"  speed-up with {args.workers} workers: {seconds[0] / seconds[args.workers]:.2f}x")


if __name__ == "__main__":
    main()
