"""The examples/ scripts run as their README says, on tiny Hub-ready folders, in processes where
`import medreco` fails: TRL's own `trl sft` (full and LoRA) through examples/trl_sft.sh, the
SFTTrainer script, and the retrieval quickstart. Their outputs reload and generate."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from hub_ready import write_png
from medreco.data.phantom.dicom import DicomIdentity, write_radiograph
from without_medreco import run, run_python

EXAMPLES = Path(__file__).parents[2] / "examples"
SMOKE = ["--max_steps", "2", "--learning_rate", "1e-3", "--save_strategy", "no"]


def conversational_image_dataset(folder: Path, rows: int = 8) -> Path:
    """A local dataset in TRL's conversational image format (examples/README.md): `messages` with
    image placeholders and an `images` column of PIL images, as parquet."""
    from datasets import Dataset
    from PIL import Image

    rng = np.random.default_rng(0)
    question = [{"type": "image"}, {"type": "image"}, {"type": "text", "text": "Has the pleural effusion changed?"}]
    answers = ["It has increased.", "It is unchanged."]
    data = {
        "messages": [
            [
                {"role": "user", "content": question},
                {"role": "assistant", "content": [{"type": "text", "text": answers[i % 2]}]},
            ]
            for i in range(rows)
        ],
        "images": [
            [Image.fromarray((rng.random((48, 48)) * 255).astype("uint8")).convert("RGB") for _ in range(2)]
            for _ in range(rows)
        ],
    }
    folder.mkdir(parents=True, exist_ok=True)
    Dataset.from_dict(data).to_parquet(folder / "train.parquet")
    return folder


RELOAD_AND_GENERATE = """
import torch
from safetensors.torch import load_file
from transformers import AutoModelForImageTextToText, AutoProcessor

base, out = ARGS["base"], ARGS["out"]
processor = AutoProcessor.from_pretrained(out, trust_remote_code=True)
if ARGS["adapter"]:
    from peft import PeftModel

    model = AutoModelForImageTextToText.from_pretrained(base, trust_remote_code=True)
    model = PeftModel.from_pretrained(model, out).eval()
    adapter = load_file(f"{out}/adapter_model.safetensors")
    trained = [name for name, tensor in adapter.items() if name.endswith("lora_B.weight") and tensor.abs().sum() > 0]
    vision = [name for name in adapter if "vision_tower" in name]
else:
    model = AutoModelForImageTextToText.from_pretrained(out, trust_remote_code=True).eval()
    before, after = load_file(f"{base}/model.safetensors"), load_file(f"{out}/model.safetensors")
    trained = [name for name in before if "language_model" in name and not torch.equal(before[name], after[name])]
    vision = []
image = {"type": "image", "image": ARGS["png"]}
messages = [{"role": "user", "content": [image, image, {"type": "text", "text": "Has the pleural effusion changed?"}]}]
inputs = processor.apply_chat_template(messages, tokenize=True, return_dict=True, add_generation_prompt=True,
                                       return_tensors="pt")
generated = model.generate(**inputs, max_new_tokens=3, do_sample=False)
print(json.dumps({"trained": len(trained), "vision_adapters": len(vision),
                  "new": generated.shape[1] - inputs["input_ids"].shape[1], "model": type(model).__name__}))
"""


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_trl_sft_sh_runs_trls_own_script_and_the_output_reloads_and_generates(hub_ready, tmp_path, lora):
    data, out = conversational_image_dataset(tmp_path / "dataset"), tmp_path / "sft"
    lora_arguments = ["--use_peft", "--lora_target_modules", "q_proj", "k_proj", "v_proj", "o_proj"] if lora else []
    script = ["bash", str(EXAMPLES / "trl_sft.sh"), "--use_cpu", *SMOKE, *lora_arguments]
    assert Path(sys.executable).parent.joinpath("trl").is_file()  # the console script of the installed trl
    run(script, tmp_path, env={"MODEL": str(hub_ready["vlm"]), "DATA": str(data), "OUT": str(out)})
    png = write_png(tmp_path / "scan.png")
    result = run_python(
        RELOAD_AND_GENERATE, tmp_path, base=str(hub_ready["vlm"]), out=str(out), adapter=lora, png=str(png)
    )
    assert result["trained"] > 0 and 1 <= result["new"] <= 3
    if lora:  # the adapter alone, no copy of the base weights
        assert result["model"].startswith("PeftModel") and not (out / "model.safetensors").exists()
        assert result["vision_adapters"] > 0  # as documented: the vision encoder shares the q/k/v/o names
    else:
        assert result["model"] == "MedReCoForConditionalGeneration"


def test_sft_python_trains_lora_adapters_on_the_language_model_only_and_saves_them_alone(hub_ready, tmp_path):
    data, out = conversational_image_dataset(tmp_path / "dataset"), tmp_path / "sft"
    arguments = [str(hub_ready["vlm"]), str(data), str(out), "--lora", "--max-steps", "2", "--learning-rate", "1e-3"]
    run([sys.executable, str(EXAMPLES / "sft_python.py"), *arguments, "--cpu"], tmp_path)
    assert json.loads((out / "adapter_config.json").read_text())["peft_type"] == "LORA"
    png = write_png(tmp_path / "scan.png")
    result = run_python(
        RELOAD_AND_GENERATE, tmp_path, base=str(hub_ready["vlm"]), out=str(out), adapter=True, png=str(png)
    )
    assert result["trained"] > 0 and result["vision_adapters"] == 0 and 1 <= result["new"] <= 3


def test_retrieval_quickstart_ranks_dicom_and_png_references(hub_ready, tmp_path):
    query = write_radiograph(np.random.default_rng(0).random((60, 50)), (0.2, 0.2), tmp_path / "q.dcm", DicomIdentity())
    references = [write_png(tmp_path / f"reference-{i}.png", seed=i) for i in range(3)]
    for entity in (["--entity", "pleural effusion"], []):
        command = [sys.executable, str(EXAMPLES / "retrieval_quickstart.py"), str(hub_ready["retrieval"]), str(query)]
        output = run([*command, *map(str, references), *entity], tmp_path).stdout
        ranked = [line for line in output.splitlines() if line.strip()[:2].rstrip(".").isdigit()]
        assert len(ranked) == 3 and {r.name for r in references} == {line.rsplit("/", 1)[-1] for line in ranked}
        scores = [float(line.split()[1]) for line in ranked]
        assert scores == sorted(scores, reverse=True) and all(-1.0 <= s <= 1.0 for s in scores)
