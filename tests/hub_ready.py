"""Hub-ready folders of every family (the `hub_ready` fixture of conftest.py), for the tests of
tests/hub that load them where medreco is not installed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image
from transformers import AutoTokenizer

from conftest import tiny_model
from medreco.cli import main
from medreco.factory import bundled_text_encoder_path
from medreco.hub import export_for_remote_code
from medreco.processing import MedReCoImageProcessor, MedReCoRetrievalProcessor
from medreco.training import load_recipe
from medreco.training.stage2 import build_vlm
from toy_mined import RECIPES

FAMILIES = ("vision", "retrieval", "reranker", "vlm")


def write_hub_ready_folders(root: Path) -> dict[str, Path]:
    """A Hub-ready folder per family, each named as its card calls it: vision, retrieval and
    reranker through `export_for_remote_code`, the VLM through `save_pretrained` + `medreco export`."""
    image_processor = MedReCoImageProcessor(recipes=RECIPES)
    tokenizer = AutoTokenizer.from_pretrained(bundled_text_encoder_path())
    folders = {}
    for family in FAMILIES[:3]:
        processor = MedReCoRetrievalProcessor(image_processor, tokenizer) if family == "retrieval" else image_processor
        folders[family] = export_for_remote_code(tiny_model(family), root / f"medreco-{family}", processor)
    overrides = [f"data.recipes={json.dumps(RECIPES)}", "tokenizer=bundled:minilm", "vision_model=null"]
    model, processor = build_vlm(load_recipe("tiny", "stage2", [*overrides, f"run.output_dir={root / 'run'}"]))
    model.eval().save_pretrained(root / "saved-vlm")
    processor.save_pretrained(root / "saved-vlm")
    assert main(["export", str(root / "saved-vlm"), "--out", str(root / "medreco-vlm")]) == 0
    folders["vlm"] = root / "medreco-vlm"
    return folders


def write_png(path: Path, seed: int = 0, size: int = 48) -> Path:
    Image.fromarray((np.random.default_rng(seed).random((size, size)) * 255).astype("uint8")).save(path)
    return path
