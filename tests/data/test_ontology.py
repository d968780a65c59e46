import json

import pytest

from medreco.cli import main
from medreco.data.reports.ontology import Ontology


@pytest.fixture(scope="module")
def ontology():
    return Ontology.load()


def test_vocabulary_matches_appendix_s2():
    paper = Ontology.load(paper_only=True)
    assert [len(paper.entities(level=level)) for level in ("anatomy", "abnormal", "disease")] == [42, 69, 28]
    assert {family: len(paper.entities(family)) for family in paper.families} == {
        "CXR": 53,
        "CT": 51,
        "BRAIN": 18,
        "US": 17,
    }
    assert all(e.anatomy for e in paper.entities(level="abnormal"))
    assert len({e.id for e in paper.entities()}) == len(paper)


def test_shipped_extension_adds_to_the_paper_vocabulary_and_keeps_its_entities(ontology):
    paper = Ontology.load(paper_only=True)
    for entity in paper.entities():  # every paper entity is kept, with its name and level
        extended = ontology[entity.id]
        assert (extended.name, extended.level, extended.anatomy) == (entity.name, entity.level, entity.anatomy)
        assert set(entity.synonyms) <= set(extended.synonyms)
    assert len(ontology) > len(paper) and len({e.id for e in ontology.entities()}) == len(ontology)
    added = [e for e in ontology.entities(level="abnormal") if e.id not in {p.id for p in paper.entities()}]
    for entity in added:  # an anatomy the extension names is one its family lists
        assert entity.anatomy is None or ontology.anatomy_of(entity) is not None, entity.id


CHEXPERT_OBSERVATIONS = {  # the 13 CheXpert findings (all but "No Finding"), by the names reports use
    "Enlarged Cardiomediastinum": "enlarged cardiomediastinum",
    "Cardiomegaly": "cardiomegaly",
    "Lung Opacity": "lung opacity",
    "Lung Lesion": "lung lesion",
    "Edema": "edema",
    "Consolidation": "consolidation",
    "Pneumonia": "pneumonia",
    "Atelectasis": "atelectasis",
    "Pneumothorax": "pneumothorax",
    "Pleural Effusion": "pleural effusion",
    "Pleural Other": "pleural thickening",
    "Fracture": "fracture",
    "Support Devices": "support devices",
}


@pytest.mark.parametrize("observation", sorted(CHEXPERT_OBSERVATIONS))
def test_every_chexpert_observation_has_a_chest_xray_entity(ontology, observation):
    entity = ontology.find(CHEXPERT_OBSERVATIONS[observation], "chest_xray")
    assert entity.family == "CXR" and entity.level in ("abnormal", "disease")


@pytest.mark.parametrize(
    ("phrase", "modality", "entity_id"),
    [
        ("rib fracture", "chest_xray", "cxr/abnormal/bone-fracture@ribs"),
        (
            "solitary pulmonary nodule",
            "chest_ct",
            "ct/abnormal/solitary-pulmonary-nodule-and-mass@pulmonary-parenchyma",
        ),
        ("pneumothoraces", "chest_xray", "cxr/abnormal/pneumothorax@pleura"),  # a plural
        ("haemorrhage", "brain_mri", "brain/disease/intracranial-hemorrhage"),  # a British spelling
        ("ground glass opacities", "chest_ct", "ct/abnormal/ground-glass-opacity@pulmonary-parenchyma"),
        ("gallstones", "ultrasound", "us/abnormal/cholelithiasis@gallbladder"),
    ],
)
def test_report_phrasings_resolve(ontology, phrase, modality, entity_id):
    assert ontology.find(phrase, modality).id == entity_id


