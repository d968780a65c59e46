"""A stand-in for the Hugging Face Hub's HTTP API, on the loopback, for tests that must not touch the network.

It implements only what `huggingface_hub`'s upload and download paths and `transformers`' `from_pretrained` use:
`create_repo`, `create_branch`, `upload_folder`/`create_commit` (preupload, the LFS batch API with basic
transfer, the NDJSON commit, optional pull requests), `repo_info`/`model_info`/`dataset_info`, `list_repo_tree`,
`hf_hub_download`/`snapshot_download` (`/resolve/`), README metadata validation and `whoami`. It is a test double,
not a Hub: no Xet, no tags, no multipart LFS, no range requests, no permissions beyond "writes need an
Authorization header" and "private repos need one to be read".

    with StandInHub(tmp_path / "hub") as hub:
        env = {"HF_ENDPOINT": hub.endpoint, "HF_HUB_OFFLINE": "0", "HF_HUB_DISABLE_XET": "1", ...}

`HF_ENDPOINT` is read when `huggingface_hub` is imported, so the client normally runs in a subprocess.
Repos live on disk under `root`: `{models,datasets}/{org}/{name}/repo.json` (visibility, refs, commits) and
`objects/{sha256}` (file contents). Errors carry the Hub's `X-Error-Code` header (`RepoNotFound`,
`RevisionNotFound`, `EntryNotFound`), which `huggingface_hub` turns into its typed errors.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

LFS_THRESHOLD = 10 * 1024 * 1024  # the Hub stores files of 10 MiB and more with LFS, whatever their name
LFS_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.ckpt", "*.h5", "*.onnx", "*.npy", "*.npz", "*.pkl")
LFS_PATTERNS += ("*.msgpack", "*.model", "*.parquet", "*.arrow", "*.zip", "*.gz", "*.tar", "*.zst")
GITATTRIBUTES = "".join(f"{p} filter=lfs diff=lfs merge=lfs -text\n" for p in LFS_PATTERNS).encode()
_REPO = r"(?P<type>models|datasets)/(?P<repo>[^/]+/[^/]+)"
_FILE_REPO = r"(?:(?P<type>datasets)/)?(?P<repo>[^/]+/[^/]+)"  # model repos have no prefix outside /api
ROUTES = [  # (method, pattern on the raw path, handler name); revisions arrive percent-encoded, one segment
    ("POST", r"/api/repos/create", "create_repo"),
    ("GET", r"/api/whoami-v2", "whoami"),
    ("POST", r"/api/validate-yaml", "validate_yaml"),
    ("GET", rf"/api/{_REPO}(?:/revision/(?P<rev>[^/]+))?", "repo_info"),
    ("GET", rf"/api/{_REPO}/tree/(?P<rev>[^/]+)(?:/(?P<path>.+))?", "tree"),
    ("POST", rf"/api/{_REPO}/branch/(?P<branch>[^/]+)", "create_branch"),
    ("POST", rf"/api/{_REPO}/preupload/(?P<rev>[^/]+)", "preupload"),
    ("POST", rf"/api/{_REPO}/commit/(?P<rev>[^/]+)", "commit"),
    ("POST", rf"/{_FILE_REPO}\.git/info/lfs/objects/batch", "lfs_batch"),
    ("PUT", rf"/_lfs/{_REPO}/(?P<oid>[0-9a-f]{{64}})", "lfs_put"),
    ("POST", rf"/_lfs/{_REPO}/(?P<oid>[0-9a-f]{{64}})/verify", "lfs_verify"),
    ("HEAD", rf"/{_FILE_REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)", "resolve"),
    ("GET", rf"/{_FILE_REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)", "resolve"),
]


def route(method: str, path: str) -> tuple[str, dict]:
    for route_method, pattern, name in ROUTES:
        match = re.fullmatch(pattern, path)
        if route_method == method and match:
            return name, match.groupdict()
    raise HubError(404, f"the stand-in does not implement {method} {path}")


class HubError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None, headers: dict | None = None, **extra):
        super().__init__(message)
        self.status, self.code, self.headers, self.extra = status, code, headers or {}, extra


def _write_atomic(path: Path, data: bytes) -> None:
    """Readers on other threads never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{threading.get_ident()}.partial")
    partial.write_bytes(data)
    partial.replace(path)


