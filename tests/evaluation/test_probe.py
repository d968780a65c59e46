"""The linear probe of frozen stage-1 features and the presence ceiling it implies."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

import medreco
from medreco.data.mining import MinedData
from medreco.data.mining.mined import SUMMARY_FILE, table_fingerprint
from medreco.data.mining.questions import four_options
from medreco.data.mining.vqa import LETTERS, TextOnlyAnswerer
from medreco.evaluation import fit_logistic, linear_probe, presence_ceiling, probe_features, probe_table, rank_auc
from medreco.evaluation.probe import conditioned_features, entity_labels, option_statuses
from medreco.evaluation.vqa import baseline_hits
from medreco.factory import bundled_text_encoder_path
from medreco.processing import MedReCoImageProcessor
from toy_mined import CARDIO, EFFUSION, RECIPES, write_toy_mined

NOUNS = {EFFUSION: "pleural effusion", CARDIO: "cardiomegaly"}
PRESENCE = {(True, True): "Both cases", (False, False): "Neither case", (True, False): "Case A only"}
PRESENCE[(False, True)] = "Case B only"


def presence_rows(data: MinedData, seed: int = 0) -> list[dict]:
    """Mined-style 4-option presence questions about pairs of the toy's studies, per split."""
    rng = np.random.default_rng(seed)
    rows = []
    for split in ("train", "test"):
        members = sorted(data.study_ids(split))
        for i, a in enumerate(members):
            for b in (members[(i + 1) % len(members)], members[(i + 2) % len(members)]):
                for entity, noun in NOUNS.items():
                    truth = PRESENCE[
                        (data.studies[a].status(entity) == "positive", data.studies[b].status(entity) == "positive")
                    ]
                    options, letter = four_options(truth, list(PRESENCE.values()), rng)
                    rows.append(
                        {
                            "study_a": a,
                            "study_b": b,
                            "entity_id": entity,
                            "dimension": "presence",
                            "question": f"Which case shows {noun}?",
                            "options": options,
                            "answer": letter,
                            "open_question": f"Describe whether Case A and Case B show {noun}.",
                            "open_answer": truth,
                            "labels": ["Case A", "Case B"],
                            "split": split,
                        }
                    )
    return rows


@pytest.fixture(scope="module")
def mined(tmp_path_factory):
    """The toy mined folder with 4-option presence questions added to its vqa table (the toy's
    own "Is there ... in Case B?" Yes/No rows stay: no presence option, left out by the ceiling)."""
    import datasets

    folder = write_toy_mined(tmp_path_factory.mktemp("toy"))
    rows = MinedData(folder).rows("vqa") + presence_rows(MinedData(folder))
    shutil.rmtree(folder / "vqa")
    datasets.Dataset.from_list(rows).save_to_disk(str(folder / "vqa"))
    summary = json.loads((folder / SUMMARY_FILE).read_text())
    summary["tables"]["vqa"] = table_fingerprint(folder / "vqa")
    (folder / SUMMARY_FILE).write_text(json.dumps(summary))
    return folder


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    """A saved (untrained) tiny retrieval model: its features are frozen random projections of the
    images, enough to exercise the probe end to end in a second."""
    folder = tmp_path_factory.mktemp("stage1")
    torch.manual_seed(0)
    medreco.create_model("retrieval", "tiny").save_pretrained(folder)
    AutoTokenizer.from_pretrained(bundled_text_encoder_path()).save_pretrained(folder)
    MedReCoImageProcessor(recipes=RECIPES).save_pretrained(folder)
    return folder


def test_rank_auc_on_hand_computed_cases():
    assert rank_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == 0.75
    assert rank_auc([0.5, 0.5, 0.2], [0, 1, 0]) == 0.75  # the tie counts one half
    assert rank_auc([3, 2, 1], [0, 0, 1]) == 0.0
    with pytest.raises(ValueError, match="one positive and one negative"):
        rank_auc([0.1, 0.2], [1, 1])