@pytest.mark.parametrize(
    ("phrase", "modality", "entity_id"),
    [
        ("left hydronephrosis", "ultrasound", "us/abnormal/hydronephrosis@kidneys"),
        ("right lower lobe nodule", "chest_ct", "ct/abnormal/solitary-pulmonary-nodule-and-mass@pulmonary-parenchyma"),
        ("left 6th-8th rib fractures", "chest_ct", "ct/abnormal/fracture"),
        ("right basilar atelectasis", "chest_xray", "cxr/abnormal/atelectasis@pulmonary-parenchyma"),
        # a bare name is the modality's region's where the family is shared
        ("lymphadenopathy", "abdominal_ct", "ct/abnormal/abdominal-lymphadenopathy"),
        ("lymphadenopathy", "chest_ct", "ct/abnormal/lymphadenopathy-within-the-mediastinum@mediastinum"),
        # names reports use for what the vocabulary has
        ("mediastinal main vascular structures", "chest_ct", "ct/anatomy/thoracic-arteries"),
        ("usual interstitial pneumonia pattern", "chest_ct", "ct/disease/interstitial-lung-disease"),
        ("bony lesions", "chest_ct", "ct/abnormal/bone-lesion@bones"),
        ("lumbar spine fracture", "abdominal_ct", "ct/abnormal/fracture"),
    ],
)
def test_a_finding_named_with_its_side_or_lobe_resolves(ontology, phrase, modality, entity_id):
    assert ontology.find(phrase, modality).id == entity_id


@pytest.mark.parametrize("phrase", ["left lung", "new nodule", "new enhancing lesions", "left ventricular enlargement"])
def test_a_part_of_a_structure_or_a_new_finding_does_not_resolve_to_the_whole(ontology, phrase):
    """ "Left lung clear" says nothing of the right lung; "no new nodules" nothing of the old ones."""
    modality = "brain_mri" if "enhancing" in phrase or "ventricular" in phrase else "chest_ct"
    with pytest.raises(KeyError):
        ontology.find(phrase, modality)


def test_lookups(ontology):
    effusion = ontology.find("pleural effusion", "chest_ct")
    assert effusion.id == "ct/abnormal/pleural-effusion@pleura" and ontology.anatomy_of(effusion).term == "pleura"
    assert ontology.find("cardiomegaly", "chest_xray").term == "cardiac chamber enlargement"
    assert ontology.family_of("abdominal_ct") == "CT" and ontology.family_of("US") == "US"
    with pytest.raises(KeyError):
        ontology.find("tracheal bronchus", "chest_ct")
    with pytest.raises(ValueError, match="no entity family"):
        ontology.family_of("pet")


def test_users_extend_the_vocabulary(tmp_path):
    extra = {
        "families": {
            "CT": {
                "modalities": ["chest_ct"],
                "entities": [
                    {
                        "id": "ct/abnormal/tracheal-bronchus@bronchi",
                        "level": "abnormal",
                        "name": "Tracheal bronchus in Bronchi",
                        "term": "tracheal bronchus",
                        "anatomy": "Bronchi",
                        "synonyms": ["pig bronchus"],
                    },
                    {
                        "id": "ct/abnormal/emphysema@pulmonary-parenchyma",
                        "level": "abnormal",
                        "name": "Emphysema in Pulmonary Parenchyma",
                        "synonyms": ["bullous change"],
                    },
                ],
            }
        }
    }
    (tmp_path / "extra.json").write_text(json.dumps(extra))
    ontology = Ontology.load(tmp_path / "extra.json")
    assert ontology.find("pig bronchus", "chest_ct").id == "ct/abnormal/tracheal-bronchus@bronchi"
    emphysema = ontology["ct/abnormal/emphysema@pulmonary-parenchyma"]
    assert "bullous change" in emphysema.synonyms and "emphysematous" in emphysema.synonyms


def test_entities_command(capsys):
    assert main(["entities", "--modality", "chest_ct", "--level", "disease", "--json", "--paper-only"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert len(listed) == 10 and all(e["family"] == "CT" for e in listed)
    assert main(["entities", "--modality", "brain_mri", "--paper-only"]) == 0
    assert "18 entities" in capsys.readouterr().out
    assert main(["entities", "--modality", "brain_mri"]) == 0
    assert int(capsys.readouterr().out.split()[-2]) > 18  # the shipped common findings
    # described and measured findings list as the extension format writes them
    assert main(["entities", "--modality", "abdominal_ct", "--json"]) == 0
    listed = {e["id"]: e for e in json.loads(capsys.readouterr().out)}
    spleen = listed["ct/abnormal/splenomegaly@spleen-splenic-parenchyma"]
    assert spleen["descriptions"] and {"subjects", "states", "normal_states"} <= set(spleen["descriptions"][0])
    assert spleen["measurements"] and spleen["measurements"][0]["abnormal_above"] > 0
