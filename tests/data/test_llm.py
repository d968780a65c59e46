"""The LLM decomposition backend against a small OpenAI-compatible server on loopback, and
through a tiny local transformers model."""

import base64
import contextlib
import itertools
import json
import logging
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch
from transformers import AutoTokenizer

import medreco
from medreco.data.mining.vqa import needs_two_images
from medreco.data.reports.llm import (
    LLMDecomposer,
    LLMEndpointError,
    LLMError,
    LLMRedirectError,
    OpenAIChatBackend,
    TransformersChatBackend,
    parse_json_answer,
    redact_url,
)
from medreco.data.reports.statement import MentionStatus
from medreco.errors import MedReCoError
from medreco.factory import bundled_text_encoder_path
from medreco.processing.processing_vlm import CHAT_TEMPLATE

REPORT = (
    "FINDINGS: Small left pleural effusion. No pneumothorax. Heart size is normal.\nIMPRESSION: Small left effusion."
)


class FakeLLM(BaseHTTPRequestHandler):
    """Answers like a careful extractor: sentences of the report naming the entity's last word."""

    script: list = []  # per-request overrides: an int status code, a raw reply string, None: as usual
    seen: list = []
    requests: list = []  # (path, headers) of every request
    answered: list = []  # the messages of every request answered with 200

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeLLM.seen.append((time.monotonic(), body))
        FakeLLM.requests.append((self.path, dict(self.headers)))
        self.messages = json.dumps(body["messages"])
        action = FakeLLM.script.pop(0) if FakeLLM.script else None
        if action is not None:
            if isinstance(action, int):
                self.send_response(action)
                self.end_headers()
                return
            return self._reply(action)
        prompt = body["messages"][-1]["content"] if len(body["messages"]) == 1 else body["messages"][0]["content"]
        report = prompt.split("Report:\n", 1)[-1]
        if "Question:" in prompt:
            return self._reply("yes" if "compare" in prompt.lower() else "no")
        if match := re.search(r"abnormality associated with this structure: (.+)\n", prompt):
            word = match.group(1).split()[-1]
            sentences = [s for s in re.split(r"(?<=\.)\s+", report) if word in s.lower()]
            return self._reply(json.dumps({"abnormality description": " ".join(sentences) or None}))
        name = re.search(r"\(([^)]+)\) from the provided|condition \"([^\"]+)\"", prompt)
        word = (name.group(1) or name.group(2)).split()[-1]
        sentences = [s for s in re.split(r"(?<=\.)\s+", report) if word in s.lower()]
        self._reply(" ".join(sentences) or "null")

    def _reply(self, text):
        FakeLLM.answered.append(self.messages)
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    FakeLLM.script, FakeLLM.seen, FakeLLM.requests, FakeLLM.answered = [], [], [], []
    with _serving(FakeLLM) as port:
        yield f"http://127.0.0.1:{port}/v1"


