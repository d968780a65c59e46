"""Retrieval evaluation of a trained model, with a CLIP-style baseline."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from medreco.data.mining import MinedData


def test_retrieval_evaluation_of_the_trained_model(stage1_run, toy):
    import medreco
    from medreco.evaluation import evaluate_retrieval
    from medreco.inference import RerankerScorer, RetrievalEncoder

    _, out, _, _ = stage1_run
    encoder = RetrievalEncoder.from_pretrained(out / "final")
    reranker = RerankerScorer(medreco.create_model("reranker", "tiny"))
    report = evaluate_retrieval(encoder, MinedData(toy), "test", reranker=reranker, rerank_top=5, progress=False)
    overall = report["summary"]["all"]["all"]
    assert overall["queries"] == len(report["queries"]) > 0
    assert {"entity", "entity+rerank", "holistic"} <= set(overall)
    assert overall["entity"]["recall@1"] >= 0.9  # the toy's findings are learnable
    for query in report["queries"]:
        ranked = query["systems"]["entity+rerank"]["top"]
        assert len(ranked) == len(set(ranked)) and query["query"] not in ranked


def test_a_clip_style_model_is_an_extra_retrieval_baseline(stage1_run, toy, tmp_path, capsys):
    """`medreco evaluate --clip-model`: a (tiny, random) transformers CLIP model ranks each query's
    gallery by cosine similarity of its image features, next to entity and holistic."""
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

    from medreco.cli import main
    from medreco.evaluation import ClipBaseline

    layers = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
    config = CLIPConfig(
        text_config={**layers, "vocab_size": 100, "eos_token_id": 2},
        vision_config={**layers, "image_size": 32, "patch_size": 8},
        projection_dim=8,
    )
    torch.manual_seed(0)
    CLIPModel(config).save_pretrained(tmp_path / "clip")
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(
        tmp_path / "clip"
    )
    data = MinedData(toy)
    clip = ClipBaseline(str(tmp_path / "clip"), data.studies)
    query, *gallery = sorted(data.studies)[:5]
    scores = clip(query, gallery)
    pictures = [ClipBaseline.picture(data.studies[s].image) for s in (query, *gallery)]
    assert all(p.dtype == np.uint8 and p.ndim == 3 and p.shape[-1] == 3 and p.max() > p.min() for p in pictures)
    with torch.no_grad():
        features = clip.model.get_image_features(**clip.image_processor(images=pictures, return_tensors="pt"))
    features = torch.nn.functional.normalize(features.pooler_output, dim=-1)
    torch.testing.assert_close(torch.tensor(scores), features[1:] @ features[0], rtol=1e-4, atol=1e-5)

    _, out, _, _ = stage1_run
    report = tmp_path / "eval.json"
    argv = ["evaluate", "--model", str(out / "final"), "--mined", str(toy), "--out", str(report), "--quiet"]
    assert main([*argv, "--clip-model", str(tmp_path / "clip")]) == 0
    assert "clip:clip R@1/3/5" in capsys.readouterr().out
    summary = json.loads(report.read_text())["summary"]["all"]["all"]
    assert 0.0 <= summary["clip:clip"]["recall@1"] <= 1.0
    assert "entity vs clip:clip" in summary["mcnemar_recall@1"]
    from medreco.factory import bundled_text_encoder_path

    with pytest.raises(ValueError, match="not a CLIP-style model"):
        ClipBaseline(str(bundled_text_encoder_path()), data.studies)  # a text encoder
