import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModel, AutoModelForImageTextToText

import medreco
from conftest import example_inputs, main_output, tiny_model
from medreco.hub import export_for_remote_code
from medreco.modeling import AUTO_REGISTRATIONS, CheckpointMismatchError

AUTO_CLASS = {"vision": AutoModel, "retrieval": AutoModel, "reranker": AutoModel, "vlm": AutoModelForImageTextToText}


def test_model_types_are_ours_and_registered():
    types = [model_type for model_type, _, _ in AUTO_REGISTRATIONS]
    assert len(set(types)) == len(types) and all(t.startswith("medreco") for t in types)
    for model_type, config_class, models in AUTO_REGISTRATIONS:
        assert config_class.model_type == model_type
        assert type(AutoConfig.for_model(model_type)) is config_class
        for auto_class, model_class in models:
            assert auto_class._model_mapping[config_class] is model_class


@pytest.mark.parametrize("family", medreco.FAMILIES)
def test_save_and_auto_load_round_trip_in_safetensors(family, tmp_path):
    model = tiny_model(family)
    inputs = example_inputs(model)
    model.save_pretrained(tmp_path)
    files = {p.name for p in tmp_path.iterdir()}
    assert "model.safetensors" in files and "config.json" in files
    assert not any(name.endswith((".bin", ".pt", ".pkl")) for name in files)
    loaded = AUTO_CLASS[family].from_pretrained(tmp_path).eval()
    assert type(loaded) is type(model)
    with torch.no_grad():
        torch.testing.assert_close(main_output(loaded, loaded(**inputs)), main_output(model, model(**inputs)))


@pytest.mark.parametrize("family", medreco.FAMILIES)
def test_dtype_argument(family, tmp_path):
    tiny_model(family).save_pretrained(tmp_path)
    loaded = AUTO_CLASS[family].from_pretrained(tmp_path, dtype=torch.bfloat16).eval()
    assert {p.dtype for p in loaded.parameters()} == {torch.bfloat16}
    inputs = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v) for k, v in example_inputs(loaded).items()}
    with torch.no_grad():
        output = main_output(loaded, loaded(**inputs))
    # retrieval embeddings are L2-normalised in float32 whatever the weights: similarities need the precision
    assert output.dtype == (torch.float32 if family == "retrieval" else torch.bfloat16)


def test_base_vlm_loads_through_automodel(tmp_path):
    tiny_model("vlm").save_pretrained(tmp_path)
    base = AutoModel.from_pretrained(tmp_path)
    assert type(base).__name__ == "MedReCoVLMModel"


@pytest.mark.parametrize("change", ["missing", "unexpected", "mismatched"])
def test_checkpoint_mismatch_fails_loudly(change, tmp_path):
    tiny_model("retrieval").save_pretrained(tmp_path)
    weights_path = tmp_path / "model.safetensors"
    weights = load_file(weights_path)
    if change == "missing":
        del weights["conditioner.cls_query"]
    elif change == "unexpected":
        weights["conditioner.leftover.weight"] = torch.zeros(2)
    else:
        weights["conditioner.cls_query"] = torch.zeros(1, 7)
    save_file(weights, weights_path, metadata={"format": "pt"})
    with pytest.raises(CheckpointMismatchError, match=r"cls_query|leftover|shapes"):
        AutoModel.from_pretrained(tmp_path)
    if change != "mismatched":
        _, info = AutoModel.from_pretrained(tmp_path, strict=False, output_loading_info=True)
        assert info["missing_keys"] or info["unexpected_keys"]


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
