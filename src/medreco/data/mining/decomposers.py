"""Which decomposer a mining run reads its reports with, and where its answers are cached.

`rule`: the offline `RuleBasedDecomposer` (process-parallel). `llm`: `LLMDecomposer` with the
paper's prompts S1-S3, through an OpenAI-compatible server (`LLMSettings.url`: vLLM, llama.cpp,
a hospital gateway) or a local transformers model (`LLMSettings.local`). The decomposition cache
is named after the decomposer's identity (backend and model, and the entity levels an LLM is
asked about), so switching decomposer or model never reuses another's results; an LLM run also
caches every answer (`cache/llm/`), so a killed run resumes without asking a prompt twice."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from ..reports.llm import LLMDecomposer, LLMEndpointError, OpenAIChatBackend, TransformersChatBackend

logger = logging.getLogger(__name__)

DECOMPOSERS = ("rule", "llm")
DEFAULT_API_KEY_ENV = "MEDRECO_LLM_API_KEY"
RULE_CACHE_FILE = "decompositions.jsonl"  # the name runs before the LLM option wrote: they still resume


@dataclass
class LLMSettings:
    """How `medreco mine --decomposer llm` reaches its model: a server (`url` + `model`) or a
    local transformers model (`local`: a path or a Hub name), never both.

    The API key is read from the environment variable `api_key_env` (default
    `MEDRECO_LLM_API_KEY`, optional; a variable named explicitly must be set), so it never sits in
    a command line, a config or a summary. `requests_per_second` is shared by all threads."""

    url: str | None = None
    model: str | None = None
    local: str | None = None
    api_key_env: str | None = None
    requests_per_second: float | None = None
    timeout: float = 60.0
    max_retries: int = 4
    max_tokens: int = 300
    allow_insecure_http: bool = False

    def __post_init__(self):
        if bool(self.url) == bool(self.local):
            raise ValueError("the LLM decomposer needs either a server URL (--llm-url) or a local model (--llm-local)")
        if self.url and not self.model:
            raise ValueError("--llm-url needs --llm-model (the model name the server serves)")
        if self.requests_per_second is not None and not self.requests_per_second > 0:
            raise ValueError(f"LLM requests per second must be positive, not {self.requests_per_second}")
        if not self.timeout > 0 or self.max_retries < 0 or self.max_tokens < 1:
            raise ValueError("LLM timeout and max tokens must be positive, retries zero or more")

    @property
    def backend_name(self) -> str:
        return "openai" if self.url else "transformers"

    @property
    def model_name(self) -> str:
        return str(self.model or self.local)

    def api_key(self) -> str | None:
        """The key from the environment; an explicitly named variable that is unset is an error."""
        name = self.api_key_env or DEFAULT_API_KEY_ENV
        key = os.environ.get(name)
        if self.api_key_env and not key:
            raise LLMEndpointError(f"the environment variable {name} (the LLM API key, --llm-api-key-env) is not set")
        return key or None

    def backend(self):
        """The chat backend these settings name (a local model is loaded here)."""
        if self.url:
            return OpenAIChatBackend(
                self.url,
                str(self.model),
                api_key=self.api_key(),
                timeout=self.timeout,
                max_retries=self.max_retries,
                requests_per_second=self.requests_per_second,
                allow_insecure_http=self.allow_insecure_http,
            )
        return TransformersChatBackend.from_pretrained(str(self.local))


def decomposer_identity(decomposer: str, llm: LLMSettings | None, levels: tuple[str, ...]) -> dict:
    """What determines a run's decompositions: the decomposer, and for an LLM its backend, model
    and the entity levels it is asked about (not the URL, key, rate or timeout: shards may reach
    replicas of one model at different addresses)."""
    if decomposer == "rule":
        return {"decomposer": "rule"}
    if llm is None:
        raise ValueError("the llm decomposer needs LLMSettings (a server URL or a local model)")
    return {"decomposer": "llm", "backend": llm.backend_name, "model": llm.model_name, "levels": sorted(levels)}


def cache_file_name(identity: dict) -> str:
    """The decomposition cache of a decomposer identity (rule: the historical name)."""
    if identity["decomposer"] == "rule":
        return RULE_CACHE_FILE
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    return f"decompositions-llm-{digest}.jsonl"


def build_llm_decomposer(llm: LLMSettings, cache_dir: Path) -> LLMDecomposer:
    """The LLM decomposer of a mining run, its answers cached under `cache_dir`."""
    return LLMDecomposer(llm.backend(), cache_dir=cache_dir, max_tokens=llm.max_tokens)


__all__ = [
    "DECOMPOSERS",
    "DEFAULT_API_KEY_ENV",
    "LLMSettings",
    "build_llm_decomposer",
    "cache_file_name",
    "decomposer_identity",
]
