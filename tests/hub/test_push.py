"""`medreco push` through the real `huggingface_hub` client against the stand-in Hub on the loopback
(hub_standin.py): create the repository and a branch, upload the weights, then load the model by
repo id and revision in a process that never imports medreco."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch
from hub_standin import StandInHub, run_client
from safetensors.torch import load_file
from transformers import AutoModelForImageTextToText

import medreco
from medreco.hub import Score, export_for_remote_code, model_card, write_model_card


def test_push_then_load_by_repo_id_and_revision_without_medreco(tmp_path):
    model = medreco.create_model("reranker", "tiny")
    folder = export_for_remote_code(model, tmp_path / "reranker")
    training = {"reranker": {"steps": 2, "first_loss": 0.7, "last_loss": 0.6}}
    write_model_card(model_card("reranker", training, [Score("retrieval", "recall@1", 0.4, (0.3, 0.5), 99)]), folder)
    (folder / "checkpoint-5").mkdir()  # a training checkpoint left in the folder stays home
    (folder / "checkpoint-5" / "optimizer.pt").write_bytes(b"state")
    with StandInHub(tmp_path / "hub") as hub:
        pushed = run_client(
            hub,
            tmp_path / "home",
            """
            from medreco.cli import main
            repo = ["--repo-id", "radiology-lab/reranker", "--private", "--revision", "v1"]
            code = main(["push", ARGS["folder"], *repo])
            print(json.dumps({"code": code}))
            """,
            folder=str(folder),
        )
        assert pushed["code"] == 0 and hub.private("radiology-lab/reranker")
        files = hub.files("radiology-lab/reranker", revision="v1")
        assert {"model.safetensors", "config.json", "README.md", "modeling_reranker.py"} <= set(files)
        assert not any(name.startswith("checkpoint-") for name in files)
        assert "model.safetensors" not in hub.files("radiology-lab/reranker")  # main is untouched
        card = files["README.md"].decode()
        assert 'from_pretrained("radiology-lab/reranker", trust_remote_code=True)' in card  # its code runs as read
        assert (
            'from_pretrained("medreco-reranker"' in (folder / "README.md").read_text()
        )  # the folder's card as written
        loaded = run_client(
            hub,
            tmp_path / "home",
            without_medreco=True,
            code="""
            import torch
            from huggingface_hub import ModelCard, hf_hub_download
            from safetensors.torch import save_file
            from transformers import AutoModel

            repo = "radiology-lab/reranker"
            model = AutoModel.from_pretrained(repo, revision="v1", trust_remote_code=True)
            save_file(model.state_dict(), ARGS["out"])
            card = ModelCard.load(hf_hub_download(repo, "README.md", revision="v1")).data
            result = card.eval_results[0]
            print(json.dumps({"class": type(model).__name__, "license": card.license, "metric": result.metric_name,
                              "medreco": any(m == "medreco" or m.startswith("medreco.") for m in sys.modules)}))
            """,
            out=str(tmp_path / "downloaded.safetensors"),
        )
    assert loaded["class"] == "MedReCoReranker" and not loaded["medreco"]
    assert loaded["license"] == "apache-2.0" and "95% CI 0.3000-0.5000" in loaded["metric"]
    downloaded = load_file(tmp_path / "downloaded.safetensors")
    assert all(torch.equal(downloaded[name], tensor) for name, tensor in model.state_dict().items())


def test_push_refuses_what_is_not_a_model_and_a_hub_that_is_not_there(tmp_path, capsys):
    from medreco.cli import main

    assert main(["push", str(tmp_path), "--repo-id", "lab/model"]) == 2
    assert "not a saved model or adapter (no config.json or adapter_config.json)" in capsys.readouterr().err
    medreco.create_model("reranker", "tiny").save_pretrained(tmp_path / "model")
    assert main(["push", str(tmp_path / "model"), "--repo-id", "no-organisation"]) == 2
    assert "ORG/NAME" in capsys.readouterr().err
    # a Hub nobody answers (a closed port on the loopback): one line, exit code 2
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT="http://127.0.0.1:9", HF_HUB_OFFLINE="0", HF_TOKEN="hf_x", HF_HOME=str(tmp_path / "home"))
    command = [sys.executable, "-m", "medreco", "push", str(tmp_path / "model"), "--repo-id", "lab/model"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    error = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 2 and error.startswith(
        "medreco push: error: lab/model: the Hub did not take the upload"
    )


def test_a_second_push_replaces_the_first_and_never_makes_a_public_repository_private_silently(tmp_path):
    folder = tmp_path / "model"
    medreco.create_model("reranker", "tiny").save_pretrained(folder)
    (folder / "training_config.json").write_text('{"data": {"mined_dir": "/home/someone/archive"}}')
    (folder / "old-notes.txt").write_text("from the first push")
    push = """
        from medreco.hub import push_to_hub
        try:
            push_to_hub(ARGS["folder"], "lab/model", private=ARGS["private"])
            print(json.dumps({"error": None}))
        except ValueError as error:
            print(json.dumps({"error": str(error)}))
        """
    with StandInHub(tmp_path / "hub") as hub:
        assert run_client(hub, tmp_path / "home", push, folder=str(folder), private=False)["error"] is None
        first = hub.files("lab/model")
        assert "old-notes.txt" in first and "training_config.json" not in first  # local paths stay home
        (folder / "old-notes.txt").unlink()
        refused = run_client(hub, tmp_path / "home", push, folder=str(folder), private=True)["error"]
        assert "exists and is public" in refused and not hub.private("lab/model")
        assert run_client(hub, tmp_path / "home", push, folder=str(folder), private=False)["error"] is None
        assert "old-notes.txt" not in hub.files("lab/model") and "model.safetensors" in hub.files("lab/model")


def test_a_lora_adapter_goes_up_alone_and_loads_onto_its_base_without_medreco(tmp_path):
    from peft import LoraConfig, get_peft_model

    base_folder = export_for_remote_code(medreco.create_model("vlm", "tiny"), tmp_path / "base")
    base = AutoModelForImageTextToText.from_pretrained(base_folder).eval()  # PEFT records this local path
    lora = LoraConfig(r=4, target_modules=r".*language_model.*\.(q_proj|v_proj)", init_lora_weights=False)
    adapted = get_peft_model(base, lora)
    adapter_folder = tmp_path / "adapter"
    adapted.save_pretrained(adapter_folder)
    assert str(base_folder) in (adapter_folder / "adapter_config.json").read_text()
    (adapter_folder / "training_args.bin").write_bytes(b"pickled arguments with local paths")
    adapter = load_file(adapter_folder / "adapter_model.safetensors")
    with StandInHub(tmp_path / "hub") as hub:
        pushed = run_client(
            hub,
            tmp_path / "home",
            """
            from medreco.cli import main
            repo = ["--repo-id", "lab/vlm-lora", "--revision", "r1", "--base-model", "lab/vlm-base"]
            print(json.dumps({"code": main(["push", ARGS["folder"], *repo])}))
            """,
            folder=str(adapter_folder),
        )
        files = hub.files("lab/vlm-lora", revision="r1")
        assert pushed["code"] == 0 and {"adapter_config.json", "adapter_model.safetensors"} <= set(files)
        assert "model.safetensors" not in files and "training_args.bin" not in files
        for name in ("adapter_config.json", "README.md"):  # PEFT wrote the local base path into both
            text = files[name].decode()
            assert str(tmp_path) not in text and "lab/vlm-base" in text, name
        assert str(base_folder) in (adapter_folder / "adapter_config.json").read_text()  # the folder is untouched
        assert not list(tmp_path.glob(".adapter.push"))  # the staged copy is gone
        loaded = run_client(
            hub,
            tmp_path / "home",
            without_medreco=True,
            code="""
            from peft import PeftModel
            from safetensors.torch import save_file
            from transformers import AutoModelForImageTextToText

            model = AutoModelForImageTextToText.from_pretrained(ARGS["base"], trust_remote_code=True)
            model = PeftModel.from_pretrained(model, "lab/vlm-lora", revision="r1")
            lora = {name: p.detach() for name, p in model.named_parameters() if "lora_" in name}
            save_file(lora, ARGS["out"])
            print(json.dumps({"count": len(lora)}))
            """,
            base=str(base_folder),
            out=str(tmp_path / "lora.safetensors"),
        )
    assert loaded["count"] == len(adapter) > 0
    downloaded = sorted(load_file(tmp_path / "lora.safetensors").values(), key=lambda t: (t.shape, t.sum().item()))
    saved = sorted(adapter.values(), key=lambda t: (t.shape, t.sum().item()))
    assert all(torch.equal(a, b) for a, b in zip(downloaded, saved, strict=True))


def test_save_pretrained_with_push_to_hub_uploads_the_processors_code_too(tmp_path):
    with StandInHub(tmp_path / "hub") as hub:
        run_client(
            hub,
            tmp_path / "home",
            """
            from medreco.processing import MedReCoImageProcessor
            MedReCoImageProcessor().save_pretrained(ARGS["folder"], push_to_hub=True, repo_id="lab/image-processor")
            print(json.dumps({}))
            """,
            folder=str(tmp_path / "processor"),
        )
        files = hub.files("lab/image-processor")
    config = json.loads(files["preprocessor_config.json"])
    assert config["auto_map"] == {"AutoImageProcessor": "image_processing_medreco.MedReCoImageProcessor"}
    assert {"image_processing_medreco.py", "readers.py", "readers_dicom.py", "readers_base.py", "errors.py"} <= set(
        files
    )
    assert (tmp_path / "processor" / "image_processing_medreco.py").is_file()  # the local folder has it too


def test_only_the_cards_own_placeholder_is_pointed_at_the_repository(tmp_path):
    from medreco.hub.push import _point_the_card_at

    card = tmp_path / "README.md"
    other = 'AutoTokenizer.from_pretrained("Qwen/Qwen2.5-7B")\n'  # a name the user wrote: left as it is
    card.write_text('AutoModel.from_pretrained("medreco-vlm")\n' + other)
    _point_the_card_at(tmp_path, "lab/vlm")
    assert card.read_text() == 'AutoModel.from_pretrained("lab/vlm")\n' + other
