import json
from pathlib import Path

import torch
from transformers import AutoConfig

import medreco
from conftest import tiny_model
from medreco.factory import family_of
from medreco.modeling import AUTO_REGISTRATIONS

# Each family's save/load round trip, strict loading, Auto classes and dtype: the battery of
# test_modeling_common.py, run by the tester of each family (test_vision.py, ...).


def test_model_types_are_ours_and_registered():
    types = [model_type for model_type, _, _ in AUTO_REGISTRATIONS]
    assert len(set(types)) == len(types) and all(t.startswith("medreco") for t in types)
    for model_type, config_class, models in AUTO_REGISTRATIONS:
        assert config_class.model_type == model_type
        assert type(AutoConfig.for_model(model_type)) is config_class
        for auto_class, model_class in models:
            assert auto_class._model_mapping[config_class] is model_class


def test_vlm_takes_the_stage1_vision_encoder():
    retrieval, vlm = tiny_model("retrieval"), tiny_model("vlm")
    vlm.load_vision_tower(retrieval.vision_model)
    for (name, a), (_, b) in zip(retrieval.vision_model.state_dict().items(), vlm.vision_tower.state_dict().items()):
        torch.testing.assert_close(a, b, msg=name)
    assert not any(p.requires_grad for p in vlm.vision_tower.parameters())


def test_modeling_folder_is_self_contained():
    folder = Path(medreco.modeling.__file__).parent
    for source in folder.glob("*.py"):
        text = source.read_text()
        assert "from medreco" not in text and "import medreco" not in text and "from .." not in text, source.name


def test_save_pretrained_writes_the_code_and_a_complete_auto_map(tmp_path):
    """Loading without medreco is tested on every family in tests/hub/test_remote_code.py."""
    for _, config_class, models in AUTO_REGISTRATIONS:
        family = family_of(config_class())
        tiny_model(family).save_pretrained(tmp_path / family)
        auto_map = json.loads((tmp_path / family / "config.json").read_text())["auto_map"]
        expected = {"AutoConfig": config_class, **{auto.__name__: model for auto, model in models}}
        assert auto_map == {name: f"{c.__module__.rsplit('.', 1)[-1]}.{c.__name__}" for name, c in expected.items()}
        assert all((tmp_path / family / f"{target.split('.')[0]}.py").is_file() for target in auto_map.values())
