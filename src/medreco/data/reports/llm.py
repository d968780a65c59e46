"""LLM backend for report decomposition, with the MedReCo paper's prompts (Appendix S3).

Two ways to reach a model, both offline-capable:
- `OpenAIChatBackend`: any OpenAI-compatible chat-completions endpoint (vLLM, llama.cpp server,
  a hospital gateway...), with retries and backoff, a rate limit, and a timeout;
- `TransformersChatBackend`: a local causal LM through transformers' chat template.
Responses are cached on disk (keyed by model and prompt), JSON answers are validated (and asked
again when malformed), and the mention status of what the model extracts is assigned by the same
NegEx scopes as the rule-based backend."""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import logging
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from abc import ABC, abstractmethod
from pathlib import Path

from ...atomic import write_text_atomically
from ...errors import MedReCoError
from .decomposition import RuleBasedDecomposer
from .ontology import Entity, Ontology
from .scopes import sentence_status
from .sections import split_sections, split_sentences
from .statement import (
    EmptyReportError,
    EntityStatement,
    MentionStatus,
    ReportDecomposer,
    ReportDecomposition,
    aggregate_status,
)

logger = logging.getLogger(__name__)

PROMPT_ANATOMY = (  # Prompt S1
    "You are a board-certified radiologist. Your task is to extract descriptive information pertaining to a specific "
    "anatomical structure ({anatomy}) from the provided medical imaging diagnostic report. Please adhere to the following "
    "guidelines:\n- Extract with Precision: Identify and extract only the information that directly references the "
    "{anatomy}, including any noted abnormalities, lesions, or pathological findings associated with it.\n- Specify "
    "Anatomical Details: If the report mentions particular regions, subparts, or specific anatomical features of the "
    "{anatomy}, ensure these are included in your description. This may involve affected areas, normal characteristics, "
    "or other notable observations.\n- Be Concise and Direct: Present the extracted information in a clear and "
    "straightforward manner, using original wording from the report. Avoid adding interpretations, summaries, or external "
    "context.\n- Formatting Requirements: Return only a single block of text containing the consolidated descriptive "
    "information related to the {anatomy}. Do not include prefixes, headings, bullet points, or any additional commentary. "
    "Even if multiple distinct sections or features are described, integrate them into one coherent paragraph using "
    "standard medical terminology and reporting conventions.\n\nReport:\n{report}"
)
PROMPT_DISEASE = (  # Prompt S2
    "You are a board-certified radiologist. Your task is to extract descriptive information related to the specific "
    'condition "{disease}" from the provided medical imaging diagnostic report. Please adhere to the following guidelines:'
    '\n- Precise Extraction: Identify and extract only information that directly references "{disease}", including any '
    "documented findings associated with it.\n- Verbatim Retention: Use the original wording from the report. Present the "
    "extracted information clearly and directly, without adding interpretation, summary, or external context.\n- "
    "Integrated Output: Return only a single, unified text block containing all extracted descriptive information related "
    'to "{disease}". Use standard medical terminology and reporting conventions to combine distinct observations or '
    "features into one coherent paragraph.\n- Strict Formatting: Do not include prefixes, headings, bullet points, or any "
    "additional commentary.\n\nReport:\n{report}"
)
PROMPT_ABNORMALITY = (  # Prompt S3
    "You are a professional radiologist. I will provide you with the following information:\n- The name of a specific "
    "anatomical structure: {anatomy}\n- A descriptive text from a real medical report regarding this structure\n- The name "
    "of a potential abnormality associated with this structure: {abnormality}\nPlease complete the following task:\n"
    "Strictly extract from the provided medical report all content related to the abnormality {abnormality}. Adhere to the "
    "following principles during extraction:\n- Focus only on content directly pertaining to the presence, morphology, "
    "location, size, or characteristics of {abnormality};\n- You may paraphrase the original text appropriately to ensure "
    "coherence and completeness, but do not add any information not mentioned in the report;\n- If the abnormality is not "
    "mentioned at all in the report, the output value should be null;\n- The final output should consist of 1--4 complete "
    'sentences forming a coherent "overall description of the abnormality." Do not use fragmented phrases or isolated '
    'keywords.\nProvide the output in the following JSON format:\n{{\n"abnormality description": "xxx" // or null\n}}\n'
    "Important requirements:\n- Strictly base the extraction on the original report text. Do not make any inferences, "
    "assumptions, or incorporate external knowledge;\n- If the report explicitly states the absence of the abnormality "
    '(e.g., "no evidence of ..."), extract such statements truthfully without omission;\n- Maintain medical accuracy and '
    "professionalism in the description.\n\nReport:\n{report}"
)
PROMPT_IMAGE_DEPENDENCY = (  # Prompt S6
    "You are a professional radiologist. You will be given a question below. Please determine whether answering this "
    "question requires examining two medical images. If two images are strictly necessary to answer the question, respond "
    'with "yes"; otherwise, respond with "no".\nRespond with only "yes" or "no" -- no explanation or additional text.\n'
    "Question: {question}\nAnswer:"
)
PROMPT_VQA = (  # Prompt S4
    "As a professional radiologist, you will receive two imaging reports from different cases. Both reports describe a specific abnormality within the anatomical region of [{anatomy}]. To assist your comprehensive understanding of the imaging findings, I will also provide the overall imaging descriptions of this anatomical region from both reports for contextual reference. Your task is to design several multiple-choice questions based on the specific imaging characteristics of the [{abnormality}] finding, focusing on comparing its manifestations between the two images.\n"
    "Specific requirements are as follows:\n1. Question Focus: Questions should focus specifically on the differential manifestations of the abnormality [{abnormality}] between the two images. Aspects for comparison include, but are not limited to: presence/absence, location, size, morphology, margins, internal characteristics, associated findings, or potential etiology. The overall imaging appearance of the [{anatomy}] may be used as auxiliary reference context where appropriate.\n"
    "2. Comprehensive Coverage: Questions should cover all identifiable dimensions of difference, ensuring variety and that no key comparative points are omitted.\n"
    "3. Answer and Rationale: Each question must include the correct answer (e.g., A, B, C, D) accompanied by a concise rationale explaining the basis for the judgment.\n"
    '4. Perspective of Expression: The wording of questions and rationales should adopt an "image comparison" perspective. References to the cases must be specific; for example, use "the imaging from Case A" and "the imaging from Case B," avoiding generic terms like "one image" or "the other image." Additionally, refrain from using phrases such as "the report indicates," reflecting a scenario where judgment is based solely on the imaging information itself.\n'
    "5. Relevance and Specificity: All questions must strictly pertain to the actual differences present between the two images. Avoid content related to unchanged features or aspects irrelevant to the comparison.\n"
    "6. Information Fidelity: Questions, options, answers, and rationales must be strictly based on the provided factual information. Do not fabricate or introduce details not mentioned.\n"
    'Output Format (JSON): a list of objects, each {{"question": "...", "condition": "[{anatomy}]_and_[{abnormality}]", "content_type": "Presence, Location, Size, ...", "options": {{"A": "...", "B": "...", "C": "...", "D": "..."}}, "answer": "A", "reason": "..."}}\n\n'
    "Case A, {abnormality}: {text_a}\nCase A, {anatomy}: {context_a}\nCase B, {abnormality}: {text_b}\nCase B, {anatomy}: {context_b}"
)
PROMPT_OPEN_ENDED = (  # Prompt S5
    "You will receive a multiple-choice question about two medical images, which includes the question stem, answer options, and an explanation. Your task is to convert this question into a short-answer format (question-answer pair) while strictly adhering to the image comparison perspective.\n"
    'Rules:\n- Use an "image comparison" perspective in both the question and the answer.\n- Explicitly reference the case source, e.g., "The image from Case A shows...", "The image from Case B demonstrates...". Avoid vague terms like "one image" or "a certain scan".\n- Avoid phrases such as "the report indicates" to ensure interpretation is based solely on the image information.\n- Do not introduce external information or subjective inferences. Base the response exclusively on the provided image details.\n'
    'Output Format: [{{"question": "...", "answer": "..."}}]\n\nQuestion: {question}\nOptions: {options}\nAnswer: {answer}\nExplanation: {reason}'
)
_NULL_TEXT = {"", "null", "none", "n/a", "not mentioned", "no information"}


