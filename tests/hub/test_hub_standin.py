"""The stand-in Hub (hub_standin.py) answers the real `huggingface_hub` and `transformers` clients: uploads (regular
and LFS), branches, downloads by branch and by commit, the Hub's typed errors, `from_pretrained` by repo id.

The clients run in subprocesses, since `huggingface_hub` reads `HF_ENDPOINT` when it is imported."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import torch
from hub_standin import StandInHub, run_client

BIG = 11 * 1024 * 1024  # over the Hub's 10 MiB: LFS whatever the file's name
LFS_BATCH = "/org/files.git/info/lfs/objects/batch"


@pytest.fixture
def hub(tmp_path):
    with StandInHub(tmp_path / "hub") as hub:
        yield hub


def write_folder(folder: Path, note: str, big: bytes) -> dict[str, bytes]:
    files = {"notes.txt": note.encode(), "meta.json": json.dumps({"note": note}).encode(), "weights.dat": big}
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return files


def read_tree(folder: str) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in Path(folder).rglob("*") if p.is_file()}


def test_upload_folder_to_main_and_a_branch_then_download_both(hub, tmp_path):
    big = os.urandom(BIG)
    v0 = write_folder(tmp_path / "v0", "first", big)
    v1 = write_folder(tmp_path / "v1", "second", big)
    out = run_client(
        hub,
        tmp_path / "hf_home",
        """
        from huggingface_hub import HfApi, hf_hub_download, snapshot_download

        api = HfApi()
        api.create_repo("org/files", private=True)
        api.create_repo("org/public")
        first = api.upload_folder(repo_id="org/files", folder_path=ARGS["v0"])
        api.create_branch("org/files", branch="v1")
        second = api.upload_folder(repo_id="org/files", folder_path=ARGS["v1"], revision="v1")
        out = {"commits": [first.oid, second.oid], "private": [api.model_info(r).private for r in ARGS["repos"]]}
        for rev in ("main", "v1"):
            files = {name: hf_hub_download("org/files", name, revision=rev) for name in ARGS["names"]}
            out[rev] = {"files": files, "snapshot": snapshot_download("org/files", revision=rev)}
        out["listed"] = api.list_repo_files("org/files", revision="v1")
        print(json.dumps(out))
        """,
        v0=str(tmp_path / "v0"),
        v1=str(tmp_path / "v1"),
        names=sorted(v0),
        repos=["org/files", "org/public"],
    )
    assert hub.private("org/files") and not hub.private("org/public")
    assert out["private"] == [True, False]
    first, second = out["commits"]
    assert hub.refs("org/files") == {"main": first, "v1": second} and first != second
    assert sorted(out["listed"]) == sorted([".gitattributes", *v0])
    for rev, expected in (("main", v0), ("v1", v1)):
        assert {name: Path(path).read_bytes() for name, path in out[rev]["files"].items()} == expected
        snapshot = read_tree(out[rev]["snapshot"])
        assert snapshot.pop(".gitattributes") and snapshot == expected
        assert {k: v for k, v in hub.files("org/files", rev).items() if k != ".gitattributes"} == expected
    assert hub.files("org/files", first) == hub.files("org/files", "main")  # a commit sha is a revision too
    # The big file (10+ MiB, a name no LFS pattern matches) took the LFS path: a batch request per upload and
    # one PUT of its content, since the second batch answer says the object is already stored.
    assert hub.requests.count(("POST", LFS_BATCH)) == 2
    oid = hashlib.sha256(big).hexdigest()
    assert [path for method, path in hub.requests if method == "PUT"] == [f"/_lfs/models/org/files/{oid}"]
    commits = [path for method, path in hub.requests if method == "POST" and "/commit/" in path]
    assert commits == ["/api/models/org/files/commit/main", "/api/models/org/files/commit/v1"]


def test_errors_come_back_as_the_clients_typed_errors(hub, tmp_path):
    out = run_client(
        hub,
        tmp_path / "hf_home",
        """
        from huggingface_hub import HfApi, hf_hub_download

        def raised(call, *args, **kwargs):
            try:
                call(*args, **kwargs)
            except Exception as error:
                return [cls.__name__ for cls in type(error).__mro__]
            return None

        api = HfApi()
        api.create_repo("org/x", private=True)
        api.upload_file(path_or_fileobj=b"hi", path_in_repo="a.txt", repo_id="org/x")
        print(json.dumps({
            "missing_file": raised(hf_hub_download, "org/x", "absent.txt"),
            "unknown_repo": raised(hf_hub_download, "org/nope", "config.json"),
            "unknown_revision": raised(hf_hub_download, "org/x", "a.txt", revision="v9"),
            "commit_to_unknown_branch": raised(api.upload_file, path_or_fileobj=b"x", path_in_repo="b.txt",
                                               repo_id="org/x", revision="v9"),
            "private_without_token": raised(hf_hub_download, "org/x", "a.txt", token=False),
            "create_twice": raised(api.create_repo, "org/x"),
            "create_twice_exist_ok": raised(api.create_repo, "org/x", exist_ok=True),
            "exists": [api.file_exists("org/x", "a.txt"), api.file_exists("org/x", "absent.txt"),
                       api.revision_exists("org/x", "main"), api.revision_exists("org/x", "v9"),
                       api.repo_exists("org/x"), api.repo_exists("org/nope")],
        }))
        """,
    )
    assert "EntryNotFoundError" in out["missing_file"]
    assert "RepositoryNotFoundError" in out["unknown_repo"]
    assert "RevisionNotFoundError" in out["unknown_revision"]
    assert "RevisionNotFoundError" in out["commit_to_unknown_branch"]  # the Hub commits onto existing branches
    assert "RepositoryNotFoundError" in out["private_without_token"]
    assert "HfHubHTTPError" in out["create_twice"] and out["create_twice_exist_ok"] is None
    assert out["exists"] == [True, False, True, False, True, False]
    assert set(hub.files("org/x")) == {".gitattributes", "a.txt"}


def test_dataset_repo_and_pull_request(hub, tmp_path):
    out = run_client(
        hub,
        tmp_path / "hf_home",
        """
        from huggingface_hub import CommitOperationAdd, HfApi, hf_hub_download

        api = HfApi()
        api.create_repo("org/data", repo_type="dataset")
        api.upload_file(path_or_fileobj=b"PAR1 rows", path_in_repo="data/train.parquet", repo_id="org/data",
                        repo_type="dataset")
        api.upload_file(path_or_fileobj=b"---\\nlicense: mit\\n---\\n# Data\\n", path_in_repo="README.md",
                        repo_id="org/data", repo_type="dataset")
        pr = api.create_commit("org/data", [CommitOperationAdd("data/extra.txt", b"more")], commit_message="More",
                               repo_type="dataset", create_pr=True)
        path = hf_hub_download("org/data", "data/extra.txt", repo_type="dataset", revision=pr.pr_revision)
        tree = [(f.path, f.lfs is not None) for f in api.list_repo_tree("org/data", "data", repo_type="dataset")]
        print(json.dumps({"pr": pr.pr_revision, "extra": open(path).read(), "tree": tree}))
        """,
    )
    assert out["pr"] == "refs/pr/1" and out["extra"] == "more"
    assert out["tree"] == [["data/train.parquet", True]]  # LFS by name; the PR's file is not on main
    assert hub.files("org/data", "refs/pr/1", "dataset")["data/extra.txt"] == b"more"
    assert "data/extra.txt" not in hub.files("org/data", repo_type="dataset")
    assert ("POST", "/datasets/org/data.git/info/lfs/objects/batch") in hub.requests
    assert ("POST", "/api/validate-yaml") in hub.requests  # a README.md commit has its metadata checked first


REMOTE_CONFIG = """from transformers import PretrainedConfig