@contextlib.contextmanager
def _serving(handler):
    """A loopback HTTP server with `handler` in a thread; yields its port."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_decomposition_through_an_openai_compatible_server(server, tmp_path):
    backend = OpenAIChatBackend(server, "fake-llm", backoff=0.01)
    decomposer = LLMDecomposer(backend, cache_dir=tmp_path / "cache")
    entities = [
        decomposer.ontology.find(t, "chest_xray")
        for t in ("pleural effusion", "lung consolidation", "pleura", "pneumonia")
    ]
    result = decomposer.decompose(REPORT, "chest_xray", entities)
    effusion, consolidation, pleura, pneumonia = (result.statements[e.id] for e in entities)
    assert effusion.status is MentionStatus.POSITIVE and any(
        "Small left pleural effusion." in s for s in effusion.sentences
    )
    assert consolidation.status is MentionStatus.NOT_MENTIONED and pneumonia.status is MentionStatus.NOT_MENTIONED
    assert pleura.status is MentionStatus.POSITIVE
    calls = len(FakeLLM.seen)
    decomposer.decompose(REPORT, "chest_xray", entities)  # answered from the disk cache
    assert len(FakeLLM.seen) == calls and decomposer.chat.calls == calls


def test_retries_rate_limit_and_format_repair(server):
    FakeLLM.script = [
        500,
        503,
        'Sure! The description is: "effusion"',
        json.dumps({"abnormality description": "No effusion."}),
    ]
    backend = OpenAIChatBackend(server, "fake-llm", backoff=0.01, requests_per_second=20)
    decomposer = LLMDecomposer(backend)
    effusion = decomposer.ontology.find("pleural effusion", "chest_xray")
    statement = decomposer.decompose(REPORT, "chest_xray", [effusion]).statements[effusion.id]
    assert statement.status is MentionStatus.NEGATIVE and statement.text == "No effusion."
    times = [t for t, _ in FakeLLM.seen]
    # 20 requests/s: sends at least 50 ms apart (the backoff alone would give 10-20 ms); arrival times
    # at the server carry a few ms of scheduling jitter on a loaded machine
    assert len(times) == 4 and min(b - a for a, b in itertools.pairwise(times)) >= 0.035
    assert FakeLLM.seen[-1][1]["messages"][-1]["content"].startswith("Answer with the JSON object only")


def test_unreachable_and_refusing_servers(server):
    with pytest.raises(LLMError, match="no valid answer"):
        OpenAIChatBackend("http://127.0.0.1:9/v1", "x", timeout=0.5, max_retries=1, backoff=0.01).complete(
            [{"role": "user", "content": "hi"}]
        )
    FakeLLM.script = [401]
    with pytest.raises(LLMError, match="HTTP 401"):
        OpenAIChatBackend(server, "x", backoff=0.01).complete([{"role": "user", "content": "hi"}])
    FakeLLM.script = ["not json"] * 3
    decomposer = LLMDecomposer(OpenAIChatBackend(server, "x", backoff=0.01), format_retries=2)
    with pytest.raises(LLMError, match="kept answering without the JSON"):
        decomposer.extract(REPORT, decomposer.ontology.find("pleural effusion", "chest_xray"))


KEY = "sk-very-secret-key-1234"


class RecordingServer(BaseHTTPRequestHandler):
    """The server a redirect points at: records every request it gets, answers like an LLM."""

    seen: list = []

    def _record(self):
        RecordingServer.seen.append((self.command, self.path, dict(self.headers)))
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": "stolen"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _record

    def log_message(self, *args):
        pass


def _redirecting_to(location: str, code: int) -> type[BaseHTTPRequestHandler]:
    class Redirecting(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(code)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    return Redirecting


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_to_another_server_never_gets_the_api_key(code):
    """urllib's default handler re-sends Authorization to the Location's host (301/302/303 turn the
    POST into a GET); the backend refuses every redirect with a typed error instead."""
    RecordingServer.seen = []
    with _serving(RecordingServer) as other_port:
        elsewhere = f"http://127.0.0.1:{other_port}/v1/chat/completions?token=redirect-token-5678"
        with _serving(_redirecting_to(elsewhere, code)) as port:
            backend = OpenAIChatBackend(f"http://127.0.0.1:{port}/v1", "x", api_key=KEY, backoff=0.01)
            with pytest.raises(LLMRedirectError) as caught:
                backend.complete([{"role": "user", "content": "hi"}])
    message = str(caught.value)
    assert isinstance(caught.value, LLMError) and isinstance(caught.value, MedReCoError)
    assert f"HTTP {code}" in message and f"127.0.0.1:{port}/v1/chat/completions" in message
    assert f"127.0.0.1:{other_port}" in message and "base_url" in message and "\n" not in message
    assert KEY not in message and "redirect-token-5678" not in message
    assert not any("Authorization" in headers or KEY in str(headers) for _, _, headers in RecordingServer.seen)
    assert RecordingServer.seen == []  # not followed at all


@pytest.mark.parametrize(
    "url",
    [
        f"http://user:{KEY}@127.0.0.1:9/v1",
        f"http://{KEY}@127.0.0.1:9/v1",
        f"http://127.0.0.1:9/v1?api_key={KEY}",
        f"http://127.0.0.1:9/v1?api-version=2024-06-01&key={KEY}",
        f"http://127.0.0.1:9/v1?token={KEY}#frag",
    ],
)
def test_credentials_in_the_url_stay_out_of_errors_logs_and_repr(url, caplog):
    backend = OpenAIChatBackend(url, "x", timeout=0.5, max_retries=1, backoff=0.01)
    with caplog.at_level(logging.DEBUG, logger="medreco"), pytest.raises(LLMError) as caught:
        backend.complete([{"role": "user", "content": "hi"}])
    assert "no valid answer" in str(caught.value) and "127.0.0.1:9/v1/chat/completions" in str(caught.value)
    assert caplog.records  # the retry was logged
    for text in (str(caught.value), repr(backend), backend.url, caplog.text):
        assert KEY not in text and "***" in text
    assert "api-version=2024-06-01" in redact_url(url) or "api-version" not in url  # harmless ones stay


def test_credentials_in_the_url_still_authenticate(server):
    port = server.split(":")[-1].split("/")[0]
    FakeLLM.script = ["ok"] * 3
    OpenAIChatBackend(f"http://127.0.0.1:{port}/v1?api_key={KEY}", "x").complete([{"role": "user", "content": "hi"}])
    OpenAIChatBackend(f"http://me:{KEY}@127.0.0.1:{port}/v1", "x").complete([{"role": "user", "content": "hi"}])
    OpenAIChatBackend(server, "x", api_key=KEY).complete([{"role": "user", "content": "hi"}])
    (query_path, _), (userinfo_path, userinfo_headers), (_, bearer_headers) = FakeLLM.requests
    assert query_path == f"/v1/chat/completions?api_key={KEY}"
    assert userinfo_path == "/v1/chat/completions"
    assert base64.b64decode(userinfo_headers["Authorization"].removeprefix("Basic ")).decode() == f"me:{KEY}"
    assert bearer_headers["Authorization"] == f"Bearer {KEY}"
    with pytest.raises(LLMEndpointError, match="both in the URL and in api_key") as caught:
        OpenAIChatBackend(f"https://me:{KEY}@llm.example/v1", "x", api_key="other-key")
    assert KEY not in str(caught.value)


def test_redact_url():
    assert redact_url(f"https://u:{KEY}@h.example:8443/v1?api_key={KEY}&model=m&X-Amz-Signature=abcd") == (
        "https://***@h.example:8443/v1?api_key=***&model=m&X-Amz-Signature=***"
    )
    assert redact_url("https://h.example/v1") == "https://h.example/v1"
    assert KEY not in redact_url(f"http://u:{KEY}@[::1/v1?access_token={KEY}")  # unparsable: by pattern


@pytest.mark.parametrize(
    "url",
    ["http://localhost:8000/v1", "http://127.0.0.1:8000/v1", "http://127.8.9.10/v1", "http://[::1]:8000/v1"],
)
def test_plain_http_is_accepted_on_loopback(url):
    assert OpenAIChatBackend(url, "x").url == url + "/chat/completions"


@pytest.mark.parametrize(
    "url",
    [
        "http://llm.hospital.example/v1",
        "http://10.0.0.5:8000/v1",
        "http://localhost.evil.example/v1",
        "http://127.0.0.1.evil.example/v1",
        f"http://user:{KEY}@llm.hospital.example/v1",
    ],
)
def test_plain_http_to_another_host_needs_an_explicit_opt_in(url, caplog):
    with pytest.raises(LLMEndpointError) as caught:
        OpenAIChatBackend(url, "x", api_key=KEY)
    message = str(caught.value)
    assert isinstance(caught.value, ValueError) and "plain HTTP" in message and "allow_insecure_http" in message
    assert redact_url(url) + "/chat/completions" in message and KEY not in message and "\n" not in message
    with caplog.at_level(logging.WARNING, logger="medreco"):
        backend = OpenAIChatBackend(url, "x", allow_insecure_http=True)
    assert "unencrypted" in caplog.text and KEY not in caplog.text
    assert backend.url == redact_url(url) + "/chat/completions"
    assert OpenAIChatBackend(url.replace("http://", "https://"), "x")  # https: fine


@pytest.mark.parametrize("url", ["ftp://llm.example/v1", "localhost:8000/v1", "https://llm.example:port/v1"])
def test_urls_that_are_not_http_endpoints_are_refused(url):
    with pytest.raises(LLMEndpointError, match="URL"):
        OpenAIChatBackend(url, "x")


def test_image_dependency_prompt(server):
    backend = OpenAIChatBackend(server, "fake-llm")
    assert needs_two_images("Compare the effusion in Case A and Case B.", backend)
    assert not needs_two_images("Is there an effusion?", backend)


def test_comparative_questions_through_the_llm(server):
    from medreco.data.mining.vqa import llm_vqa
    from medreco.data.reports.statement import EntityStatement

    good = {
        "question": "Which case shows a larger effusion?",
        "content_type": "Size",
        "options": {"A": "Case A", "B": "Case B", "C": "Same", "D": "Neither"},
        "answer": "B",
        "reason": "B is large.",
    }
    bad = {"question": "Broken", "options": {"A": "x", "B": "x"}, "answer": "Z"}
    FakeLLM.script = [
        "here you go: " + json.dumps([good, bad]),
        json.dumps(
            [{"question": "How does the effusion compare?", "answer": "The image from Case B shows a larger effusion."}]
        ),
    ]
    backend = OpenAIChatBackend(server, "fake-llm")
    decomposer = LLMDecomposer(backend)
    effusion = decomposer.ontology.find("pleural effusion", "chest_xray")
    a = EntityStatement(effusion.id, MentionStatus.POSITIVE, ["Small left effusion."])
    b = EntityStatement(effusion.id, MentionStatus.POSITIVE, ["Large left effusion."])
    samples = llm_vqa(backend, effusion, a, b, "s1", "s2")
    assert len(samples) == 1 and samples[0].answer_text == "Case B" and samples[0].dimension == "size"
    assert samples[0].open_answer.startswith("The image from Case B")
    prompt = FakeLLM.seen[0][1]["messages"][0]["content"]
    assert "Case A, pleural effusion: Small left effusion." in prompt and "[Pleura]" in prompt


def test_json_answers_are_validated():
    assert (
        parse_json_answer('```json\n{"abnormality description": null} // none\n```', "abnormality description") is None
    )
    with pytest.raises(ValueError):
        parse_json_answer('{"other": 1}', "abnormality description")


def test_through_a_tiny_local_transformers_model():
    tokenizer = AutoTokenizer.from_pretrained(bundled_text_encoder_path())
    tokenizer.chat_template = CHAT_TEMPLATE
    config = {**medreco.PRESETS["tiny"]["vlm"]["text_config"], "vocab_size": len(tokenizer)}
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
    backend = TransformersChatBackend(model, tokenizer, "tiny-qwen2")
    reply = backend.complete([{"role": "user", "content": "Extract the effusion."}], max_tokens=5)
    assert isinstance(reply, str) and reply == backend.complete(
        [{"role": "user", "content": "Extract the effusion."}], max_tokens=5
    )
    decomposer = LLMDecomposer(backend, max_tokens=5, format_retries=0)
    # an untrained model answers S1 with free text (accepted) and S3 without JSON (a typed error)
    pleura = decomposer.ontology.find("pleura", "chest_xray")
    assert decomposer.decompose(REPORT, "chest_xray", [pleura]).statements[pleura.id].entity_id == pleura.id
    with pytest.raises(LLMError):
        decomposer.extract(REPORT, decomposer.ontology.find("pleural effusion", "chest_xray"))


# ------------------------------------------------------------------ `medreco mine --decomposer llm`
LLM_REPORTS = [
    "FINDINGS: Right lower lobe pneumonia. Small left pleural effusion.",
    "FINDINGS: The pneumonia has resolved. No effusion.",
    "FINDINGS: Large right pneumothorax. No pneumonia.",
    "FINDINGS: The pneumothorax is smaller. Heart size is normal.",
    "FINDINGS: Pulmonary edema. Cardiomegaly.",
    "FINDINGS: Edema has improved. Stable cardiomegaly.",
]


def _llm_manifest(tmp_path, count: int = len(LLM_REPORTS)):
    """Three patients, two chest radiographs each (a 6-study manifest, asked about 9 diseases each)."""
    lines = ["image,report,patient_id,modality,study_day"]
    lines += [f"s{i}.png,{report},P{i // 2},chest_xray,{i % 2 * 30}" for i, report in enumerate(LLM_REPORTS[:count])]
    path = tmp_path / "manifest.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def _mine_llm(manifest, out, server, *extra):
    from medreco.cli import main

    args = ["mine", str(manifest), "--out", str(out), "--quiet", "--levels", "disease", "--metrics", "agreement"]
    return main([*args, "--llm-url", server, "--llm-model", "fake-llm", *extra])


def test_llm_mining_resumes_without_asking_an_answered_prompt_again(server, tmp_path, capsys, monkeypatch):
    import datasets

    monkeypatch.setenv("MEDRECO_LLM_API_KEY", KEY)
    manifest = _llm_manifest(tmp_path)
    per_report = len(_diseases())  # one prompt per report and chest radiograph disease
    prompts = 6 * per_report
    # the server fails mid-run, after each of the two workers could finish a report: one-line error
    answered_first = 2 * per_report + 2
    FakeLLM.script = [None] * answered_first + [400]
    assert _mine_llm(manifest, tmp_path / "out", server, "--workers", "2", "--llm-retries", "0") == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "HTTP 400" in error and KEY not in error
    interrupted = len(FakeLLM.answered)
    assert answered_first <= interrupted < prompts
    assert _mine_llm(manifest, tmp_path / "out", server, "--workers", "2") == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["studies"] == 6
    assert summary["decomposer"] == {
        "decomposer": "llm",
        "backend": "openai",
        "model": "fake-llm",
        "levels": ["disease"],
    }
    # each prompt answered exactly once over the two runs
    assert len(FakeLLM.answered) == len(set(FakeLLM.answered)) == prompts
    assert summary["decomposed_now"] < 6  # the reports finished before the failure were not decomposed again
    assert all(headers["Authorization"] == f"Bearer {KEY}" for _, headers in FakeLLM.requests)
    statements = {
        row["report"]: json.loads(row["statements"])
        for row in datasets.load_from_disk(str(tmp_path / "out" / "studies"))
    }
    pneumonia = next(e.id for e in _diseases() if e.term == "pneumonia")
    assert statements[LLM_REPORTS[0]][pneumonia]["status"] == "positive"
    assert statements[LLM_REPORTS[2]][pneumonia]["status"] == "negative"
    assert KEY not in (tmp_path / "out" / "summary.json").read_text()
    # the rule-based decomposer never reuses the LLM's decompositions, and back again nothing is asked
    assert _mine_rule(manifest, tmp_path / "out") == 6
    capsys.readouterr()
    assert _mine_llm(manifest, tmp_path / "out", server) == 0
    assert json.loads(capsys.readouterr().out)["decomposed_now"] == 0 and len(FakeLLM.answered) == prompts


def _diseases():
    from medreco.data.reports.ontology import Ontology

    return Ontology.load().entities("chest_xray", "disease")


def _mine_rule(manifest, out) -> int:
    """`medreco mine` with the rule-based decomposer; how many reports it decomposed."""
    from medreco.cli import main

    args = ["mine", str(manifest), "--out", str(out), "--quiet", "--levels", "disease", "--metrics", "agreement"]
    assert main(args) == 0
    return json.loads((out / "summary.json").read_text())["decomposed_now"]


def test_llm_mining_keeps_the_rate_limit_across_workers(server, tmp_path):
    manifest = _llm_manifest(tmp_path, count=2)
    assert _mine_llm(manifest, tmp_path / "out", server, "--workers", "3", "--llm-rps", "20") == 0
    times = sorted(t for t, _ in FakeLLM.seen)
    assert len(times) == 2 * len(_diseases())
    # 20 requests/s over three threads: 50 ms apart at the client; a few ms of jitter at the server
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) >= 0.035 and times[-1] - times[0] >= len(gaps) * 0.045


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--llm-url", "ftp://llm.example/v1", "--llm-model", "m"], "not an http:// or https:// URL"),
        (["--llm-url", "http://10.0.0.5/v1", "--llm-model", "m"], "plain HTTP"),
        (["--llm-url", "http://127.0.0.1:9/v1", "--llm-model", "m", "--llm-retries", "0"], "no valid answer"),
        (["--llm-url", "http://127.0.0.1:9/v1"], "needs --llm-model"),
        (["--decomposer", "llm"], "needs either a server URL"),
        (["--decomposer", "rule", "--llm-model", "m"], "are for --decomposer llm"),
        (
            ["--llm-url", "http://127.0.0.1:9/v1", "--llm-model", "m", "--llm-api-key-env", "MEDRECO_TEST_NO_KEY"],
            "MEDRECO_TEST_NO_KEY",
        ),
    ],
)
def test_llm_mining_failures_are_one_line(tmp_path, capsys, extra, message):
    from medreco.cli import main

    manifest = _llm_manifest(tmp_path, count=2)
    assert main(["mine", str(manifest), "--out", str(tmp_path / "out"), "--quiet", *extra]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.err.count("\n") == 1 and "Traceback" not in captured.err


def test_llm_mining_through_a_local_transformers_model(tmp_path, capsys):
    from transformers import AutoConfig, AutoModelForCausalLM

    from medreco.cli import main

    tokenizer = AutoTokenizer.from_pretrained(bundled_text_encoder_path())
    tokenizer.chat_template = CHAT_TEMPLATE
    config = {**medreco.PRESETS["tiny"]["vlm"]["text_config"], "vocab_size": len(tokenizer)}
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(AutoConfig.for_model(**config)).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    manifest = _llm_manifest(tmp_path, count=2)
    args = ["mine", str(manifest), "--out", str(tmp_path / "out"), "--quiet", "--levels", "disease"]
    args += ["--metrics", "agreement", "--llm-local", str(tmp_path / "model"), "--llm-max-tokens", "3"]
    assert main(args) == 0
    # (the summary file, not stdout: importing DeepSpeed, where installed, prints a line there)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["studies"] == 2 and summary["decomposed_now"] == 2
    assert summary["decomposer"]["backend"] == "transformers"
    assert main(args) == 0 and json.loads((tmp_path / "out" / "summary.json").read_text())["decomposed_now"] == 0


def test_score_reports_reads_labelled_reports_through_the_llm(server, tmp_path, capsys):
    """`medreco score-reports --llm-url`: the same scoring as the rule-based reader, through a server."""
    from medreco.cli import main

    labels = tmp_path / "labels.jsonl"
    rows = [
        {
            "modality": "chest_xray",
            "text": REPORT,
            "labels": {"pleural effusion": "positive", "pneumothorax": "negative"},
        },
        {"modality": "chest_xray", "text": "Mild cardiomegaly.", "labels": {"pneumothorax": "negative"}},
    ]
    labels.write_text("".join(json.dumps(row) + "\n" for row in rows))
    argv = ["score-reports", str(labels), "--llm-url", server, "--llm-model", "fake-llm", "--json"]
    assert main([*argv, "--cache", str(tmp_path / "cache")]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["decomposer"] == "llm" and result["labels"] == 3 and FakeLLM.answered
    # the fake reads "effusion" as a positive mention and the pneumothorax sentence through the rules' status
    assert result["confusion"]["positive -> positive"] == 1
    asked = len(FakeLLM.seen)
    assert main([*argv, "--cache", str(tmp_path / "cache")]) == 0  # cached: nothing asked again
    assert json.loads(capsys.readouterr().out) == result and len(FakeLLM.seen) == asked
