"""What the synthetic images show, from the phantom's table through mining into each question."""

from __future__ import annotations

import json

import pytest

from medreco.data.mining import MinedData, MiningConfig, mine
from medreco.data.mining.answerability import Answerability, AnswerabilityFileError
from medreco.data.mining.pipeline import pair_budget
from medreco.data.phantom import FAMILIES, PhantomConfig, finding_types_for, generate_cohort
from medreco.data.phantom.answerability import DESCRIPTIVE, NOT_DRAWN, answerability_table
from medreco.data.reports.ontology import Ontology

MODALITIES = ("chest_xray", "chest_ct", "brain_mri", "abdominal_ct", "ultrasound")
AGREEMENT = dict(
    metrics=("agreement",),
    positive_threshold={"agreement": 0.99},
    negative_threshold={"agreement": 0.01},
    split_fractions={"train": 0.5, "validation": 0.0, "test": 0.5},
    levels=("anatomy", "abnormal", "disease"),
)


@pytest.fixture(scope="module")
def mined(tmp_path_factory):
    root = tmp_path_factory.mktemp("answerability")
    config = PhantomConfig(num_patients=12, size="tiny", seed=3, modalities=("chest_xray", "chest_ct"))
    generate_cohort(config, root / "cohort", progress=False)
    mine(root / "cohort" / "manifest.jsonl", root / "mined", MiningConfig(**AGREEMENT), progress=False)
    return root


def test_every_drawn_finding_is_listed_with_what_its_image_shows():
    table = answerability_table(MODALITIES)["modalities"]
    ontology = Ontology.load()
    for modality in MODALITIES:
        types = FAMILIES[modality].types if modality in FAMILIES else finding_types_for(modality)
        for finding_type in types:
            entry = table[modality][ontology.find(finding_type.entity, modality).id]
            for dimension in ("presence", "location", "size", "number", "change:presence", "change:size"):
                assert entry[dimension] == "", (modality, finding_type.key, dimension)
            for dimension in ("morphology", "aetiology", "associated findings", "distribution"):
                assert entry[dimension] == DESCRIPTIVE, (modality, finding_type.key, dimension)
    nodule = table["chest_ct"]["ct/abnormal/solitary-pulmonary-nodule-and-mass@pulmonary-parenchyma"]
    assert nodule["margins"] == nodule["composition"] == ""  # drawn: spiculated spikes, density
    assert "cavitation" in nodule["change:composition"]  # a composition change may be a cavity: not drawn
    effusion = table["chest_xray"]["cxr/abnormal/pleural-effusion@pleura"]
    assert effusion["margins"] == DESCRIPTIVE
    # a structure shows what every finding in it shows: the lung parenchyma's margins are not shown
    # by consolidation or atelectasis, its presence and size by all of them
    parenchyma = table["chest_xray"]["cxr/anatomy/pulmonary-parenchyma"]
    assert parenchyma["presence"] == parenchyma["size"] == "" and parenchyma["margins"] == DESCRIPTIVE
    assert "cxr/abnormal/pneumothorax@pleura" not in table["chest_xray"]  # reports mention it; never drawn


def test_lookup_of_what_is_not_listed_is_report_only(tmp_path):
    (tmp_path / "answerability.json").write_text(json.dumps(answerability_table(["chest_xray"])))
    table = Answerability.beside(tmp_path / "manifest.jsonl")
    nodule = "cxr/abnormal/solitary-pulmonary-nodule-and-mass@pulmonary-parenchyma"
    assert table.columns("chest_xray", nodule, "size") == {"image_answerable": True, "answerability_reason": ""}
    assert table.reason("chest_xray", nodule, "aetiology") == DESCRIPTIVE
    assert table.reason("chest_xray", nodule, "change", "composition").startswith("the change may be")
    assert table.reason("chest_xray", "cxr/abnormal/bone-fracture@ribs", "presence") == NOT_DRAWN
    assert table.reason("chest_ct", nodule, "presence") == NOT_DRAWN  # a modality the table does not hold
    assert Answerability.beside(tmp_path / "elsewhere" / "manifest.jsonl") is None


@pytest.mark.parametrize(
    "content, problem",
    [("{not json", "not JSON"), ('{"format": 7}', "format 1"), ('{"format": 1, "modalities": []}', "modalities")],
)
def test_a_broken_table_names_the_file(tmp_path, content, problem):
    path = tmp_path / "answerability.json"
    path.write_text(content)
    with pytest.raises(AnswerabilityFileError, match=problem) as error:
        Answerability.read(path)
    assert str(path) in str(error.value)


def test_mining_copies_answerability_into_every_question(mined):
    data = MinedData(mined / "mined")
    table = Answerability.beside(mined / "cohort" / "manifest.jsonl")
    rows = data.rows("vqa")
    assert rows and {r["image_answerable"] for r in rows} == {True, False}
    for row in rows:
        modality = data.studies[row["study_a"]].modality
        if row["dimension"] != "change":
            assert row["answerability_reason"] == table.reason(modality, row["entity_id"], row["dimension"])
        assert row["image_answerable"] == (row["answerability_reason"] == "")
    presence = [r for r in rows if r["dimension"] == "presence" and "nodule" in r["entity_id"]]
    assert presence and all(r["image_answerable"] for r in presence)
    assert all(not r["image_answerable"] for r in rows if r["dimension"] in ("morphology", "aetiology"))
    follow_up = data.rows("longitudinal")
    assert follow_up and all(isinstance(r["image_answerable"], bool) for r in follow_up)
    assert all(r["image_answerable"] for r in follow_up if r["attribute"] in ("presence", "size"))
    summary = json.loads((mined / "mined" / "summary.json").read_text())
    assert summary["answerability"]["sha256"] == table.sha256


def test_an_archive_without_a_table_gets_no_answerability_columns(mined, tmp_path):
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text(
        (mined / "cohort" / "manifest.jsonl").read_text().replace('"image": "', f'"image": "{mined}/cohort/')
    )
    mine(manifest, tmp_path / "mined", MiningConfig(**AGREEMENT), progress=False)
    data = MinedData(tmp_path / "mined")
    assert data.rows("vqa") and all("image_answerable" not in r for r in data.rows("vqa"))
    assert json.loads((tmp_path / "mined" / "summary.json").read_text())["answerability"] is None


def test_pair_budget_follows_each_group_of_studies():
    assert pair_budget(MiningConfig(), 50) == 2000  # the fixed cap
    proportional = MiningConfig(vqa_pairs_per_study=4.0, vqa_pairs_per_group=3000)
    assert pair_budget(proportional, 84) == 336 and pair_budget(proportional, 560) == 2240
    assert pair_budget(proportional, 5000) == 3000
    with pytest.raises(ValueError, match="vqa_pairs_per_study"):
        MiningConfig(vqa_pairs_per_study=0)