def test_the_logistic_probe_learns_a_separable_set_and_is_at_chance_on_shuffled_labels():
    generator = torch.Generator().manual_seed(0)
    direction = torch.randn(16, generator=generator)
    x = torch.randn(600, 16, generator=generator) * 3 + 5  # not standardised: the probe does that
    y = ((x - 5) @ direction > 0).float()
    probe = fit_logistic(x[:200], y[:200])
    assert rank_auc(probe.probabilities(x[200:]).tolist(), y[200:].tolist()) > 0.98
    again = fit_logistic(x[:200], y[:200])
    assert torch.equal(again.weight, probe.weight)  # deterministic
    shuffled = y[:200][torch.randperm(200, generator=generator)]
    chance = fit_logistic(x[:200], shuffled).probabilities(x[200:])
    assert abs(rank_auc(chance.tolist(), y[200:].tolist()) - 0.5) < 0.1


def test_linear_probe_counts_match_the_statements_of_both_splits(mined, model_folder):
    from medreco.inference import RetrievalEncoder

    data = MinedData(mined)
    encoder = RetrievalEncoder.from_pretrained(model_folder)
    result = linear_probe(encoder, data, entities=[EFFUSION, CARDIO, "cxr/abnormal/unknown"], min_train=20)
    assert set(result["entities"]) == {EFFUSION, CARDIO}
    assert "unknown" in next(iter(result["skipped"]))
    for entity, entry in result["entities"].items():
        train, test = entity_labels(data, "train", entity), entity_labels(data, "test", entity)
        assert entry["n_train"] == len(train) == 36 and entry["n_test"] == len(test) == 12
        assert entry["train_positives"] == sum(train.values())
        assert entry["positives"] == sum(test.values()) and entry["negatives"] == len(test) - sum(test.values())
        assert set(entry["probabilities"]) == set(test)
        studies = sorted(test)
        probabilities = [entry["probabilities"][s] for s in studies]
        assert entry["auc"] == pytest.approx(rank_auc(probabilities, [test[s] for s in studies]))
        said = [p >= 0.5 for p in probabilities]
        recalls = [
            sum(s == bool(test[study]) for s, study in zip(said, studies) if test[study] == label)
            / sum(test[study] == label for study in studies)
            for label in (0, 1)
        ]
        assert entry["balanced_accuracy"] == pytest.approx(sum(recalls) / 2)
        majority = entry["positives"] if 2 * entry["train_positives"] >= entry["n_train"] else entry["negatives"]
        assert entry["majority_accuracy"] == majority / entry["n_test"]
        assert entry["family"] == "CXR"
    table = probe_table(result)
    assert [row["entity"] for row in table] == sorted(result["entities"])

    train, test = (probe_features(encoder, data, split, EFFUSION) for split in ("train", "test"))
    assert test.study_ids == sorted(entity_labels(data, "test", EFFUSION)) and test.features.shape[0] == 12
    assert test.labels.tolist() == [entity_labels(data, "test", EFFUSION)[s] for s in test.study_ids]
    refit = fit_logistic(train.features, train.labels).probabilities(test.features)
    expected = result["entities"][EFFUSION]["probabilities"]
    assert refit.tolist() == pytest.approx([expected[s] for s in test.study_ids], abs=1e-5)
    chunked = conditioned_features(encoder, data, {EFFUSION: test.study_ids}, {EFFUSION: "x"}, chunk_size=5)
    whole = conditioned_features(encoder, data, {EFFUSION: test.study_ids}, {EFFUSION: "x"})
    for study in test.study_ids:
        torch.testing.assert_close(chunked[EFFUSION][study], whole[EFFUSION][study], rtol=1e-4, atol=1e-5)
    assert linear_probe(encoder, data, entities=[EFFUSION])["entities"][EFFUSION] == result["entities"][EFFUSION]
    with pytest.raises(ValueError, match="no entity has enough"):
        linear_probe(encoder, data, min_train=1000)
    with pytest.raises(ValueError, match="another split"):
        linear_probe(encoder, data, split="train")


def hand_made_probe(data: MinedData, probability) -> dict:
    """A probe result whose test probability of each study is `probability(status)`."""
    entities = {}
    for entity in (EFFUSION, CARDIO):
        labels = entity_labels(data, "test", entity)
        entities[entity] = {"probabilities": {s: probability(label) for s, label in labels.items()}}
    return {"entities": entities}


