"""Training data: modality-homogeneous batches, entity batches, unknown-vs-negative labels."""

from __future__ import annotations

import pytest

from medreco.data.mining import MinedData
from medreco.errors import TrainingDataError
from medreco.training import ModalityBatchSampler
from medreco.training.stage1 import Stage1Trainer, ranking_relevance, report_agreement, study_relevance
from medreco.training.stage2 import homogeneous_order
from toy_training import stage1_config


def test_missing_mined_folder_is_a_clear_error(tmp_path):
    with pytest.raises(TrainingDataError, match="medreco mine"):
        MinedData(tmp_path / "nothing")


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


def test_study_relevance_is_whole_report_agreement_by_hand():
    """The trained holistic baseline's labels: the share of the anchor's judged entities (at least two)
    on which the candidate's report agrees; >= 2/3 relevant, <= 1/3 irrelevant, in between unknown."""
    lookup = {  # (anchor, entity) -> (judged, relevant)
        ("q", "effusion"): ({"a", "b", "c", "d"}, {"a", "b", "d"}),
        ("q", "nodule"): ({"a", "b", "c", "d", "f"}, {"a", "d", "f"}),
        ("q", "edema"): ({"a", "c"}, {"a"}),
    }
    agreement = report_agreement(lookup)
    # f agrees on its one judged entity: too little evidence about the whole report (unknown)
    assert agreement == {"q": {"a": 1.0, "b": 0.5, "c": 0.0, "d": 1.0}}
    rows = [{"anchor": "q", "positive": "a", "negative": "c", "entity_id": "effusion"}]
    patient_of = {"q": "P1", "a": "P2", "b": "P3", "c": "P4", "d": "P1", "e": "P5"}
    # b: 1 of 2 (unknown); d: the anchor's own patient (left out); e: never judged (unknown)
    assert study_relevance(rows, ["a", "b", "c", "d", "e"], agreement, patient_of).tolist() == [[1, -1, 0, -1, -1]]


def _same(a, b) -> bool:
    """Batches compared through dicts, sequences and the typed input groups (dataclasses)."""
    import dataclasses

    import torch

    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if dataclasses.is_dataclass(a):
        return type(a) is type(b) and _same(vars(a), vars(b))
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def test_loader_workers_give_the_main_process_batches_in_its_order(stage1_run):
    import torch

    from medreco.training.loop import phase_batches

    trainer = stage1_run[0]
    for phase in (trainer.alignment_phase(), trainer.ranking_phase()):
        sampler = ModalityBatchSampler(phase.modalities, phase.batch_size_for, seed=3)
        batches = {}
        for workers in (0, 2):
            sampler.set_epoch(1, start=1)  # a resumed epoch: its first batch skipped
            batches[workers] = list(phase_batches(phase, sampler, workers, torch.device("cpu")))
        assert len(batches[0]) == len(sampler.epoch_batches(1)) - 1 > 0
        assert len(batches[2]) == len(batches[0])
        assert all(_same(a, b) for a, b in zip(batches[0], batches[2])), phase.name