def git_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


class StandInHub:
    """A loopback HTTP server that answers `huggingface_hub` like the Hub does, storing repos under `root`."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.requests: list[tuple[str, str]] = []  # (method, raw path with query), in arrival order
        self._lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None
        self.endpoint = ""

    def __enter__(self) -> StandInHub:
        hub = self

        class Handler(_Handler):
            pass

        Handler.hub = hub
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="hub-standin", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    # ---- helpers for tests
    def files(self, repo_id: str, revision: str = "main", repo_type: str = "model") -> dict[str, bytes]:
        """Every file of `repo_id` at `revision` (a branch or a commit sha), with its content."""
        state = self._state(repo_type, repo_id)
        tree = state["commits"][self._resolve(state, revision)]["files"]
        return {path: self._object(repo_type, repo_id, entry["sha256"]) for path, entry in tree.items()}

    def private(self, repo_id: str, repo_type: str = "model") -> bool:
        return self._state(repo_type, repo_id)["private"]

    def refs(self, repo_id: str, repo_type: str = "model") -> dict[str, str]:
        """Branch (and `refs/pr/N`) names to their head commit sha."""
        return dict(self._state(repo_type, repo_id)["refs"])

    # ---- storage: repo.json per repo, content-addressed objects beside it
    def _dir(self, repo_type: str, repo_id: str) -> Path:
        return self.root / f"{repo_type}s" / repo_id

    def _state(self, repo_type: str, repo_id: str) -> dict:
        path = self._dir(repo_type, repo_id) / "repo.json"
        if not path.is_file():
            raise HubError(404, f"Repository {repo_id} not found", "RepoNotFound")
        return json.loads(path.read_text())

    def _save(self, repo_type: str, repo_id: str, state: dict) -> None:
        path = self._dir(repo_type, repo_id) / "repo.json"
        _write_atomic(path, json.dumps(state, indent=1).encode())

    def _object(self, repo_type: str, repo_id: str, sha256: str) -> bytes:
        return (self._dir(repo_type, repo_id) / "objects" / sha256).read_bytes()

    def _put_object(self, repo_type: str, repo_id: str, data: bytes) -> str:
        sha256 = hashlib.sha256(data).hexdigest()
        path = self._dir(repo_type, repo_id) / "objects" / sha256
        if not path.exists():
            _write_atomic(path, data)
        return sha256

    def _entry(self, repo_type: str, repo_id: str, data: bytes, lfs: bool) -> dict:
        sha256 = self._put_object(repo_type, repo_id, data)
        return (
            self._lfs_entry(sha256, len(data)) if lfs else {"sha256": sha256, "size": len(data), "oid": git_oid(data)}
        )

    @staticmethod
    def _lfs_entry(sha256: str, size: int) -> dict:
        pointer = lfs_pointer(sha256, size)
        return {"sha256": sha256, "size": size, "oid": git_oid(pointer), "lfs": True, "pointerSize": len(pointer)}

    @staticmethod
    def _resolve(state: dict, revision: str) -> str:
        if revision in state["refs"]:
            return state["refs"][revision]
        if revision in state["commits"]:
            return revision
        raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")

    def _new_commit(self, state: dict, parent: str | None, files: dict, message: str) -> str:
        seed = json.dumps([parent, message, files, time.time_ns(), len(state["commits"])], sort_keys=True)
        sha = hashlib.sha1(seed.encode()).hexdigest()
        state["commits"][sha] = {"parent": parent, "message": message, "files": files, "date": time.time()}
        return sha

    def _repo_url(self, repo_type: str, repo_id: str) -> str:
        return f"{self.endpoint}/{'datasets/' if repo_type == 'dataset' else ''}{repo_id}"

    # ---- endpoints: each gets (route groups, query, body) and returns (status, JSON-able or bytes, headers)
    def create_repo(self, groups, query, body):
        payload = json.loads(body)
        repo_type = payload.get("type") or "model"
        repo_id = f"{payload['organization']}/{payload['name']}" if payload.get("organization") else payload["name"]
        if repo_type not in ("model", "dataset") or "/" not in repo_id:
            raise HubError(400, f"unsupported repo {repo_type} {repo_id}")
        private = payload.get("visibility", "private" if payload.get("private") else "public") != "public"
        with self._lock:
            if (self._dir(repo_type, repo_id) / "repo.json").is_file():
                # create_repo(exist_ok=True) reads the url from this answer
                raise HubError(409, "You already created this repo", url=self._repo_url(repo_type, repo_id))
            state = {"private": private, "refs": {}, "commits": {}}
            files = {".gitattributes": self._entry(repo_type, repo_id, GITATTRIBUTES, lfs=False)}
            state["refs"]["main"] = self._new_commit(state, None, files, "initial commit")
            self._save(repo_type, repo_id, state)
        return 200, {"url": self._repo_url(repo_type, repo_id), "name": repo_id}, {}

    def whoami(self, groups, query, body):
        return 200, {"type": "user", "name": "standin", "fullname": "Stand-in", "orgs": []}, {}

    def validate_yaml(self, groups, query, body):
        return 200, {"errors": [], "warnings": []}, {}

    def repo_info(self, groups, query, body):
        repo_type, repo_id = groups["type"][:-1], groups["repo"]
        state = self._state(repo_type, repo_id)
        sha = self._resolve(state, unquote(groups["rev"] or "main"))
        commit = state["commits"][sha]
        siblings = [{"rfilename": path} for path in sorted(commit["files"])]
        if query.get("blobs") in (["True"], ["true"], ["1"]):
            for sibling in siblings:
                entry = commit["files"][sibling["rfilename"]]
                sibling.update(size=entry["size"], blobId=entry["oid"])
                if entry.get("lfs"):
                    sibling["lfs"] = {
                        "sha256": entry["sha256"],
                        "size": entry["size"],
                        "pointerSize": entry["pointerSize"],
                    }
        date = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(commit["date"]))
        info = {
            "_id": sha[:24],
            "id": repo_id,
            "author": repo_id.split("/")[0],
            "sha": sha,
            "private": state["private"],
        }
        info.update(lastModified=date, createdAt=date, gated=False, disabled=False, downloads=0, likes=0, tags=[])
        return 200, {**info, "siblings": siblings}, {}

    def tree(self, groups, query, body):
        repo_type, repo_id = groups["type"][:-1], groups["repo"]
        state = self._state(repo_type, repo_id)
        files = state["commits"][self._resolve(state, unquote(groups["rev"]))]["files"]
        base = unquote(groups["path"] or "").strip("/")
        prefix = f"{base}/" if base else ""
        recursive = query.get("recursive", ["False"])[0].lower() in ("true", "1")
        entries: dict[str, dict] = {}
        for path, entry in sorted(files.items()):
            if not path.startswith(prefix):
                continue
            parts = path[len(prefix) :].split("/")
            for depth in range(1, len(parts)):  # the folders on the way
                if recursive or depth == 1:
                    folder = prefix + "/".join(parts[:depth])
                    entries.setdefault(folder, {"type": "directory", "oid": git_oid(folder.encode()), "size": 0})
            if recursive or len(parts) == 1:
                item = {"type": "file", "oid": entry["oid"], "size": entry["size"]}
                if entry.get("lfs"):
                    item["lfs"] = {"oid": entry["sha256"], "size": entry["size"], "pointerSize": entry["pointerSize"]}
                entries[path] = item
        if base and not entries:
            raise HubError(404, f"{base} does not exist on this revision", "EntryNotFound")
        return 200, [{**item, "path": path} for path, item in sorted(entries.items())], {}

    def create_branch(self, groups, query, body):
        repo_type, repo_id, branch = groups["type"][:-1], groups["repo"], unquote(groups["branch"])
        with self._lock:
            state = self._state(repo_type, repo_id)
            if branch in state["refs"]:
                raise HubError(409, f"Reference already exists: refs/heads/{branch}")
            if branch.startswith("refs/"):
                raise HubError(400, f"Invalid reference for a branch: {branch}")
            state["refs"][branch] = self._resolve(state, json.loads(body or b"{}").get("startingPoint") or "main")
            self._save(repo_type, repo_id, state)
        return 200, {}, {}

    def preupload(self, groups, query, body):
        repo_type, repo_id = groups["type"][:-1], groups["repo"]
        state = self._state(repo_type, repo_id)
        rev = unquote(groups["rev"])
        files = {} if "create_pr" in query else state["commits"][self._resolve(state, rev)]["files"]
        answer = []
        for item in json.loads(body)["files"]:
            name = item["path"].rsplit("/", 1)[-1]
            lfs = item["size"] >= LFS_THRESHOLD or any(fnmatch.fnmatch(name, p) for p in LFS_PATTERNS)
            old = files.get(item["path"])
            oid = (old["sha256"] if old.get("lfs") else old["oid"]) if old else None
            answer.append(
                {"path": item["path"], "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False, "oid": oid}
            )
        return 200, {"files": answer}, {}

    def lfs_batch(self, groups, query, body):
        repo_type, repo_id = groups["type"][:-1] if groups["type"] else "model", groups["repo"]
        self._state(repo_type, repo_id)
        payload = json.loads(body)
        if payload.get("operation") != "upload":
            raise HubError(400, "only uploads go through this stand-in's LFS batch API")
        objects = []
        for obj in payload["objects"]:
            item = {"oid": obj["oid"], "size": obj["size"], "authenticated": True}
            if not (self._dir(repo_type, repo_id) / "objects" / obj["oid"]).exists():
                href = f"{self.endpoint}/_lfs/{repo_type}s/{repo_id}/{obj['oid']}"
                item["actions"] = {"upload": {"href": href}, "verify": {"href": f"{href}/verify"}}
            objects.append(item)
        return 200, {"transfer": "basic", "objects": objects}, {"Content-Type": "application/vnd.git-lfs+json"}

    def lfs_put(self, groups, query, body):
        repo_type, repo_id = groups["type"][:-1], groups["repo"]
        if hashlib.sha256(body).hexdigest() != groups["oid"]:
            raise HubError(400, "content does not match its sha256 oid")
        self._put_object(repo_type, repo_id, body)
        return 200, {}, {}

    def lfs_verify(self, groups, query, body):
        path = self._dir(groups["type"][:-1], groups["repo"]) / "objects" / groups["oid"]
        if not path.exists() or path.stat().st_size != json.loads(body)["size"]:
            raise HubError(404, "LFS object missing or of another size")
        return 200, {}, {}

    def commit(self, groups, query, body):
        repo_type, repo_id, rev = groups["type"][:-1], groups["repo"], unquote(groups["rev"])
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        header = next(line["value"] for line in lines if line["key"] == "header")
        with self._lock:
            state = self._state(repo_type, repo_id)
            if rev not in state["refs"]:  # the Hub commits onto branches only (a sha is not one)
                raise HubError(404, f"Invalid rev id: {rev}", "RevisionNotFound")
            parent = state["refs"][rev]
            if header.get("parentCommit") and not parent.startswith(header["parentCommit"]):
                raise HubError(412, "A commit has happened since. Please refresh and try again.")
            files = dict(state["commits"][parent]["files"])
            for line in lines:
                key, value = line["key"], line["value"]
                if key == "file":
                    data = base64.b64decode(value["content"])
                    files[value["path"]] = self._entry(repo_type, repo_id, data, lfs=False)
                elif key == "lfsFile":
                    obj = self._dir(repo_type, repo_id) / "objects" / value["oid"]
                    if not obj.exists():
                        raise HubError(400, f"LFS object {value['oid']} was never uploaded")
                    files[value["path"]] = self._lfs_entry(value["oid"], obj.stat().st_size)
                elif key == "deletedFile":
                    if files.pop(value["path"], None) is None:
                        raise HubError(404, "A file with this name doesn't exist", "EntryNotFound")
                elif key == "deletedFolder":
                    files = {p: e for p, e in files.items() if not p.startswith(value["path"].rstrip("/") + "/")}
                elif key != "header":
                    raise HubError(400, f"unsupported commit operation {key}")
            message = "\n\n".join(filter(None, [header.get("summary"), header.get("description")]))
            sha = self._new_commit(state, parent, files, message)
            pr_url = None
            if "create_pr" in query:
                number = 1 + sum(ref.startswith("refs/pr/") for ref in state["refs"])
                state["refs"][f"refs/pr/{number}"] = sha
                pr_url = f"{self._repo_url(repo_type, repo_id)}/discussions/{number}"
            else:
                state["refs"][rev] = sha
            self._save(repo_type, repo_id, state)
        url = f"{self._repo_url(repo_type, repo_id)}/commit/{sha}"
        return 200, {"success": True, "commitOid": sha, "commitUrl": url, "pullRequestUrl": pr_url}, {}

    def resolve(self, groups, query, body):
        repo_type, repo_id = groups["type"][:-1] if groups["type"] else "model", groups["repo"]
        state = self._state(repo_type, repo_id)
        sha = self._resolve(state, unquote(groups["rev"]))
        path = unquote(groups["path"])
        entry = state["commits"][sha]["files"].get(path)
        if entry is None:
            raise HubError(404, "Entry not found", "EntryNotFound", {"X-Repo-Commit": sha})
        headers = {"X-Repo-Commit": sha, "ETag": f'"{entry["oid"]}"', "Content-Type": "application/octet-stream"}
        if entry.get("lfs"):  # the Hub answers 302 to a CDN here; the linked headers describe the real file
            headers.update({"ETag": f'"{entry["sha256"]}"', "X-Linked-Etag": f'"{entry["sha256"]}"'})
            headers["X-Linked-Size"] = str(entry["size"])
        return 200, self._object(repo_type, repo_id, entry["sha256"]), headers


def run_client(hub: StandInHub, home: Path, code: str, without_medreco: bool = False, **args) -> dict:
    """Run `code` in a fresh Python whose Hub is the stand-in (`ARGS` holds `args`); it prints one JSON line.
    `without_medreco`: `import medreco` fails there (a machine without the package)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_"))}
    env.update(HF_ENDPOINT=hub.endpoint, HF_HUB_OFFLINE="0", HF_HUB_DISABLE_XET="1", HF_HOME=str(home))
    env.update(HF_TOKEN="hf_standin", HF_HUB_DISABLE_PROGRESS_BARS="1", TRANSFORMERS_VERBOSITY="error")
    script = "import json, sys\nARGS = json.loads(sys.argv[1])\n" + textwrap.dedent(code)
    if without_medreco:
        from without_medreco import BLOCKER

        script = BLOCKER + script
    result = subprocess.run(
        [sys.executable, "-c", script, json.dumps(args)],
        env=env,
        cwd=home.parent,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-6000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


class _Handler(BaseHTTPRequestHandler):
    hub: StandInHub
    protocol_version = "HTTP/1.1"  # keep-alive, as httpx expects; every answer has a Content-Length

    def log_message(self, format, *args):  # quiet: tests read hub.requests instead
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0], 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline().strip():  # trailers, then the blank line
                pass
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _dispatch(self) -> None:
        hub = self.hub
        hub.requests.append((self.command, self.path))
        split = urlsplit(self.path)
        body = self._body() if self.command in ("POST", "PUT") else b""
        try:
            name, groups = route(self.command, split.path)
            # Writes need a token, and so do reads of private repos. The LFS PUT stands for a presigned storage
            # URL: the client sends it no token.
            if not self.headers.get("Authorization") and self.command != "PUT":
                if self.command == "POST":
                    raise HubError(401, "Invalid username or password.")
                if "repo" in groups and hub.private(groups["repo"], (groups["type"] or "models")[:-1]):
                    raise HubError(401, "Invalid username or password.", "RepoNotFound")
            status, payload, headers = getattr(hub, name)(groups, parse_qs(split.query), body)
        except HubError as error:
            status, payload, headers = error.status, {"error": str(error), **error.extra}, dict(error.headers)
            if error.code:
                headers["X-Error-Code"] = error.code
            headers["X-Error-Message"] = str(error).encode("ascii", "backslashreplace").decode()
        except Exception as error:  # a stand-in bug: 501, which the client does not retry (it retries 500)
            status, payload, headers = 501, {"error": repr(error)}, {}
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        headers.setdefault("Content-Type", "application/json")
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_HEAD = do_POST = do_PUT = _dispatch
