"""A test double of vLLM's OpenAI-compatible server: deterministic answers, a block prefix cache, injected faults.

It is not vLLM. It tokenises by one of its own tokenizers (tests/doubles/double_text.py: "estimate" follows the
4-character rule kvbake documents, "words" and "long-words" count differently), keeps a prefix cache of full
token blocks keyed by cache_salt, reports cached tokens by the block rule, and answers with the needle codes it
finds in the prompt by its own rule (or, with `cannot_recall`, with a digest of the prompt, as a model that cannot
recall). With max_model_len set it refuses longer requests as vLLM does (HTTP 400). With `batch` set it holds
completions so that concurrent ones are answered together, and a fault can hit only those (or only lone ones).
Faults (tests/doubles/double_faults.py) are set by constructor argument, by assigning `faults`, or by
POST /control/misbehave; POST /control/reset clears the cache, the faults and the request counters.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Callable

from tests.doubles.double_faults import BatchGate, Fault, Misbehaviour, misbehaviour_json, misbehaviour_update
from tests.doubles.double_text import TOKENIZERS, PrefixCacheModel, find_needle_codes, token_ids, token_pieces

__all__ = ["DEFAULT_MODEL", "DEFAULT_BLOCK", "Fault", "Misbehaviour", "OpenAIDouble", "answer_text"]

DEFAULT_MODEL = "kvbake-test-double"
DEFAULT_BLOCK = 384
INVALID_JSON = b'{"choices": [{"text": "cut off'

Answer = tuple[int, "dict[str, Any] | bytes"]


def answer_text(prompt: str, cached_tokens: int, faults: Misbehaviour, effects: dict[str, Any] | None = None) -> str:
    """The deterministic answer: the prompt's needle codes (none if it cannot recall), else a digest of the prompt."""
    effects = effects or {}
    codes = () if faults.cannot_recall else find_needle_codes(prompt)
    if faults.omit_last_code:
        codes = codes[:-1]
    if "code" in effects:
        codes = codes[:-1] + (effects["code"],)
    text = ", ".join(codes) if codes else "Summary " + hashlib.sha256(prompt.encode()).hexdigest()[:32]
    if faults.corrupt_hits and cached_tokens > 0:
        text = text[::-1]
    if faults.foreign_code:
        text = f"{text}, {faults.foreign_code}"
    if "truncate" in effects:
        text = text[: len(text) // 2]
    return "" if "empty" in effects else text


def _error(status: int, message: str) -> Answer:
    return status, {"object": "error", "message": message, "type": "TestDoubleError", "code": status}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class names it so
        """Keep test output quiet."""

    def _send(self, answer: Answer) -> None:
        status, body = answer
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _refused(self) -> bool:
        """vLLM started with an API key answers 401 to a /v1 request without `Authorization: Bearer KEY`."""
        key = self.server.double.api_key
        if key is None or not self.path.startswith("/v1") or self.headers.get("Authorization") == f"Bearer {key}":
            return False
        self._send((401, {"error": "Unauthorized"}))
        return True

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self._refused():
            return
        if self.path == "/v1/models":
            self._send(self.server.double.handle_models())
        elif self.path == "/metrics":
            self._send(self.server.double.handle_metrics())
        else:
            self._send(_error(404, f"no route GET {self.path}"))

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        if self._refused():
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._send(_error(400, "body is not JSON"))
            return
        double = self.server.double
        routes = {"/v1/completions": double.handle_completion, "/tokenize": double.handle_tokenize,
                  "/control/misbehave": double.handle_misbehave, "/control/reset": double.handle_reset}
        route = routes.get(self.path)
        self._send(route(body) if route else _error(404, f"no route POST {self.path}"))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64  # room for every concurrent request of a corruption set
    double: OpenAIDouble

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up (a timeout fault) closes its socket; that is expected, keep quiet."""


class OpenAIDouble:
    """Runs the test double on 127.0.0.1 on a free port; use it as a context manager."""

    def __init__(self, model: str = DEFAULT_MODEL, block: int = DEFAULT_BLOCK, faults: Misbehaviour | None = None,
                 tokenizer: str = "estimate", max_model_len: int | None = None, api_key: str | None = None) -> None:
        if tokenizer not in TOKENIZERS:
            raise ValueError(f"tokenizer {tokenizer!r} is not one of {sorted(TOKENIZERS)}")
        self.model, self.tokenizer, self.max_model_len = model, tokenizer, max_model_len
        self.api_key = api_key  # as vLLM's --api-key: every /v1 request must carry it
        self.cache = PrefixCacheModel(block)
        self.gate = BatchGate()
        self.faults = faults or Misbehaviour()
        self.metrics: Callable[[], str] | None = None  # the text of GET /metrics; None answers 404, as a serve without metrics
        self._received: list[dict[str, Any]] = []
        self._counts = {"completion": 0, "tokenize": 0, "models": 0}
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.double = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, name="openai-double", daemon=True
        )

    @property
    def url(self) -> str:
        """The base URL, e.g. http://127.0.0.1:PORT."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def received(self) -> tuple[dict[str, Any], ...]:
        """Every completion payload received so far, in arrival order."""
        with self._lock:
            return tuple(self._received)

    @property
    def counts(self) -> dict[str, int]:
        """How many requests of each kind arrived so far."""
        with self._lock:
            return dict(self._counts)

    def __enter__(self) -> OpenAIDouble:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._closing.set()  # wakes every request still held by a delay fault
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def count_tokens(self, text: str) -> int:
        """A text's length in this double's tokens."""
        return len(token_pieces(text, self.tokenizer))

    def _arrive(self, kind: str, body: Any = None) -> int:
        with self._lock:
            self._counts[kind] += 1
            if body is not None:
                self._received.append(body)
            return self._counts[kind]

    def _early(self, effects: dict[str, Any]) -> Answer | None:
        """The effects that replace the answer: a delay first, then an error status or a body that is not JSON."""
        if "delay" in effects:
            self._closing.wait(float(effects["delay"]))
        if "status" in effects:
            return _error(effects["status"], "injected failure")
        if "invalid_json" in effects:
            return 200, INVALID_JSON
        return None

    def _bad_request(self, body: Any) -> Answer | None:
        if not isinstance(body, dict) or not isinstance(body.get("prompt"), str) or not body["prompt"]:
            return _error(400, "prompt must be a non-empty string")
        if body.get("model") != self.model:
            return _error(404, f"model {body.get('model')!r} does not exist")
        if self.faults.fail_status is not None:
            return _error(self.faults.fail_status, "injected failure")
        return None

    def _too_long(self, prompt_tokens: int, max_tokens: int) -> Answer | None:
        if self.max_model_len is None or prompt_tokens + max_tokens <= self.max_model_len:
            return None
        return _error(400, f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                           f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the prompt, {max_tokens} in the "
                           "completion). Please reduce the length of the prompt or completion.")

    def handle_models(self) -> Answer:
        """Answer GET /v1/models."""
        effects = self.faults.selected("models", self._arrive("models"))
        early = self._early(effects)
        limit = {"max_model_len": self.max_model_len} if self.max_model_len else {}  # as vLLM lists each model
        entries = [] if "empty" in effects else [{"id": self.model, "object": "model", **limit}]
        return early or (200, {"object": "list", "data": entries})

    def handle_metrics(self) -> Answer:
        """Answer GET /metrics with the text `metrics` gives, or 404 when it is unset."""
        if self.metrics is None:
            return _error(404, "no metrics")
        return 200, self.metrics().encode()

    def handle_completion(self, body: Any) -> Answer:
        """Answer POST /v1/completions."""
        number = self._arrive("completion", body)
        refusal = self._bad_request(body)
        if refusal is not None:
            return refusal
        faults, max_tokens = self.faults, int(body.get("max_tokens", 16))
        salt = body.get("cache_salt")
        ids = token_ids(body["prompt"], self.tokenizer)
        batched = self.gate.hold(faults.batch, faults.batch_wait_s) if faults.holds(salt) else False
        effects = faults.selected("completion", number, salt, len(ids), body["prompt"], batched)
        early = self._early(effects) or self._too_long(len(ids), max_tokens)
        if early is not None:
            return early
        cached = self.cache.serve("" if faults.ignore_salt else str(salt or ""), ids)
        pieces = token_pieces(answer_text(body["prompt"], cached, faults, effects), self.tokenizer)[:max_tokens]
        prompt_tokens = len(ids) + int(effects.get("prompt_tokens", 0))
        usage: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": len(pieces),
                                 "total_tokens": prompt_tokens + len(pieces)}
        if "drop_details" not in effects:
            reported = effects.get("cached_tokens", max(0, cached + faults.cached_tokens_offset))
            usage["prompt_tokens_details"] = {"cached_tokens": reported}
        choice = {"index": 0, "text": "".join(pieces), "finish_reason": "stop", "logprobs": None}
        return 200, {"id": "cmpl-double", "object": "text_completion", "model": self.model,
                     "choices": [choice], "usage": usage}

    def handle_tokenize(self, body: Any) -> Answer:
        """Answer POST /tokenize with this double's token ids."""
        number = self._arrive("tokenize")
        refusal = self._bad_request(body)
        if refusal is not None:
            return refusal
        ids = token_ids(body["prompt"], self.tokenizer)
        effects = self.faults.selected("tokenize", number, None, len(ids))
        early = self._early(effects)
        if early is not None:
            return early
        answer: dict[str, Any] = {"count": len(ids), "max_model_len": self.max_model_len}
        return 200, answer if "drop_tokens" in effects else {**answer, "tokens": list(ids)}

    def handle_misbehave(self, body: Any) -> Answer:
        """Answer POST /control/misbehave: replace the named fault fields (faults: a list of Fault objects)."""
        try:
            self.faults = misbehaviour_update(self.faults, body)
        except (TypeError, ValueError) as err:
            return _error(400, str(err))
        return 200, misbehaviour_json(self.faults)

    def handle_reset(self, body: Any) -> Answer:
        """Answer POST /control/reset: clear the cache, the faults and the request counters."""
        self.cache.reset()
        self.faults = Misbehaviour()
        with self._lock:
            self._counts = dict.fromkeys(self._counts, 0)
        return 200, misbehaviour_json(self.faults)