class TinyConfig(PretrainedConfig):
    model_type = "tiny_standin"

    def __init__(self, width=4, **kwargs):
        self.width = width
        super().__init__(**kwargs)
"""
REMOTE_MODEL = """import torch
from transformers import PreTrainedModel

from .configuration_tiny import TinyConfig


class TinyModel(PreTrainedModel):
    config_class = TinyConfig

    def __init__(self, config):
        super().__init__(config)
        self.proj = torch.nn.Linear(config.width, config.width)
        self.post_init()
"""


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """One transformers subprocess: a BertModel pushed onto branch v1 and a remote-code model onto main of a
    private repo, each loaded back by repo id; (hub, originals, the child's answers, its state dicts)."""
    from safetensors.torch import save_file
    from transformers import BertConfig, BertModel

    tmp = tmp_path_factory.mktemp("transformers")
    torch.manual_seed(0)
    config = BertConfig(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, vocab_size=100
    )
    bert = BertModel(config).eval()
    bert.save_pretrained(tmp / "bert")
    remote = tmp / "remote"
    remote.mkdir()
    (remote / "configuration_tiny.py").write_text(REMOTE_CONFIG)
    (remote / "modeling_tiny.py").write_text(REMOTE_MODEL)
    auto_map = {"AutoConfig": "configuration_tiny.TinyConfig", "AutoModel": "modeling_tiny.TinyModel"}
    remote_config = {"model_type": "tiny_standin", "width": 4, "architectures": ["TinyModel"], "auto_map": auto_map}
    (remote / "config.json").write_text(json.dumps(remote_config))
    remote_state = {"proj.weight": torch.randn(4, 4), "proj.bias": torch.randn(4)}
    save_file(remote_state, remote / "model.safetensors", metadata={"format": "pt"})
    with StandInHub(tmp / "hub") as hub:
        out = run_client(
            hub,
            tmp / "hf_home",
            """
            import torch
            from huggingface_hub import HfApi
            from transformers import AutoConfig, AutoModel

            api = HfApi()
            api.create_repo("org/bert")
            api.create_branch("org/bert", branch="v1")
            api.upload_folder(repo_id="org/bert", folder_path=ARGS["bert"], revision="v1")
            config = AutoConfig.from_pretrained("org/bert", revision="v1")
            model = AutoModel.from_pretrained("org/bert", revision="v1")
            torch.save(model.state_dict(), ARGS["out"] + "/bert.pt")
            try:  # main holds only .gitattributes
                AutoConfig.from_pretrained("org/bert")
                main_error = None
            except (OSError, ValueError) as error:  # transformers: ValueError for a repo without config.json
                main_error = type(error).__name__
            api.create_repo("org/remote", private=True)
            sha = api.upload_folder(repo_id="org/remote", folder_path=ARGS["remote"]).oid
            remote = AutoModel.from_pretrained("org/remote", revision=sha, trust_remote_code=True)
            torch.save(remote.state_dict(), ARGS["out"] + "/remote.pt")
            print(json.dumps({
                "config": {"model_type": config.model_type, "hidden_size": config.hidden_size},
                "model_class": type(model).__name__,
                "main_error": main_error,
                "remote_class": type(remote).__module__ + "." + type(remote).__name__,
                "remote_sha": sha,
            }))
            """,
            bert=str(tmp / "bert"),
            remote=str(remote),
            out=str(tmp),
        )
    states = {name: torch.load(tmp / f"{name}.pt", weights_only=True) for name in ("bert", "remote")}
    return hub, {"bert": bert.state_dict(), "remote": remote_state}, out, states


def test_autoconfig_from_pretrained_by_repo_id_and_branch(loaded):
    _, _, out, _ = loaded
    assert out["config"] == {"model_type": "bert", "hidden_size": 16}
    assert out["main_error"] is not None  # the branch, not main, holds the model


@pytest.mark.parametrize("name", ["bert", "remote"])
def test_automodel_from_pretrained_gives_the_original_weights(loaded, name):
    _, originals, _, states = loaded
    assert states[name].keys() == originals[name].keys()
    for key, value in originals[name].items():
        assert torch.equal(states[name][key], value), key


def test_trust_remote_code_downloads_the_code_at_the_commit(loaded):
    hub, _, out, _ = loaded
    assert out["model_class"] == "BertModel"
    assert out["remote_class"].startswith("transformers_modules.") and out["remote_class"].endswith(".TinyModel")
    downloaded = {path for method, path in hub.requests if method == "GET"}
    for name in ("configuration_tiny.py", "modeling_tiny.py", "model.safetensors"):
        assert f"/org/remote/resolve/{out['remote_sha']}/{name}" in downloaded
