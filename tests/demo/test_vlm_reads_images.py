"""The comparative VLM's claim, in CI: it reads the two images.

A small chest X-ray cohort, mined and trained with the demo recipe at a few minutes' budget: stage 1,
then stage 2 twice with the same data, steps and seed, once on the images and once on blank images
(the blind VLM). On the test split's image-answerable presence questions ("Which case shows X?",
whose answer the phantom's drawing sets), the VLM beats the blind VLM at patient-clustered p < 0.05.
A VLM that learned only the answer priors cannot pass: the blind VLM learns those as well. Seed 0
(the test's): 46.0% against 29.8% on 400 questions, +16.3 points [+10.3, +21.7], p = 0.0001 over 49
patients; about 4 minutes on 2 cores."""

from __future__ import annotations

import pytest
from transformers import AutoModelForImageTextToText, AutoProcessor

from medreco.data.mining import MinedData, MiningConfig, mine
from medreco.data.phantom import PhantomConfig, generate_cohort
from medreco.evaluation import closed_predictions, sample_rows
from medreco.evaluation.metrics import clustered_paired_test
from medreco.evaluation.vqa import question_cluster
from medreco.training import load_recipe, train_stage

PATIENTS = 150
MINING = dict(
    metrics=("agreement",),
    positive_threshold={"agreement": 0.99},
    negative_threshold={"agreement": 0.01},
    split_fractions={"train": 0.6, "validation": 0.1, "test": 0.3},
    levels=("anatomy", "abnormal", "disease"),
    vqa_pairs_per_study=4.0,
)
STAGE1 = ["alignment.max_steps=600", "ranking.max_steps=300"]
STAGE2 = ["optimization.max_steps=300", "curriculum_steps=100", "optimization.batch_size_2d=16"]


def _train(stage: str, out, mined, *overrides: str):
    recipe = load_recipe(
        "demo", stage, [f"data.mined_dir={mined}", "run.progress=false", f"run.output_dir={out}", *overrides]
    )
    train_stage(stage, recipe)
    return out / "final"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("vlm_claim")
    cohort = PhantomConfig(num_patients=PATIENTS, size="tiny", modalities=("chest_xray",), seed=0, write_nifti=False)
    generate_cohort(cohort, root / "cohort", progress=False)
    mine(root / "cohort" / "manifest.jsonl", root / "mined", MiningConfig(**MINING), progress=False)
    mined = root / "mined"
    stage1 = _train("stage1", root / "stage1", mined, *STAGE1)
    cache = f"data.tensor_cache_dir={root / 'cache'}"
    seeing = _train("stage2", root / "vlm", mined, cache, f"vision_model={stage1}", *STAGE2)
    blind = _train("stage2", root / "blind", mined, cache, f"vision_model={stage1}", *STAGE2, "blind_images=true")
    return MinedData(mined), seeing, blind


def test_the_vlm_beats_the_blind_vlm_on_image_answerable_presence(trained):
    data, seeing, blind = trained
    rows = [r for r in data.rows("vqa", "test") if r["dimension"] == "presence" and r["image_answerable"]]
    rows = sample_rows(rows, 400, seed=0)
    assert len(rows) >= 200
    hits = {}
    for name, folder in (("vlm", seeing), ("blind_vlm", blind)):
        model = AutoModelForImageTextToText.from_pretrained(folder).eval()
        processor = AutoProcessor.from_pretrained(folder)
        letters = closed_predictions(model, processor, rows, data.studies, scorings=("answer",))["answer"]
        hits[name] = [letter == row["answer"] for letter, row in zip(letters, rows, strict=True)]
    patients = [question_cluster(row, data.studies) for row in rows]
    test = clustered_paired_test(hits["vlm"], hits["blind_vlm"], patients)
    accuracy = {name: sum(h) / len(h) for name, h in hits.items()}
    assert test["difference"] > 0 and test["p_value"] < 0.05, (accuracy, test)
