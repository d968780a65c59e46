"""The reranker trains on the coarse model's own candidates."""

from __future__ import annotations

import torch
from transformers import AutoModel

from medreco.training import load_recipe
from medreco.training.reranker import RerankerTrainer


def test_reranker_trains_on_the_coarse_models_candidates(stage1_run, toy, tmp_path):
    _, stage1_out, _, _ = stage1_run
    config = load_recipe(
        "tiny",
        "reranker",
        [
            f"retrieval_model={stage1_out / 'final'}",
            f"data.mined_dir={toy}",
            f"run.output_dir={tmp_path}",
            "run.progress=false",
            "candidates_per_query=30",  # the coarse model is near perfect on the toy: take most of the gallery
            "optimization.epochs=6",
            "optimization.batch_size_2d=16",
        ],
    )
    torch.manual_seed(0)
    trainer = RerankerTrainer(config)
    pairs, _groups = trainer.build_pairs("train")
    assert {p.label for p in pairs} == {0.0, 1.0}

    def accuracy(model) -> float:
        batch = trainer.phase().collate(pairs)
        with torch.no_grad():
            probabilities = model.eval()(**{k: v for k, v in batch.items() if k != "labels"}).probabilities
        return ((probabilities > 0.5).float() == batch["labels"]).float().mean().item()

    before = accuracy(trainer.model)
    summary = trainer.train()["reranker"]
    assert summary["last_loss"] < summary["first_loss"]
    after = accuracy(trainer.model)
    assert after > before + 0.1 and after >= 0.8, (before, after)
    loaded = AutoModel.from_pretrained(tmp_path / "final")
    assert loaded.config.model_type == "medreco_reranker"
