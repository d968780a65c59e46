"""Checkpoints: resuming gives the same weights as training straight through; a kill during a save
never corrupts the latest checkpoint."""

import random

import numpy as np
import pytest
import torch

import medreco
from medreco.training import CheckpointManager, TrainingState
from medreco.training.checkpoint import CheckpointError


def make_run(seed: int = 0):
    torch.manual_seed(seed)
    model = medreco.create_model("vlm", "tiny")  # tied embeddings, frozen parts: the awkward case
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    return model, optimizer, scheduler


def train(model, optimizer, scheduler, steps: int, state: TrainingState) -> TrainingState:
    for _ in range(steps):
        # randomness from every generator the run uses: data order (python), augmentation (numpy), dropout (torch)
        length = 8 + random.randint(0, 4) + int(np.random.randint(0, 3))
        ids = torch.randint(4, 128, (2, length))
        loss = model(input_ids=ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        state.step += 1
        state.step_in_epoch += 1
    return state


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def test_resume_gives_the_same_weights_as_a_straight_run(tmp_path):
    model, optimizer, scheduler = make_run()
    seed_everything(1)
    train(model, optimizer, scheduler, 6, TrainingState())
    straight = {k: v.clone() for k, v in model.state_dict().items()}

    model, optimizer, scheduler = make_run()
    seed_everything(1)
    state = train(model, optimizer, scheduler, 3, TrainingState())
    manager = CheckpointManager(tmp_path)
    manager.save(model, optimizer, scheduler, state)
    del model, optimizer, scheduler  # "kill"

    model, optimizer, scheduler = make_run(seed=99)  # a fresh process starts from other weights and RNG
    seed_everything(123)
    state = manager.load(model, optimizer, scheduler)
    assert state.step == 3 and scheduler.last_epoch == 3
    train(model, optimizer, scheduler, 3, state)
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, straight[name], msg=name)


def test_a_kill_during_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    model, optimizer, scheduler = make_run()
    manager = CheckpointManager(tmp_path, keep=2)
    first = manager.save(model, optimizer, scheduler, TrainingState(step=1))
    train(model, optimizer, scheduler, 1, TrainingState())

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("killed while writing")

    monkeypatch.setattr("medreco.training.checkpoint.torch.save", crash)
    with pytest.raises(KeyboardInterrupt):
        manager.save(model, optimizer, scheduler, TrainingState(step=2))
    monkeypatch.undo()
    assert manager.latest() == first
    fresh = make_run(seed=5)
    assert manager.load(*fresh).step == 1
    for step in (3, 4, 5):
        manager.save(model, optimizer, scheduler, TrainingState(step=step))
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-000000004", "step-000000005"]


def test_unreadable_or_missing_checkpoints(tmp_path):
    model, optimizer, scheduler = make_run()
    with pytest.raises(CheckpointError, match="no checkpoint"):
        CheckpointManager(tmp_path).load(model, optimizer, scheduler)
    path = CheckpointManager(tmp_path).save(model, optimizer, scheduler, TrainingState(step=7))
    (path / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="unreadable checkpoint"):
        CheckpointManager(tmp_path).load(model, optimizer, scheduler)
