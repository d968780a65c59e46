import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig

import medreco
from conftest import example_inputs, main_output, tiny_model
from medreco.hub import export_for_remote_code
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


@pytest.mark.parametrize("family", ["retrieval", "vlm"])
def test_export_loads_with_trust_remote_code_without_medreco(family, tmp_path):
    model = tiny_model(family)
    inputs = example_inputs(model)
    export_for_remote_code(model, tmp_path / "export")
    config = json.loads((tmp_path / "export" / "config.json").read_text())
    assert "AutoConfig" in config["auto_map"]
    torch.save({k: v for k, v in inputs.items()}, tmp_path / "inputs.pt")
    with torch.no_grad():
        expected = main_output(model, model(**inputs))
    auto = "AutoModelForImageTextToText" if family == "vlm" else "AutoModel"
    script = textwrap.dedent(f"""
        import sys, torch
        sys.modules["medreco"] = None  # medreco must not be importable here
        import transformers
        model = transformers.{auto}.from_pretrained({str(tmp_path / "export")!r}, trust_remote_code=True).eval()
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        inputs = torch.load({str(tmp_path / "inputs.pt")!r}, weights_only=True)
        with torch.no_grad():
            out = model(**inputs)
        value = out.logits if getattr(out, "logits", None) is not None else out.image_embeds
        torch.save(value, {str(tmp_path / "out.pt")!r})
    """)
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    torch.testing.assert_close(torch.load(tmp_path / "out.pt", weights_only=True), expected)