class LLMError(MedReCoError, RuntimeError):
    """The language model could not be reached or kept answering in the wrong format."""


class ChatBackend(ABC):
    """Sends chat messages, returns the reply text."""

    model: str

    @abstractmethod
    def complete(self, messages: list[dict], max_tokens: int = 512) -> str: ...


class LLMEndpointError(MedReCoError, ValueError):
    """An endpoint URL the OpenAI-compatible backend refuses to send reports (and a key) to:
    plain HTTP to a host other than loopback, a scheme other than http(s), credentials given twice."""


class LLMRedirectError(LLMError):
    """The endpoint answered with a redirect; redirects are not followed, so that the API key and
    the reports never reach a server the user did not name."""


# Query parameters whose values are credentials (api_key, key, token, access_token, X-Amz-Signature...)
_SECRET_QUERY_NAME = re.compile(r"key|token|secret|pass|pwd|auth|sig|credential|session|code", re.I)
_SHORTEST_SCRUBBED_SECRET = 4  # shorter values would blank out ordinary words of a message


def _redact_query(query: str) -> str:
    pairs = []
    for pair in query.split("&"):
        name, equals, _ = pair.partition("=")
        secret = equals and _SECRET_QUERY_NAME.search(urllib.parse.unquote_plus(name))
        pairs.append(f"{name}=***" if secret else pair)
    return "&".join(pairs)


