"""`medreco push` through the real `huggingface_hub` client against the stand-in Hub on the loopback
(hub_standin.py): create the repository and a branch, upload the weights, then load the model by
repo id and revision in a process that never imports medreco."""

from __future__ import annotations

import torch
from hub_standin import StandInHub, run_client
from safetensors.torch import load_file

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
        loaded = run_client(
            hub,
            tmp_path / "home",
            """
            import builtins
            real_import = builtins.__import__

            def no_medreco(name, *args, **kwargs):
                if name == "medreco" or name.startswith("medreco."):
                    raise ImportError("medreco is not installed here")
                return real_import(name, *args, **kwargs)

            builtins.__import__ = no_medreco
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
    assert "not a saved model (no config.json)" in capsys.readouterr().err
    medreco.create_model("reranker", "tiny").save_pretrained(tmp_path / "model")
    assert main(["push", str(tmp_path / "model"), "--repo-id", "no-organisation"]) == 2
    assert "ORG/NAME" in capsys.readouterr().err
    assert main(["push", str(tmp_path / "model"), "--repo-id", "lab/model"]) == 2  # the tests run offline
    error = capsys.readouterr().err.strip()
    assert error.startswith("medreco push: error: lab/model: the Hub did not take the upload") and "\n" not in error
