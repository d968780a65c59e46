"""Stage 1: alignment and ranking learn, runs reproduce and resume, frozen text and statement alignment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoModel

from medreco.modeling import StatementBatch, TextBatch
from medreco.training import train_phase
from medreco.training.stage1 import Stage1Trainer
from toy_training import pair_auc, stage1_config, stage1_overrides


def test_stage1_lowers_both_losses_and_beats_its_untrained_self(stage1_run):
    trainer, out, summaries, before = stage1_run
    alignment, ranking = summaries["stage1/alignment"], summaries["stage1/ranking"]
    assert alignment["last_loss"] < alignment["first_loss"]
    assert ranking["last_loss"] < 0.5 * ranking["first_loss"]
    after = pair_auc(trainer.model, trainer)
    assert after >= 0.9 and after > before + 0.15, (before, after)
    history = [json.loads(line) for line in (out / "ranking" / "history.jsonl").read_text().splitlines()]
    assert history and {"step", "loss", "lr"} <= set(history[0])
    assert list((out / "ranking").glob("**/events.out.tfevents*")), "TensorBoard events were not written"


def test_stage1_final_folder_loads_with_the_auto_classes(stage1_run):
    from transformers import AutoImageProcessor, AutoTokenizer

    trainer, out, _, _ = stage1_run
    model = AutoModel.from_pretrained(out / "final")
    for name, tensor in trainer.model.state_dict().items():
        torch.testing.assert_close(model.state_dict()[name], tensor)
    assert AutoTokenizer.from_pretrained(out / "final")("pleural effusion")["input_ids"]
    assert AutoImageProcessor.from_pretrained(out / "final").recipes["chest_xray"]["size"] == [1, 40, 40]
    assert json.loads((out / "final" / "training_config.json").read_text())["triplet_margin"] == 0.2
    from huggingface_hub import ModelCard

    card = ModelCard.load(out / "final" / "README.md")  # `medreco train` writes the model card
    assert card.data.base_model == "sentence-transformers/all-MiniLM-L6-v2" and "medreco-retrieval" in card.data.tags
    assert "| stage1/ranking |" in card.text and card.data.eval_results is None


def test_a_seed_reproduces_a_stage1_run(toy, tmp_path):
    """`run.seed` fixes the model's initialisation as well as the batch order, whatever the process's
    random state was before, and in another process with another string-hash seed (set and dict
    order of strings must not reach training): one seed gives identical weights twice, another
    seed another model. Statement alignment is on, as in the demo."""
    weights = {}
    steps = (
        "alignment.max_steps=2",
        "ranking.max_steps=2",
        "freeze_text_encoder=true",
        "statement_alignment_weight=1.0",
    )
    for name, seed in (("first", 3), ("other", 4)):
        torch.manual_seed(len(weights))  # a different global state before each run
        Stage1Trainer(stage1_config(toy, tmp_path / name, f"run.seed={seed}", *steps)).train()
        weights[name] = load_file(tmp_path / name / "final" / "model.safetensors")
    overrides = stage1_overrides(toy, tmp_path / "again", "run.seed=3", *steps)
    command = [sys.executable, "-m", "medreco", "train", "stage1", "--config", "tiny"]
    command += [argument for override in overrides for argument in ("--set", override)]
    hash_seed = "1" if os.environ.get("PYTHONHASHSEED") != "1" else "2"
    result = subprocess.run(command, env={**os.environ, "PYTHONHASHSEED": hash_seed}, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    weights["again"] = load_file(tmp_path / "again" / "final" / "model.safetensors")
    assert weights["first"].keys() == weights["again"].keys()
    assert all(torch.equal(tensor, weights["again"][key]) for key, tensor in weights["first"].items())
    assert not all(torch.equal(tensor, weights["other"][key]) for key, tensor in weights["first"].items())


def test_gradient_checkpointing_in_a_recipe_checkpoints_the_model(toy, tmp_path):
    """`gradient_checkpointing: true` (the paper recipe's setting) reaches the model through
    transformers 5's `activation_checkpointing_enable`, not its deprecated alias."""
    steps = ("alignment.max_steps=1", "ranking.max_steps=1")
    checkpointing = ("alignment.gradient_checkpointing=true", "ranking.gradient_checkpointing=true")
    trainer = Stage1Trainer(stage1_config(toy, tmp_path, *steps, *checkpointing))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    assert trainer.model.is_activation_checkpointing
    assert not [w for w in caught if "gradient_checkpointing_enable" in str(w.message)]


def test_a_finished_run_is_not_trained_again(stage1_run, toy):
    _trainer, out, summaries, _ = stage1_run
    again = Stage1Trainer(stage1_config(toy, out)).train()
    assert (
        again["stage1/ranking"]["resumed_completed"]
        and again["stage1/ranking"]["steps"] == summaries["stage1/ranking"]["steps"]
    )


def test_resume_after_a_kill_gives_the_same_weights(toy, tmp_path):
    def run(out: Path, stop_after=None):
        torch.manual_seed(0)
        trainer = Stage1Trainer(stage1_config(toy, out, "alignment.epochs=0", "ranking.max_steps=6"))
        phase = trainer.ranking_phase()
        result = train_phase(
            trainer.model, phase, trainer.config.ranking, trainer.config.run, out, stop_after=stop_after
        )
        return result

    straight = run(tmp_path / "straight").model.state_dict()
    assert run(tmp_path / "resumed", stop_after=3).summary["stopped_early"]
    resumed = run(tmp_path / "resumed").model.state_dict()  # a new process would start exactly like this
    for name, tensor in straight.items():
        torch.testing.assert_close(resumed[name], tensor, msg=name)


def test_a_frozen_text_backbone_encodes_each_report_once_with_the_same_loss(toy, tmp_path):
    config = stage1_config(toy, tmp_path, "freeze_text_encoder=true", "alignment.max_steps=6", "ranking.max_steps=2")
    torch.manual_seed(0)
    trainer = Stage1Trainer(config)
    model = trainer.model
    backbone_before = {k: v.clone() for k, v in model.text_encoder.backbone.state_dict().items()}
    projection_before = model.text_encoder.projection.weight.clone()
    studies = sorted(trainer.data.study_ids("train"))[:8]
    pixels, modalities = trainer.store.batch(studies)
    text = trainer.tokenizer([trainer.data.studies[s].report for s in studies], padding=True, return_tensors="pt")
    pooled = trainer.texts.pooled_reports(studies)
    assert model.text_encoder.training  # computing the cache leaves the module's mode alone
    model.eval()
    with torch.no_grad():
        from_tokens = model(pixels, modalities, reports=TextBatch(text["input_ids"], text["attention_mask"]))
        from_cache = model(pixels, modalities, reports=TextBatch(pooled=torch.stack([pooled[s] for s in studies])))
    assert torch.allclose(from_tokens.loss, from_cache.loss, atol=1e-5)
    assert torch.allclose(from_tokens.text_embeds, from_cache.text_embeds, atol=1e-5)
    # ranking batches carry the entity prompts' pooled features, with the loss of their tokens
    ranking = trainer.ranking_phase()
    batch = ranking.collate(ranking.items[:6])
    assert batch["entities"].pooled is not None and batch["entities"].input_ids is None
    prompts = [trainer.prompts[row["entity_id"]] for row in ranking.items[:6]]
    tokens = trainer.tokenizer(prompts, padding=True, return_tensors="pt")
    tokenized = {**batch, "entities": TextBatch(tokens["input_ids"], tokens["attention_mask"])}
    with torch.no_grad():
        assert torch.allclose(model(**batch).loss, model(**tokenized).loss, atol=1e-5)

    summaries = trainer.train()
    assert summaries["stage1/alignment"]["steps"] == 6
    trained = trainer.model
    assert all(torch.equal(v, trained.text_encoder.backbone.state_dict()[k]) for k, v in backbone_before.items())
    assert not torch.equal(projection_before, trained.text_encoder.projection.weight)
    assert AutoModel.from_pretrained(tmp_path / "final").config.freeze_text_encoder


def test_statement_alignment_alone_teaches_entity_conditioned_retrieval(toy, tmp_path):
    config = stage1_config(
        toy,
        tmp_path,
        "freeze_text_encoder=true",
        "statement_alignment_weight=1.0",
        "alignment.max_steps=150",
        "ranking.epochs=0",
    )
    torch.manual_seed(0)
    trainer = Stage1Trainer(config)
    model = trainer.model
    alignment = trainer.alignment_phase()
    studies = alignment.items[:6]
    batch = alignment.collate(studies)
    # one pair per (study, entity) statement: two entities, each study's own statement group
    statements = batch["statements"]
    assert statements.pairs.shape == (12, 2) and statements.entities.pooled.shape[0] == 2
    keys = [(row, e) for row, s in enumerate(studies) for e in sorted(trainer.data.studies[s].statements)]
    entities = sorted({e for _, e in keys})
    # statements that say the same (entity and finding) share a group, and only those
    content = [
        (entities[e], trainer.data.studies[studies[row]].status(entities[e])) for e, row in statements.pairs.tolist()
    ]
    groups = statements.groups.tolist()
    for i in range(len(groups)):
        assert [g == groups[i] for g in groups] == [c == content[i] for c in content]
    # pooled features and tokens give the same loss
    texts = [" ".join(trainer.data.studies[studies[row]].statements[e]["sentences"]) for row, e in keys]
    tokenized = {
        **batch,
        "statements": StatementBatch(
            trainer.texts.text_batch([trainer.prompts[e] for e in entities]),
            trainer.texts.text_batch(texts),
            statements.pairs,
            statements.groups,
        ),
    }
    model.eval()
    with torch.no_grad():
        pooled_out, token_out = model(**batch), model(**tokenized)
    assert torch.allclose(pooled_out.statement_loss, token_out.statement_loss, atol=1e-5)
    before = pair_auc(model, trainer)
    trainer.train()
    after = pair_auc(trainer.model, trainer)
    assert after > max(0.8, before + 0.2)


def _study_auc(model, trainer: Stage1Trainer, agreement: dict) -> float:
    """Share of (agreeing, disagreeing) report pairs of the training split whose whole-image
    similarity orders them correctly."""
    from medreco.inference import RetrievalEncoder
    from medreco.training.stage1 import STUDY_IRRELEVANT, STUDY_RELEVANT

    encoder = RetrievalEncoder(model, trainer.tokenizer, trainer.image_processor)
    ids = trainer.data.study_ids("train")
    (block,) = encoder.encode_images([None] * len(ids), ["chest_xray"] * len(ids), ids, tensors=trainer.store)
    index = {s: i for i, s in enumerate(block.study_ids)}
    features, _ = encoder.condition(block.tokens, block.modality_ids, None)
    correct = total = 0
    for anchor, shares in agreement.items():
        scores = {c: float(features[index[c]] @ features[index[anchor]]) for c in shares}
        agree = [c for c, share in shares.items() if share >= STUDY_RELEVANT]
        disagree = [c for c, share in shares.items() if share <= STUDY_IRRELEVANT]
        correct += sum(scores[a] > scores[d] for a in agree for d in disagree)
        total += len(agree) * len(disagree)
    return correct / total


def test_ranking_target_study_trains_the_holistic_baseline(toy, tmp_path):
    """`ranking_target=study`: ranking batches carry no entity and whole-report relevance, and the
    whole-image features learn to rank studies by how much their reports agree."""
    from medreco.training.stage1 import report_agreement, study_relevance

    torch.manual_seed(0)
    trainer = Stage1Trainer(stage1_config(toy, tmp_path, "ranking_target=study", "alignment.epochs=0"))
    phase = trainer.ranking_phase()
    rows = phase.items[:6]
    batch = phase.collate(rows)
    assert batch["entities"] is None
    agreement = report_agreement(trainer.data.relevance_table("train"))
    patient_of = {s: study.patient_id for s, study in trainer.data.studies.items()}
    candidates = [r["positive"] for r in rows] + [r["negative"] for r in rows]
    assert torch.equal(batch["candidates"].relevance, study_relevance(rows, candidates, agreement, patient_of))
    before = _study_auc(trainer.model, trainer, agreement)
    summary = trainer.train()["stage1/ranking"]
    after = _study_auc(trainer.model, trainer, agreement)
    assert summary["last_loss"] < summary["first_loss"] and after > before + 0.1, (before, after)