def redact_url(url: str) -> str:
    """`url` fit for an error message, a log or a repr: user:password@ and the values of
    credential-like query parameters replaced by ***, the fragment dropped."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # e.g. an unclosed IPv6 bracket: redact by pattern
        url = re.sub(r"//[^/?#]*@", "//***@", url.split("#", 1)[0])
        base, question, query = url.partition("?")
        return base + question + _redact_query(query) if question else base
    netloc = "***@" + parts.netloc.rpartition("@")[2] if "@" in parts.netloc else parts.netloc
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, _redact_query(parts.query), ""))


def _is_loopback(host: str | None) -> bool:
    """localhost, 127.0.0.0/8 or ::1 (also as an IPv4-mapped address)."""
    if not host:
        return False
    host = host.rstrip(".").lower()
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def _chat_completions_url(base_url: str) -> str:
    """`base_url` with `/chat/completions` appended to its path (a query such as `?api-version=` kept)."""
    try:
        parts = urllib.parse.urlsplit(base_url)
    except ValueError:  # refused, with a redacted message, by OpenAIChatBackend
        return base_url.rstrip("/") + "/chat/completions"
    return urllib.parse.urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/chat/completions"))


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """Raises `LLMRedirectError` on every 3xx redirect instead of following it (urllib's default
    handler re-sends the Authorization header to whatever host the Location names)."""

    def http_error_302(self, req, fp, code, msg, headers):
        location = headers.get("Location") or headers.get("URI")
        target = redact_url(urllib.parse.urljoin(req.full_url, location)) if location else "no Location given"
        fp.close()
        raise LLMRedirectError(
            f"{redact_url(req.full_url)} answered HTTP {code}, a redirect ({target}); redirects are not "
            "followed (they would carry the API key to another server): set base_url to the final address"
        )

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


class OpenAIChatBackend(ChatBackend):
    """An OpenAI-compatible `/chat/completions` endpoint. Greedy decoding (temperature 0).

    api_key: sent as `Authorization: Bearer`; credentials in the URL (`https://user:pass@host`)
    are sent as HTTP basic authentication instead, and key-like query parameters (`?api_key=`)
    are kept. Credentials never appear in errors, logs or the repr, and redirects are refused
    (`LLMRedirectError`) rather than followed with the key.
    allow_insecure_http: plain `http://` is accepted for loopback only (localhost, 127.0.0.0/8,
    ::1); True also allows it to other hosts, sending the key and the reports unencrypted.
    max_retries/backoff: retries on connection errors, 429 and 5xx with exponential backoff;
    requests_per_second: a client-side rate limit shared by the threads using this backend."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 4,
        backoff: float = 1.0,
        requests_per_second: float | None = None,
        allow_insecure_http: bool = False,
    ):
        endpoint = _chat_completions_url(base_url)
        self.url = redact_url(endpoint)  # for messages; the request goes to self._endpoint
        self._endpoint, userinfo_auth, self._secrets = self._parse_endpoint(endpoint, allow_insecure_http)
        if api_key and userinfo_auth:
            raise LLMEndpointError(f"{self.url}: credentials both in the URL and in api_key; give only api_key")
        self.model, self.api_key, self.timeout = model, api_key, timeout
        self._authorization = f"Bearer {api_key}" if api_key else userinfo_auth
        if api_key:
            self._secrets.append(api_key)
        self.max_retries, self.backoff = max_retries, backoff
        self.min_interval = 1.0 / requests_per_second if requests_per_second else 0.0
        self._lock, self._last = threading.Lock(), 0.0
        self._opener = urllib.request.build_opener(_RefuseRedirects())

    def _parse_endpoint(self, endpoint: str, allow_insecure_http: bool) -> tuple[str, str | None, list[str]]:
        """The URL to send to (without user:password@), the basic-auth header its user:password@
        gives, and the secret strings to keep out of messages."""
        try:
            parts = urllib.parse.urlsplit(endpoint)
            _ = parts.port  # raises ValueError on a malformed port
        except ValueError as error:
            raise LLMEndpointError(f"{self.url}: not a valid URL ({error})") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise LLMEndpointError(f"{self.url}: not an http:// or https:// URL with a host")
        if parts.scheme == "http" and not _is_loopback(parts.hostname):
            if not allow_insecure_http:
                raise LLMEndpointError(
                    f"{self.url}: plain HTTP to a host other than loopback would send the API key and the "
                    "reports unencrypted; use https://, or allow_insecure_http=True on a network you trust"
                )
            logger.warning("sending reports to %s over unencrypted HTTP (allow_insecure_http)", self.url)
        secrets = [
            value
            for pair in parts.query.split("&")
            for name, _, value in [pair.partition("=")]
            if value and _SECRET_QUERY_NAME.search(urllib.parse.unquote_plus(name))
        ]
        secrets += [urllib.parse.unquote_plus(value) for value in secrets]
        authorization = None
        if "@" in parts.netloc:
            user, password = urllib.parse.unquote(parts.username or ""), urllib.parse.unquote(parts.password or "")
            secrets += [parts.netloc.rpartition("@")[0], user, password]
            authorization = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
            parts = parts._replace(netloc=parts.netloc.rpartition("@")[2])
        return urllib.parse.urlunsplit(parts), authorization, secrets

    def _scrub(self, text: str) -> str:
        """`text` (an exception's message) with every credential of this backend replaced by ***."""
        for secret in sorted(set(self._secrets), key=len, reverse=True):
            if len(secret) >= _SHORTEST_SCRUBBED_SECRET:
                text = text.replace(secret, "***")
        return text

    def __repr__(self) -> str:
        return f"{type(self).__name__}(url={self.url!r}, model={self.model!r})"

    def _wait_for_slot(self) -> None:
        with self._lock:
            delay = self._last + self.min_interval - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self._last = time.monotonic()

    def complete(self, messages: list[dict], max_tokens: int = 512) -> str:
        body = json.dumps(
            {"model": self.model, "messages": messages, "temperature": 0, "max_tokens": max_tokens}
        ).encode()
        last_error: Exception | None = None
        for attempt in range(self.max_retries + 1):
            self._wait_for_slot()
            request = urllib.request.Request(
                self._endpoint, data=body, headers={"Content-Type": "application/json"}, method="POST"
            )
            if self._authorization:  # never copied onto a redirected request
                request.add_unredirected_header("Authorization", self._authorization)
            try:
                with self._opener.open(request, timeout=self.timeout) as response:
                    payload = json.loads(response.read())
                return payload["choices"][0]["message"]["content"] or ""
            except urllib.error.HTTPError as error:
                last_error = error
                if error.code != 429 and error.code < 500:
                    raise LLMError(f"{self.url} refused the request: HTTP {error.code}") from None
            except (urllib.error.URLError, TimeoutError, ConnectionError, json.JSONDecodeError, KeyError) as error:
                last_error = error
            if attempt < self.max_retries:
                delay = self.backoff * 2**attempt
                logger.info("%s: %s, retrying in %.2f s", self.url, self._scrub(str(last_error)), delay)
                time.sleep(delay)
        raise LLMError(
            f"{self.url}: no valid answer after {self.max_retries + 1} attempts ({self._scrub(str(last_error))})"
        )


