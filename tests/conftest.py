"""Shared tiny models and inputs. Tiny presets run the same code as the paper-size models."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never touch the network
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import pytest
import torch

import medreco

if os.environ.get("PYTEST_XDIST_WORKER"):  # the workers share the cores: one thread each, no oversubscription
    threads = max(1, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    os.environ["OMP_NUM_THREADS"] = str(threads)  # for the processes tests start, too
    torch.set_num_threads(threads)

TINY_IMAGE = 40  # tiny preset: 40x40 in-plane, patch 10 -> 16 tokens per image


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` are skipped, with the reason, where torch sees no CUDA GPU."""
    if torch.cuda.is_available():
        return
    reason = f"needs a CUDA GPU (torch {torch.__version__} sees none)"
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def tiny_model(family: str, **overrides):
    return medreco.create_model(family, "tiny", **overrides).eval()


def images_2d(batch: int, size: int = TINY_IMAGE) -> torch.Tensor:
    return torch.rand(batch, 1, 1, size, size)


def example_inputs(model) -> dict[str, torch.Tensor]:
    """Valid inputs for any model family, for round-trip comparisons."""
    generator = torch.Generator().manual_seed(1)
    config = model.config
    if config.model_type == "medreco_vision":
        return {"pixel_values": torch.rand(2, 1, 4, 40, 40, generator=generator), "modality_ids": torch.tensor([1, 3])}
    if config.model_type == "medreco":
        return {
            "pixel_values": torch.rand(2, 1, 1, 40, 40, generator=generator),
            "modality_ids": torch.tensor([0, 4]),
            "input_ids": torch.randint(0, 1000, (2, 6), generator=generator),
        }
    if config.model_type == "medreco_reranker":
        k, d = config.top_k, config.hidden_size
        return {
            "query_tokens": torch.randn(3, k, d, generator=generator),
            "query_features": torch.randn(3, d, generator=generator),
            "candidate_tokens": torch.randn(3, k, d, generator=generator),
            "candidate_features": torch.randn(3, d, generator=generator),
            "modality_ids": torch.tensor([0, 1, 2]),
        }
    if config.model_type == "medreco_vlm":
        n = config.image_seq_length
        image = config.image_token_id
        ids = [1, 2, *[image] * n, 5, *[image] * n, 6, 7]
        return {
            "input_ids": torch.tensor([ids]),
            "pixel_values": torch.rand(2, 1, 1, 40, 40, generator=generator),
            "modality_ids": torch.tensor([0, 0]),
        }
    raise ValueError(config.model_type)


def main_output(model, outputs) -> torch.Tensor:
    """The tensor that characterises a model's forward result."""
    for name in ("logits", "image_embeds", "last_hidden_state"):
        value = getattr(outputs, name, None)
        if value is not None:
            return value
    raise AssertionError("no main output")


@pytest.fixture(scope="session")
def toy(tmp_path_factory):
    """The toy mined folder (toy_mined.py), written once for every test that trains on it."""
    from toy_mined import write_toy_mined

    return write_toy_mined(tmp_path_factory.mktemp("toy"))


@pytest.fixture(scope="session")
def stage1_run(toy, tmp_path_factory):
    """A tiny stage-1 model trained once on the toy: (trainer, output folder, summaries, pair AUC before)."""
    from medreco.training.stage1 import Stage1Trainer
    from toy_training import pair_auc, stage1_config

    out = tmp_path_factory.mktemp("stage1")
    torch.manual_seed(0)
    trainer = Stage1Trainer(stage1_config(toy, out))
    before = pair_auc(trainer.model, trainer)
    summaries = trainer.train()
    return trainer, out, summaries, before


@pytest.fixture(scope="session")
def hub_ready(tmp_path_factory):
    """family -> a Hub-ready folder of a tiny model with its processor (hub_ready.py)."""
    from hub_ready import write_hub_ready_folders

    return write_hub_ready_folders(tmp_path_factory.mktemp("exported"))
