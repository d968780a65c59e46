"""Shared settings of the training tests: recipes over the toy mined folder (see toy_mined.py)."""

from __future__ import annotations

import json
from pathlib import Path

from medreco.training import Stage1Config, Stage2Config, load_recipe
from medreco.training.stage1 import Stage1Trainer
from toy_mined import RECIPES

HERE = Path(__file__).parent
ROOT = HERE.parent


def stage1_config(mined: Path, out: Path, *extra: str) -> Stage1Config:
    return load_recipe("tiny", "stage1", stage1_overrides(mined, out, *extra))


def stage1_overrides(mined: Path, out: Path, *extra: str) -> list[str]:
    return [
        f"data.mined_dir={mined}",
        f"data.recipes={json.dumps(RECIPES)}",
        f"run.output_dir={out}",
        "run.progress=false",
        "run.report_to=[tensorboard]",
        "alignment.epochs=1",
        "alignment.batch_size_2d=12",
        "ranking.epochs=8",
        "ranking.batch_size_2d=12",
        *extra,
    ]


def pair_auc(encoder_model, trainer: Stage1Trainer, split: str = "train") -> float:
    """Share of (relevant, irrelevant) gallery pairs the entity-conditioned score orders correctly."""
    from medreco.data.reports.ontology import entity_prompts
    from medreco.inference import RetrievalEncoder

    encoder = RetrievalEncoder(encoder_model, trainer.tokenizer, trainer.image_processor)
    data = trainer.data
    ids = data.study_ids(split)
    (block,) = encoder.encode_images([None] * len(ids), ["chest_xray"] * len(ids), ids, tensors=trainer.store)
    index = {s: i for i, s in enumerate(block.study_ids)}
    prompts, correct, total = entity_prompts(), 0, 0
    for row in data.rows("retrieval", split):
        features, _ = encoder.condition(block.tokens, block.modality_ids, prompts[row["entity_id"]])
        scores = features @ features[index[row["query"]]]
        relevant = [scores[index[s]] for s in row["relevant"]]
        irrelevant = [scores[index[s]] for s in row["gallery"] if s not in row["relevant"]]
        for r in relevant:
            for i in irrelevant:
                correct += float(r > i)
                total += 1
    return correct / total


def stage2_config(toy: Path, vision: Path, out: Path, *extra: str) -> Stage2Config:
    return load_recipe(
        "tiny",
        "stage2",
        [
            f"data.mined_dir={toy}",
            f"vision_model={vision}",
            f"run.output_dir={out}",
            "run.progress=false",
            "run.report_to=[]",
            "run.log_every=1",
            "optimization.batch_size_2d=4",
            "data.max_train_samples=24",
            *extra,
        ],
    )