class TransformersChatBackend(ChatBackend):
    """A local causal LM (any `AutoModelForCausalLM` with a chat template), greedy decoding."""

    def __init__(self, model, tokenizer, name: str | None = None):
        self.model_obj, self.tokenizer = model.eval(), tokenizer
        self.model = name or getattr(model.config, "_name_or_path", "") or type(model).__name__

    @classmethod
    def from_pretrained(cls, name_or_path: str, **kwargs) -> TransformersChatBackend:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        return cls(
            AutoModelForCausalLM.from_pretrained(name_or_path, **kwargs),
            AutoTokenizer.from_pretrained(name_or_path),
            name_or_path,
        )

    def complete(self, messages: list[dict], max_tokens: int = 512) -> str:
        import torch

        inputs = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        inputs = {k: inputs[k] for k in ("input_ids", "attention_mask") if k in inputs}  # e.g. no token_type_ids
        with torch.no_grad():
            output = self.model_obj.generate(**inputs, max_new_tokens=max_tokens, do_sample=False)
        return self.tokenizer.decode(output[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)


class CachedChat:
    """A backend with an on-disk answer cache (one JSON file per model+prompt, written atomically)."""

    def __init__(self, backend: ChatBackend, cache_dir: str | Path | None = None):
        self.backend = backend
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.calls = 0

    def complete(self, messages: list[dict], max_tokens: int = 512) -> str:
        key = hashlib.sha256(json.dumps([self.backend.model, messages, max_tokens]).encode()).hexdigest()
        path = self.cache_dir / key[:2] / f"{key}.json" if self.cache_dir else None
        if path is not None and path.exists():
            try:
                return json.loads(path.read_text())["answer"]
            except (json.JSONDecodeError, KeyError):
                logger.warning("ignoring a damaged LLM cache entry %s", path.name)
        self.calls += 1
        answer = self.backend.complete(messages, max_tokens)
        if path is not None:
            write_text_atomically(path, json.dumps({"answer": answer}))
        return answer


def parse_json_answer(text: str, key: str) -> str | None:
    """The value of `key` in the first JSON object of a reply (code fences and comments tolerated)."""
    cleaned = re.sub(r"```(?:json)?", "", text)
    cleaned = re.sub(r"//[^\n]*", "", cleaned)
    match = re.search(r"\{.*\}", cleaned, re.S)
    if not match:
        raise ValueError("no JSON object in the reply")
    value = json.loads(match.group())
    if not isinstance(value, dict) or key not in value:
        raise ValueError(f"the JSON object has no {key!r}")
    result = value[key]
    if result is not None and not isinstance(result, str):
        raise ValueError(f"{key!r} must be a string or null")
    return result


class LLMDecomposer(ReportDecomposer):
    """Decomposition with a language model and the paper's prompts S1 (anatomy), S2 (disease) and
    S3 (abnormality, JSON). Malformed JSON is asked for again up to `format_retries` times."""

    def __init__(
        self,
        backend: ChatBackend,
        ontology: Ontology | None = None,
        cache_dir: str | Path | None = None,
        format_retries: int = 2,
        max_tokens: int = 300,
    ):
        super().__init__(ontology)
        self.chat = CachedChat(backend, cache_dir)
        self.format_retries, self.max_tokens = format_retries, max_tokens
        self._status = RuleBasedDecomposer(self.ontology)

    def extract(self, report: str, entity: Entity) -> str | None:
        """The model's text about one entity, or None when the report does not mention it."""
        if entity.level == "abnormal":
            prompt = PROMPT_ABNORMALITY.format(anatomy=entity.anatomy, abnormality=entity.term, report=report)
            messages = [{"role": "user", "content": prompt}]
            for _ in range(self.format_retries + 1):
                reply = self.chat.complete(messages, self.max_tokens)
                try:
                    return parse_json_answer(reply, "abnormality description")
                except (ValueError, json.JSONDecodeError) as error:
                    logger.info("malformed answer for %s (%s), asking again", entity.id, error)
                    messages = [
                        *messages[:1],
                        {"role": "assistant", "content": reply},
                        {
                            "role": "user",
                            "content": 'Answer with the JSON object only: {"abnormality description": "..."} or null.',
                        },
                    ]
            raise LLMError(f"the model kept answering without the JSON object for {entity.id}")
        template = PROMPT_ANATOMY if entity.level == "anatomy" else PROMPT_DISEASE
        prompt = template.format(anatomy=entity.term, disease=entity.term, report=report)
        text = self.chat.complete([{"role": "user", "content": prompt}], self.max_tokens).strip()
        return None if text.lower().strip(" .") in _NULL_TEXT else text

    def _status_of(self, text: str, entity: Entity) -> MentionStatus:
        statuses = []
        for sentence in split_sentences(text):
            mentions = self._status.find_mentions(sentence, [entity])
            if mentions:
                statuses += [self._status.mention_status(sentence, start, end) for start, end, _ in mentions]
            else:
                statuses.append(sentence_status(sentence))
        return aggregate_status(statuses) if statuses else MentionStatus.NOT_MENTIONED

    def decompose(self, report: str, modality: str, entities: list[Entity] | None = None) -> ReportDecomposition:
        if not report or not report.strip():
            raise EmptyReportError("the report is empty")
        family = self.ontology.family_of(modality)
        entities = list(entities) if entities is not None else self.ontology.entities(family)
        statements = {}
        for entity in entities:
            text = self.extract(report, entity)
            if text is None:
                statements[entity.id] = EntityStatement(entity.id)
                continue
            statements[entity.id] = EntityStatement(entity.id, self._status_of(text, entity), split_sentences(text))
        return ReportDecomposition(family, split_sections(report), statements)


def json_payload(text: str):
    cleaned = re.sub(r"```(?:json)?", "", text)
    match = re.search(r"(\[.*\]|\{.*\})", cleaned, re.S)
    if not match:
        raise ValueError("no JSON in the reply")
    return json.loads(match.group())


__all__ = [
    "CachedChat",
    "ChatBackend",
    "LLMDecomposer",
    "LLMEndpointError",
    "LLMError",
    "LLMRedirectError",
    "OpenAIChatBackend",
    "PROMPT_ABNORMALITY",
    "PROMPT_ANATOMY",
    "PROMPT_DISEASE",
    "PROMPT_IMAGE_DEPENDENCY",
    "PROMPT_OPEN_ENDED",
    "PROMPT_VQA",
    "TransformersChatBackend",
    "json_payload",
    "parse_json_answer",
    "redact_url",
]
