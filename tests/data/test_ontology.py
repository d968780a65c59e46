import json

import pytest

from medreco.cli import main
from medreco.data.reports.ontology import Ontology


@pytest.fixture(scope="module")
def ontology():
    return Ontology.load()


def test_vocabulary_matches_appendix_s2(ontology):
    assert [len(ontology.entities(level=level)) for level in ("anatomy", "abnormal", "disease")] == [42, 69, 28]
    assert {family: len(ontology.entities(family)) for family in ontology.families} == {
        "CXR": 53,
        "CT": 51,
        "BRAIN": 18,
        "US": 17,
    }
    assert all(e.anatomy for e in ontology.entities(level="abnormal"))
    assert len({e.id for e in ontology.entities()}) == len(ontology)


def test_lookups(ontology):
    effusion = ontology.find("pleural effusion", "chest_ct")
    assert effusion.id == "ct/abnormal/pleural-effusion@pleura" and ontology.anatomy_of(effusion).term == "pleura"
    assert ontology.find("cardiomegaly", "chest_xray").term == "cardiac chamber enlargement"
    assert ontology.family_of("abdominal_ct") == "CT" and ontology.family_of("US") == "US"
    with pytest.raises(KeyError):
        ontology.find("azygos fissure", "chest_ct")
    with pytest.raises(ValueError, match="no entity family"):
        ontology.family_of("pet")


def test_users_extend_the_vocabulary(tmp_path):
    extra = {
        "families": {
            "CT": {
                "modalities": ["chest_ct"],
                "entities": [
                    {
                        "id": "ct/abnormal/azygos-fissure@pleura",
                        "level": "abnormal",
                        "name": "Azygos fissure in Pleura",
                        "term": "azygos fissure",
                        "anatomy": "Pleura",
                        "synonyms": ["azygos lobe"],
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
    assert ontology.find("azygos lobe", "chest_ct").id == "ct/abnormal/azygos-fissure@pleura"
    emphysema = ontology["ct/abnormal/emphysema@pulmonary-parenchyma"]
    assert "bullous change" in emphysema.synonyms and "emphysematous" in emphysema.synonyms


def test_entities_command(capsys):
    assert main(["entities", "--modality", "chest_ct", "--level", "disease", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert len(listed) == 10 and all(e["family"] == "CT" for e in listed)
    assert main(["entities", "--modality", "brain_mri"]) == 0
    assert "18 entities" in capsys.readouterr().out
