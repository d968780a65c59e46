"""Training recipes: typed configs, batches, stage 1, reranker, stage 2 (TRL), resume, DDP, DeepSpeed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModel, AutoModelForImageTextToText

from medreco.training import (
    ModalityBatchSampler,
    RecipeError,
    Stage1Config,
    Stage2Config,
    load_recipe,
    train_phase,
)
from medreco.training.data import MinedData, TrainingDataError
from medreco.training.reranker import RerankerTrainer
from medreco.training.stage1 import Stage1Trainer, ranking_relevance
from medreco.training.stage2 import Stage2Trainer, homogeneous_order

sys.path.insert(0, str(Path(__file__).parent))
from toy_mined import RECIPES, write_toy_mined

HERE = Path(__file__).parent
ROOT = HERE.parent


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    return write_toy_mined(tmp_path_factory.mktemp("toy"))


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
    from medreco.retrieval import RetrievalEncoder
    from medreco.training.stage1 import entity_prompts

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


# ---------------------------------------------------------------- configs
def test_builtin_recipes_load_into_typed_configs():
    for stage in ("stage1", "reranker", "stage2"):
        for recipe in ("tiny", "paper"):
            config = load_recipe(recipe, stage)
            assert config.run.output_dir
    paper = load_recipe("paper", "stage1")
    assert paper.ranking.learning_rate == 1e-4 and paper.ranking.epochs == 10 and paper.triplet_margin == 0.2
    stage2 = load_recipe("paper", "stage2")
    assert stage2.optimization.learning_rate == 2e-5 and stage2.projector_learning_rate == 1e-4


def test_recipe_errors_name_the_key(tmp_path):
    with pytest.raises(RecipeError, match=r"alignment\.epochs"):
        load_recipe("tiny", "stage1", ["alignment.epochs=many"])
    with pytest.raises(RecipeError, match="unknown key"):
        load_recipe("tiny", "stage1", ["ranking.learning_rat=1"])
    with pytest.raises(RecipeError, match="not found"):
        load_recipe(tmp_path / "missing.yaml", "stage1")
    bad = tmp_path / "bad.yaml"
    bad.write_text("stage1: [1, 2")
    with pytest.raises(RecipeError, match="YAML"):
        load_recipe(bad, "stage1")
    # YAML reads a bare `no` as false: it still means "no mixed precision"
    assert load_recipe("tiny", "stage1", ["ranking.mixed_precision=no"]).ranking.mixed_precision == "no"


def test_missing_mined_folder_is_a_clear_error(tmp_path):
    with pytest.raises(TrainingDataError, match="medreco mine"):
        MinedData(tmp_path / "nothing")


# ---------------------------------------------------------------- batches
def test_batches_are_modality_homogeneous_deterministic_and_balanced_over_ranks():
    modalities = ["chest_xray"] * 37 + ["chest_ct"] * 21
    sizes = {"chest_xray": 8, "chest_ct": 2}
    samplers = [ModalityBatchSampler(modalities, sizes.get, seed=3, num_replicas=2, rank=r) for r in range(2)]
    rank0, rank1 = (s.epoch_batches(0) for s in samplers)
    assert len(rank0) == len(rank1) > 0
    for a, b in zip(rank0, rank1):
        assert len({modalities[i] for i in a + b}) == 1  # one expert for every process at each step
        assert len(a) == sizes[modalities[a[0]]]
    seen = [i for batch in rank0 + rank1 for i in batch]
    assert len(seen) == len(set(seen))
    assert samplers[0].epoch_batches(0) == rank0 and samplers[0].epoch_batches(1) != rank0
    samplers[0].set_epoch(0, start=3)
    assert list(samplers[0]) == rank0[3:]


def test_vqa_examples_are_laid_out_in_homogeneous_blocks():
    examples = [{"modality": "chest_xray", "i": i} for i in range(10)] + [
        {"modality": "chest_ct", "i": i} for i in range(7)
    ]
    ordered = homogeneous_order(examples, batch_size=3, epochs=2, seed=0)
    assert len(ordered) == 2 * (3 * 3 + 2 * 3)
    for start in range(0, len(ordered), 3):
        assert len({e["modality"] for e in ordered[start : start + 3]}) == 1


# ---------------------------------------------------------------- stage 1
@pytest.fixture(scope="module")
def stage1_run(toy, tmp_path_factory):
    out = tmp_path_factory.mktemp("stage1")
    torch.manual_seed(0)
    trainer = Stage1Trainer(stage1_config(toy, out))
    before = pair_auc(trainer.model, trainer)
    summaries = trainer.train()
    return trainer, out, summaries, before


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


# ---------------------------------------------------------------- reranker
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


# ---------------------------------------------------------------- stage 2
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


@pytest.mark.parametrize("lora", [False, True])
def test_stage2_sft_step_with_two_images_per_sample(stage1_run, toy, tmp_path, lora, capsys):
    _, stage1_out, _, _ = stage1_run
    config = stage2_config(toy, stage1_out / "final", tmp_path, f"lora.enabled={str(lora).lower()}")
    trainer = Stage2Trainer(config)
    vision_before = {k: v.clone() for k, v in trainer.model.model.vision_tower.state_dict().items()}
    projector_before = {k: v.clone() for k, v in trainer.model.model.multi_modal_projector.state_dict().items()}
    summary = trainer.train(max_steps=6)["stage2"]
    assert summary["steps"] == 6 and summary["lora"] == lora
    assert "'loss'" not in capsys.readouterr().out  # run.progress=false: no log lines on stdout
    assert summary["last_loss"] < summary["first_loss"]
    model = AutoModelForImageTextToText.from_pretrained(tmp_path / "final")
    for name, tensor in model.model.vision_tower.state_dict().items():
        torch.testing.assert_close(tensor, vision_before[name])  # frozen stage-1 encoder
    assert any(
        not torch.equal(tensor, projector_before[name])
        for name, tensor in model.model.multi_modal_projector.state_dict().items()
    )
    assert not any("lora" in key for key in load_file(tmp_path / "final" / "model.safetensors"))


def test_an_answer_is_text_even_from_a_model_that_would_end_its_turn_at_once(stage1_run, toy, tmp_path, capsys):
    from medreco.comparison import ComparativeReader

    _, stage1_out, _, _ = stage1_run
    trainer = Stage2Trainer(stage2_config(toy, stage1_out / "final", tmp_path))
    model, processor = trainer.model.eval(), trainer.processor
    tokenizer = processor.tokenizer
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
    special = set(tokenizer.all_special_ids)
    assert end_of_turn in special and processor.image_token_id in special

    def prefer_special_tokens(module, inputs, logits):  # a barely trained model's worst case
        logits = logits.clone()
        logits[..., sorted(special)] += 100.0
        logits[..., end_of_turn] += 100.0
        return logits

    model.get_output_embeddings().register_forward_hook(prefer_special_tokens)
    generated = []
    generate = model.generate

    def recording_generate(**inputs):
        output = generate(**inputs)
        generated.append(output[0, inputs["input_ids"].shape[1] :])
        return output

    model.generate = recording_generate
    studies = trainer.data.studies
    first, second = sorted(studies)[:2]
    reader = ComparativeReader(model, processor)
    answer = reader.answer(studies[first].image, studies[second].image, "Any change?", max_new_tokens=3)
    new_tokens = generated[0].tolist()
    text_tokens = new_tokens[:-1] if new_tokens[-1] == end_of_turn else new_tokens
    assert text_tokens and not set(text_tokens) & special  # one token at least, and never a placeholder
    assert answer == tokenizer.decode(text_tokens).strip() != ""


def test_stage2_entity_tokens_reuse_the_stage1_conditioner_and_name_each_question_entity(
    stage1_run, toy, tmp_path, capsys
):
    from transformers import AutoProcessor, AutoTokenizer

    from medreco.cli import main
    from medreco.comparison import ComparativeReader
    from medreco.errors import UnknownEntityError
    from medreco.evaluation.vqa import closed_predictions
    from medreco.training.stage1 import entity_prompts

    _, stage1_out, _, _ = stage1_run
    stage1 = AutoModel.from_pretrained(stage1_out / "final").eval()
    trainer = Stage2Trainer(stage2_config(toy, stage1_out / "final", tmp_path, "entity_tokens=true"))
    vocabulary = sorted(entity_prompts())
    assert trainer.model.config.entity_vocabulary == trainer.processor.entity_vocabulary == vocabulary
    effusion = "cxr/abnormal/pleural-effusion@pleura"
    tokenizer = AutoTokenizer.from_pretrained(stage1_out / "final")
    expected = stage1.encode_entity_texts([entity_prompts()[effusion]], tokenizer)[0]
    table = trainer.model.model.entity_embeddings.weight
    torch.testing.assert_close(table[vocabulary.index(effusion)], expected)
    conditioner = {k: v.clone() for k, v in trainer.model.model.conditioner.state_dict().items()}
    for name, tensor in stage1.conditioner.state_dict().items():
        torch.testing.assert_close(conditioner[name], tensor)
    example = trainer.dataset()[0]
    images = [b for b in example["messages"][0]["content"] if b["type"] == "image"]
    assert len(images) == 2 and all(b["entity"] in vocabulary for b in images)

    projector = {k: v.clone() for k, v in trainer.model.model.entity_projector.state_dict().items()}
    summary = trainer.train(max_steps=4)["stage2"]
    assert summary["last_loss"] < summary["first_loss"]
    folder = tmp_path / "final"
    model = AutoModelForImageTextToText.from_pretrained(folder).eval()
    processor = AutoProcessor.from_pretrained(folder)
    for name, tensor in model.model.conditioner.state_dict().items():
        torch.testing.assert_close(tensor, conditioner[name])  # frozen with the vision encoder
    assert any(not torch.equal(t, projector[k]) for k, t in model.model.entity_projector.state_dict().items())

    rows = trainer.data.rows("vqa", "train")[:3]
    predicted = closed_predictions(model, processor, rows, trainer.data.studies, scorings=("answer", "letter"))
    assert all(len(letters) == 3 and set(letters) <= set("ABCD") for letters in predicted.values())
    reader = ComparativeReader(model, processor)
    assert reader.entity_finder.find("Has the left pleural effusion grown?", "chest_xray") == effusion
    assert reader.entity_finder.find("Anything new?", "chest_xray") is None
    assert reader.entity_finder.find("Any change?", "chest_xray", entity="pleural effusion") == effusion
    with pytest.raises(UnknownEntityError, match="unknown entity 'gremlins'"):
        reader.answer(rows[0]["study_a"], rows[0]["study_b"], "Any change?", entity="gremlins")
    studies = trainer.data.studies
    first, second = studies[rows[0]["study_a"]].image, studies[rows[0]["study_b"]].image
    args = ["compare", first, second, "--model", str(folder), "--question", "Any change?", "--entity", "effusion"]
    assert main(args) == 0
    assert capsys.readouterr().out.strip() != ""


def test_stage2_learns_its_vocabulary_from_the_training_conversations(stage1_run, toy, tmp_path):
    from medreco.training.stage2 import conversation_texts, vqa_examples

    _, stage1_out, _, _ = stage1_run
    trainer = Stage2Trainer(stage2_config(toy, stage1_out / "final", tmp_path))
    tokenizer = trainer.processor.tokenizer
    assert trainer.config.tokenizer == "mined" and len(tokenizer) <= trainer.config.tokenizer_vocab_size + 8
    assert trainer.model.config.text_config.vocab_size == len(tokenizer)
    texts = conversation_texts(vqa_examples(trainer.data, "train", include_open_ended=True))
    assert texts and not any(tokenizer.unk_token_id in tokenizer.encode(t, add_special_tokens=False) for t in texts)
    with pytest.raises(RecipeError, match="own tokenizer"):
        Stage2Trainer(stage2_config(toy, stage1_out / "final", tmp_path, "language_model=Qwen/Qwen2.5-0.5B"))


def test_qlora_is_refused_without_cuda(stage1_run, toy, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: QLoRA is allowed")
    _, stage1_out, _, _ = stage1_run
    config = stage2_config(
        toy, stage1_out / "final", tmp_path, "lora.enabled=true", "lora.quantization=4bit", "language_model=some/lm"
    )
    with pytest.raises(RecipeError, match="CUDA"):
        Stage2Trainer(config)


# ---------------------------------------------------------------- distributed
def torchrun(nproc: int, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc)]
    return subprocess.run(
        [*command, str(HERE / "distributed_train.py"), *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.mark.parametrize("frozen_text", [False, True])
def test_two_cpu_processes_train_stage1_in_ddp_to_identical_weights(toy, tmp_path, frozen_text):
    extra = ["", "freeze_text_encoder=true", "alignment.max_steps=2"] if frozen_text else []
    result = torchrun(2, str(toy), str(tmp_path), *extra, env={"ACCELERATE_USE_CPU": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    digests = {p.read_text() for p in tmp_path.glob("rank*.sha256")}
    assert len(list(tmp_path.glob("rank*.sha256"))) == 2 and len(digests) == 1
    summary = json.loads((tmp_path / "final" / "summary.json").read_text())["stage1/ranking"]
    assert summary["processes"] == 2 and summary["steps"] == 4


@pytest.mark.parametrize("stage", ["zero2", "zero3"])
def test_deepspeed_zero_trains_on_the_cpu_and_saves_a_loadable_model(toy, tmp_path, stage):
    pytest.importorskip("deepspeed")
    result = torchrun(1, str(toy), str(tmp_path), str(ROOT / "accelerate_configs" / f"deepspeed_{stage}.json"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "ranking" / "deepspeed_checkpoint").is_dir()  # DeepSpeed's engine did the training
    model = AutoModel.from_pretrained(tmp_path / "final")
    assert all(torch.isfinite(t).all() for t in model.state_dict().values())


def test_retrieval_evaluation_of_the_trained_model(stage1_run, toy):
    import medreco
    from medreco.evaluation import evaluate_retrieval
    from medreco.retrieval import RerankerScorer, RetrievalEncoder

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


def test_cli_index_search_evaluate_and_compare(stage1_run, toy, tmp_path, capsys):
    from medreco.cli import main

    _, out, _, _ = stage1_run
    model = str(out / "final")
    data = MinedData(toy)
    query = sorted(data.studies)[0]
    assert (
        main(
            [
                "index",
                "--model",
                model,
                "--mined",
                str(toy),
                "--out",
                str(tmp_path / "index"),
                "--entity",
                "Pleural effusion",
                "--quiet",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["studies"] == {"chest_xray": len(data.studies)}
    assert (
        main(
            [
                "search",
                data.studies[query].image,
                "--index",
                str(tmp_path / "index"),
                "--model",
                model,
                "--modality",
                "chest_xray",
                "--entity",
                "Pleural effusion",
                "--exclude",
                query,
                "--json",
                "--plot",
                str(tmp_path / "montage.png"),
            ]
        )
        == 0
    )
    hits = json.loads(capsys.readouterr().out.split("montage written")[0])
    assert len(hits) == 5 and query not in [h["study_id"] for h in hits]
    relevant = {
        s
        for s, study in data.studies.items()
        if study.status("cxr/abnormal/pleural-effusion@pleura")
        == data.studies[query].status("cxr/abnormal/pleural-effusion@pleura")
    }
    assert sum(h["study_id"] in relevant for h in hits) >= 4  # the trained model retrieves the same finding
    assert (tmp_path / "montage.png").stat().st_size > 5000
    assert (
        main(["evaluate", "--model", model, "--mined", str(toy), "--out", str(tmp_path / "eval.json"), "--quiet"]) == 0
    )
    assert "entity R@1/3/5" in capsys.readouterr().out
    assert json.loads((tmp_path / "eval.json").read_text())["summary"]["all"]["all"]["queries"] > 0

    trainer = Stage2Trainer(stage2_config(toy, out / "final", tmp_path / "vlm"))
    trainer.train(max_steps=2)
    second = sorted(data.studies)[1]
    assert (
        main(
            [
                "compare",
                data.studies[query].image,
                data.studies[second].image,
                "--model",
                str(tmp_path / "vlm" / "final"),
                "--question",
                "Is there pleural effusion in Case B?",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.strip() != ""  # an (untrained, short) answer in text


def test_stage2_learns_closed_questions_beyond_its_untrained_self(stage1_run, toy, tmp_path):
    from medreco.evaluation.vqa import closed_accuracy

    _, stage1_out, _, _ = stage1_run
    config = stage2_config(
        toy,
        stage1_out / "final",
        tmp_path,
        "include_open_ended=false",
        "data.max_train_samples=null",
        "optimization.epochs=4",
        "optimization.learning_rate=3e-3",
        "projector_learning_rate=3e-3",
    )
    torch.manual_seed(0)
    trainer = Stage2Trainer(config)
    rows = trainer.data.rows("vqa", "train")
    before = closed_accuracy(trainer.model, trainer.processor, rows, trainer.data.studies, scoring="letter")
    trainer.train()
    after = closed_accuracy(trainer.model, trainer.processor, rows, trainer.data.studies, scoring="letter")
    before, after = before["accuracy"], after["accuracy"]
    assert after >= 0.8 and after > before + 0.2, (before, after)
    by_answer = closed_accuracy(trainer.model, trainer.processor, rows, trainer.data.studies, scoring="answer")
    assert by_answer["accuracy"] >= 0.8, by_answer["accuracy"]


def test_entity_batches_give_each_ranking_batch_one_entity(toy, tmp_path):
    trainer = Stage1Trainer(stage1_config(toy, tmp_path, "entity_batches=true", "ranking.batch_size_2d=4"))
    phase = trainer.ranking_phase()
    sampler = ModalityBatchSampler(phase.modalities, phase.batch_size_for)
    batches = sampler.epoch_batches(0)
    assert batches and sum(map(len, batches)) == len(phase.items)
    for batch in batches:
        rows = [phase.items[i] for i in batch]
        assert len({(r["modality"], r["entity_id"]) for r in rows}) == 1
        assert len(batch) <= 4
    mixed = Stage1Trainer(stage1_config(toy, tmp_path)).ranking_phase()
    assert set(mixed.modalities) == {r["modality"] for r in mixed.items}


def test_studies_silent_on_an_entity_are_unknown_not_negatives():
    retrieval = [
        # q1 says "no effusion"; r1 agrees; n1 says "large effusion"; s1 never mentions effusion
        {"query": "q1", "entity_id": "eff", "gallery": ["r1", "n1", "s1"], "relevant": ["r1"]},
        {"query": "n1", "entity_id": "eff", "gallery": ["q1", "r1", "s1"], "relevant": ["x1"]},
    ]
    data = object.__new__(MinedData)
    data.rows = lambda table, split=None: retrieval
    assert data.mentioning("train") == {"eff": {"q1", "r1", "n1", "x1"}}
    judged, relevant = data.relevance_table("train")[("q1", "eff")]
    assert judged == {"r1", "n1"} and relevant == {"r1"}
    rows = [{"anchor": "q1", "entity_id": "eff", "positive": "r1", "negative": "n1"}]
    patient_of = {"q1": "A", "r1": "B", "n1": "C", "s1": "D"}
    relevance = ranking_relevance(rows, ["r1", "n1", "s1"], data.relevance_table("train"), patient_of)
    assert relevance.tolist() == [[1, 0, -1]]
    # with the mined `irrelevant` column, only the pairs the thresholds call negative are negatives
    retrieval[0]["irrelevant"], retrieval[1]["irrelevant"] = [], ["q1"]
    judged, _ = data.relevance_table("train")[("q1", "eff")]
    assert judged == {"r1"}
    assert ranking_relevance(rows, ["r1", "n1", "s1"], data.relevance_table("train"), patient_of).tolist() == [
        [1, 0, -1]  # the mined triplet's own negative stays authoritative
    ]


def test_public_benchmarks_run_on_a_saved_vlm(stage1_run, toy, tmp_path, capsys):
    """MMXU, MS-CXR-T and Medical-Diff-VQA files in their published formats, with images in the
    MIMIC-CXR-JPG layout, scored by `run_benchmark` and `medreco benchmark`."""
    import shutil

    from medreco.cli import main
    from medreco.evaluation import BenchmarkDataError, run_benchmark

    _, out, _, _ = stage1_run
    Stage2Trainer(stage2_config(toy, out / "final", tmp_path / "vlm")).train(max_steps=2)
    model = tmp_path / "vlm" / "final"
    data = MinedData(toy)
    root = tmp_path / "mimic"
    for i, study in enumerate(sorted(data.studies)[:4]):
        folder = root / "files" / "p10" / "p10000001" / f"s5000000{i}"
        folder.mkdir(parents=True)
        shutil.copy(data.studies[study].image, folder / f"dicom{i}.png")

    def write_mmxu(answers: list[str]) -> Path:
        path = tmp_path / "mmxu.jsonl"
        lines = [
            {
                "id": i,
                "question": "Has the effusion changed?",
                "options": {"A": "Larger", "B": "Smaller", "C": "Unchanged", "D": "Resolved"},
                "answer": answer,
                "cur_image_path": f"files/p10/p10000001/s5000000{i % 4}/dicom{i % 4}.png",
                "prior_image_path": f"files/p10/p10000001/s5000000{(i + 1) % 4}/dicom{(i + 1) % 4}.png",
                "content_type": "size" if i % 2 else "presence",
            }
            for i, answer in enumerate(answers)
        ]
        path.write_text("\n".join(json.dumps(line) for line in lines))
        return path

    first = run_benchmark("mmxu", model, write_mmxu(["A"] * 6), root, progress=False)
    assert first["questions"] == 6 and sum(v["questions"] for v in first["by_content_type"].values()) == 6
    predicted = [p["predicted"] for p in first["predictions"]]
    assert set(predicted) <= set("ABCD")
    assert first["accuracy"] == pytest.approx(predicted.count("A") / 6)
    # Scoring follows the answer key: the model's own answers score 1, any other letter scores 0.
    assert run_benchmark("mmxu", model, write_mmxu(predicted), root, progress=False)["accuracy"] == 1.0
    other = ["B" if p == "A" else "A" for p in predicted]
    assert run_benchmark("mmxu", model, write_mmxu(other), root, progress=False)["accuracy"] == 0.0

    header = "subject_id,study_id,dicom_id,previous_study_id,previous_dicom_id,"
    header += ",".join(f"{f}_progression" for f in ("consolidation", "edema", "pleural_effusion", "pneumonia"))
    csv = tmp_path / "ms_cxr_t.csv"
    csv.write_text(
        f"{header}\n10000001,50000001,dicom1,50000000,dicom0,stable,,worsening,\n10000001,50000003,dicom3,50000002,dicom2,,improving,,stable\n"
    )
    progression = run_benchmark("ms-cxr-t", model, csv, root, progress=False)
    matrix = progression["confusion"]["matrix"]
    assert progression["questions"] == 4 and sum(map(sum, matrix)) == 4
    assert sorted(progression["by_finding"]) == ["consolidation", "edema", "pleural_effusion", "pneumonia"]
    assert progression["accuracy"] == pytest.approx(sum(matrix[i][i] for i in range(3)) / 4)
    csv.write_text(f"{header}\n10000001,50000001,dicom1,50000000,dicom9,stable,,,\n")
    with pytest.raises(BenchmarkDataError, match="dicom9"):
        run_benchmark("ms-cxr-t", model, csv, root, progress=False)

    pairs = tmp_path / "mimic_pair_questions.csv"
    question = "what has changed compared to the reference image?"
    pairs.write_text(
        "study_id,subject_id,ref_id,question_type,question,answer,split\n"
        f"50000001,10000001,50000000,difference,{question},the main image has an additional pleural effusion.,test\n"
        f"50000003,10000001,50000002,difference,{question},nothing has changed.,test\n"
        "50000003,10000001,50000002,abnormality,what abnormalities are seen in this image?,pleural effusion,test\n"
        f"50000002,10000001,50000001,difference,{question},nothing has changed.,train\n"
    )
    assert main(["benchmark", "medical-diff-vqa", "--model", str(model), "--data", str(pairs), "--images", str(root),
                 "--out", str(tmp_path / "diff.json"), "--quiet"]) == 0  # fmt: skip
    assert "medical-diff-vqa (n=2): bleu" in capsys.readouterr().out
    difference = json.loads((tmp_path / "diff.json").read_text())
    scores = difference["scores"]
    assert set(difference["unavailable_metrics"]) | (set(scores) & {"ratescore", "radgraph"}) == {
        "ratescore",
        "radgraph",
    }
    assert scores["questions"] == 2 and all(0.0 <= scores[k] <= 1.0 for k in ("bleu", "rouge_l", "meteor", "entity_f1"))

    (root / "files" / "p10" / "p10000001" / "s50000000" / "dicom0.png").unlink()
    with pytest.raises(BenchmarkDataError, match=r"dicom0\.png"):
        run_benchmark("mmxu", model, write_mmxu(["A"]), root, progress=False)


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
    pooled = trainer.pooled_reports(studies)
    assert model.text_encoder.training  # computing the cache leaves the module's mode alone
    model.eval()
    with torch.no_grad():
        from_tokens = model(pixels, modalities, input_ids=text["input_ids"], attention_mask=text["attention_mask"])
        from_cache = model(pixels, modalities, report_features=torch.stack([pooled[s] for s in studies]))
    assert torch.allclose(from_tokens.loss, from_cache.loss, atol=1e-5)
    assert torch.allclose(from_tokens.text_embeds, from_cache.text_embeds, atol=1e-5)
    # ranking batches carry the entity prompts' pooled features, with the loss of their tokens
    ranking = trainer.ranking_phase()
    batch = ranking.collate(ranking.items[:6])
    assert "entity_features" in batch and "entity_input_ids" not in batch
    prompts = [trainer.prompts[row["entity_id"]] for row in ranking.items[:6]]
    tokens = trainer.tokenizer(prompts, padding=True, return_tensors="pt")
    tokenized = {**batch, "entity_input_ids": tokens["input_ids"], "entity_attention_mask": tokens["attention_mask"]}
    del tokenized["entity_features"]
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
    assert batch["statement_pairs"].shape == (12, 2) and batch["entity_features"].shape[0] == 2
    keys = [(row, e) for row, s in enumerate(studies) for e in sorted(trainer.data.studies[s].statements)]
    entities = sorted({e for _, e in keys})
    # statements that say the same (entity and finding) share a group, and only those
    content = [
        (entities[e], trainer.data.studies[studies[row]].status(entities[e]))
        for e, row in batch["statement_pairs"].tolist()
    ]
    groups = batch["statement_groups"].tolist()
    for i in range(len(groups)):
        assert [g == groups[i] for g in groups] == [c == content[i] for c in content]
    # pooled features and tokens give the same loss
    texts = [" ".join(trainer.data.studies[studies[row]].statements[e]["sentences"]) for row, e in keys]
    tokenized = {k: v for k, v in batch.items() if k not in ("entity_features", "statement_features")}
    statement_tokens = trainer.tokenize_texts(texts)
    entity_tokens = trainer.tokenize_texts([trainer.prompts[e] for e in entities])
    tokenized.update(
        statement_input_ids=statement_tokens["input_ids"],
        statement_attention_mask=statement_tokens["attention_mask"],
        entity_input_ids=entity_tokens["input_ids"],
        entity_attention_mask=entity_tokens["attention_mask"],
    )
    model.eval()
    with torch.no_grad():
        pooled_out, token_out = model(**batch), model(**tokenized)
    assert torch.allclose(pooled_out.statement_loss, token_out.statement_loss, atol=1e-5)
    before = pair_auc(model, trainer)
    trainer.train()
    after = pair_auc(trainer.model, trainer)
    assert after > max(0.8, before + 0.2)


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