def test_a_perfect_probe_answers_every_presence_question_and_an_uninformative_one_the_text_prior(mined):
    data = MinedData(mined)
    rows, train_rows = data.rows("vqa", "test"), data.rows("vqa", "train")
    presence = [r for r in rows if r["options"][0] in PRESENCE.values()]
    perfect = presence_ceiling(hand_made_probe(data, float), rows, train_rows, data.studies)
    assert perfect["questions"] == len(presence) == 48
    assert perfect["accuracy"] == 1.0 and perfect["probe_only"]["accuracy"] == 1.0
    assert perfect["left_out"]["other options"] == len(rows) - len(presence)  # the Yes/No rows
    assert set(perfect["by_entity"]) == {EFFUSION, CARDIO}
    assert perfect["text_only"]["accuracy"] == sum(baseline_hits("text_only", train_rows, presence)) / 48
    assert "mcnemar" in perfect["text_only"] and "clustered" in perfect["text_only"]
    # a perfect probe tells the two images apart: every order-dependent answer flips with the images
    swap = perfect["swap_consistency"]
    assert swap["questions"] == 48 and swap["both_orders_correct"]["rate"] == 1.0
    assert swap["order_dependent"]["questions"] > 0 and swap["order_dependent"]["rate"] == 1.0

    flat = presence_ceiling(hand_made_probe(data, lambda _: 0.5), rows, train_rows, data.studies)
    text = baseline_hits("text_only", train_rows, presence)
    assert flat["accuracy"] == flat["text_only"]["accuracy"] == sum(text) / len(text)
    assert flat["text_only"]["mcnemar"]["b"] == flat["text_only"]["mcnemar"]["c"] == 0  # the same choices
    assert flat["swap_consistency"]["order_dependent"]["rate"] == 0.0  # an uninformative probe: one answer

    partial = hand_made_probe(data, float)
    del partial["entities"][CARDIO]
    partial["entities"][EFFUSION]["probabilities"].pop(presence[0]["study_a"])
    covered = presence_ceiling(partial, rows, train_rows, data.studies)
    assert covered["left_out"]["no probe"] == sum(r["entity_id"] == CARDIO for r in rows)
    effusion = [r for r in presence if r["entity_id"] == EFFUSION]
    missing = sum(presence[0]["study_a"] in (r["study_a"], r["study_b"]) for r in effusion)
    assert covered["questions"] == len(effusion) - missing and covered["left_out"]["no probability"] > 0


def test_option_statuses_and_the_text_prior_scores():
    assert option_statuses("Case A only", ("Case A", "Case B")) == (1, 0)
    assert option_statuses("Current only", ("Prior", "Current")) == (0, 1)
    assert option_statuses("neither case", ("Case A", "Case B")) == (0, 0)
    assert option_statuses("Yes", ("Case A", "Case B")) is None
    answerer = TextOnlyAnswerer()
    options = ["Both cases", "Neither case", "Case A only", "Case B only"]
    sample = type("Row", (), {"question": "Which case shows x?", "options": options, "answer": "C"})
    answerer.fit([sample] * 3)
    scores = answerer.option_scores("Which case shows x?", options)
    assert answerer.predict("Which case shows x?", options) == LETTERS[int(np.argmax(scores))] == "C"


def test_evaluate_probe_from_the_command_line(mined, model_folder, tmp_path, capsys):
    from medreco.cli import main

    out = tmp_path / "eval.json"
    command = ["evaluate", "--model", str(model_folder), "--mined", str(mined), "--quiet", "--probe"]
    assert main([*command, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"probe {EFFUSION}" in printed and "presence ceiling accuracy" in printed
    report = json.loads(out.read_text())
    assert set(report["probe"]["entities"]) == {EFFUSION, CARDIO}
    assert report["presence_ceiling"]["questions"] == 48
    assert report["summary"]["all"]["all"]["queries"] > 0  # retrieval is still reported

    assert main([*command, "--split", "train"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "another split" in error
