"""A test double of vLLM's OpenAI-compatible server: deterministic answers, a block prefix cache, switchable faults.

It is not vLLM. It tokenises by kvbake's corpus estimate (one token per 4 characters), keeps a prefix cache of full
token blocks keyed by cache_salt, reports cached tokens by the block rule, and answers with the needle codes found
in the prompt. Faults are switched on by constructor argument or by POST /control/misbehave.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from kvbake.corpus import CHARS_PER_TOKEN, estimated_token_pieces
from kvbake.needle import find_codes

DEFAULT_MODEL = "kvbake-test-double"
DEFAULT_BLOCK = 384


@dataclass(frozen=True)
class Misbehaviour:
    """Faults the double can inject; the default is a correct server."""

    foreign_code: str | None = None  # appended to every answer
    cached_tokens_offset: int = 0  # added to every reported cached count
    ignore_salt: bool = False  # cache hits leak across salts
    fail_status: int | None = None  # completions and tokenize answer with this HTTP status
    omit_last_code: bool = False  # the last needle code is left out of answers
    corrupt_hits: bool = False  # a request with cached tokens answers differently


class PrefixCacheModel:
    """Token ids and a chain-hashed cache of full blocks, safe to use from many threads."""

    def __init__(self, block: int) -> None:
        self.block = block
        self._lock = threading.Lock()
        self._vocab: dict[str, int] = {}
        self._blocks: set[str] = set()

    def tokenize(self, text: str) -> tuple[int, ...]:
        """Map each estimated token (a 4-character piece) to a stable id."""
        with self._lock:
            return tuple(self._vocab.setdefault(piece, len(self._vocab)) for piece in estimated_token_pieces(text))

    def _block_hashes(self, salt: str, ids: tuple[int, ...], count: int) -> list[str]:
        hashes, parent = [], salt
        for index in range(count):
            chunk = ids[index * self.block : (index + 1) * self.block]
            parent = hashlib.sha256(f"{parent}|{','.join(map(str, chunk))}".encode()).hexdigest()
            hashes.append(parent)
        return hashes

    def serve(self, salt: str, ids: tuple[int, ...]) -> int:
        """Return the cached tokens for a prompt, then cache its full blocks; the last token is never a hit."""
        usable = self._block_hashes(salt, ids, (len(ids) - 1) // self.block)
        with self._lock:
            hits = next((i for i, key in enumerate(usable) if key not in self._blocks), len(usable))
            self._blocks.update(self._block_hashes(salt, ids, len(ids) // self.block))
        return hits * self.block

    def reset(self) -> None:
        """Forget every cached block."""
        with self._lock:
            self._blocks.clear()


def answer_text(prompt: str, cached_tokens: int, faults: Misbehaviour) -> str:
    """The deterministic answer: the prompt's needle codes, else a digest of the prompt; faults applied."""
    codes = find_codes(prompt)
    if faults.omit_last_code:
        codes = codes[:-1]
    text = ", ".join(codes) if codes else "Summary " + hashlib.sha256(prompt.encode()).hexdigest()[:32]
    if faults.corrupt_hits and cached_tokens > 0:
        text = text[::-1]
    if faults.foreign_code:
        text = f"{text}, {faults.foreign_code}"
    return text


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class names it so
        """Keep test output quiet."""

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        self._send(status, {"object": "error", "message": message, "type": "TestDoubleError", "code": status})

    def _json_body(self) -> Any:
        length = int(self.headers.get("Content-Length", "0"))
        return json.loads(self.rfile.read(length) or b"{}")

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        double = self.server.double
        if self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": double.model, "object": "model"}]})
        else:
            self._error(404, f"no route GET {self.path}")

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        try:
            body = self._json_body()
        except ValueError:
            self._error(400, "body is not JSON")
            return
        routes = {
            "/v1/completions": self.server.double.handle_completion,
            "/tokenize": self.server.double.handle_tokenize,
            "/control/misbehave": self.server.double.handle_misbehave,
            "/control/reset": self.server.double.handle_reset,
        }
        route = routes.get(self.path)
        if route is None:
            self._error(404, f"no route POST {self.path}")
            return
        status, answer = route(body)
        self._send(status, answer)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64  # room for every concurrent request of a corruption set
    double: OpenAIDouble


class OpenAIDouble:
    """Runs the test double on 127.0.0.1 on a free port; use it as a context manager."""

    def __init__(
        self, model: str = DEFAULT_MODEL, block: int = DEFAULT_BLOCK, faults: Misbehaviour | None = None
    ) -> None:
        self.model = model
        self.cache = PrefixCacheModel(block)
        self.faults = faults or Misbehaviour()
        self._received: list[dict[str, Any]] = []
        self._lock = threading.Lock()
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

    def __enter__(self) -> OpenAIDouble:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _bad_request(self, body: Any) -> tuple[int, dict[str, Any]] | None:
        if not isinstance(body, dict) or not isinstance(body.get("prompt"), str) or not body["prompt"]:
            return 400, {"object": "error", "message": "prompt must be a non-empty string", "code": 400}
        if body.get("model") != self.model:
            return 404, {"object": "error", "message": f"model {body.get('model')!r} does not exist", "code": 404}
        if self.faults.fail_status is not None:
            return self.faults.fail_status, {"object": "error", "message": "injected failure", "code": 500}
        return None

    def handle_completion(self, body: Any) -> tuple[int, dict[str, Any]]:
        """Answer POST /v1/completions."""
        with self._lock:
            self._received.append(body)
        refusal = self._bad_request(body)
        if refusal is not None:
            return refusal
        faults = self.faults
        ids = self.cache.tokenize(body["prompt"])
        cached = self.cache.serve("" if faults.ignore_salt else str(body.get("cache_salt") or ""), ids)
        text = answer_text(body["prompt"], cached, faults)[: int(body.get("max_tokens", 16)) * CHARS_PER_TOKEN]
        completion_tokens = len(estimated_token_pieces(text))
        usage = {
            "prompt_tokens": len(ids),
            "completion_tokens": completion_tokens,
            "total_tokens": len(ids) + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": max(0, cached + faults.cached_tokens_offset)},
        }
        choice = {"index": 0, "text": text, "finish_reason": "stop", "logprobs": None}
        return 200, {"id": "cmpl-double", "object": "text_completion", "model": self.model,
                     "choices": [choice], "usage": usage}

    def handle_tokenize(self, body: Any) -> tuple[int, dict[str, Any]]:
        """Answer POST /tokenize with the estimated-token ids."""
        refusal = self._bad_request(body)
        if refusal is not None:
            return refusal
        ids = self.cache.tokenize(body["prompt"])
        return 200, {"count": len(ids), "tokens": list(ids)}

    def handle_misbehave(self, body: Any) -> tuple[int, dict[str, Any]]:
        """Answer POST /control/misbehave: replace the named fault fields, keep the others."""
        names = {field.name for field in dataclasses.fields(Misbehaviour)}
        if not isinstance(body, dict) or not set(body) <= names:
            return 400, {"object": "error", "message": f"fields must be among {sorted(names)}", "code": 400}
        self.faults = dataclasses.replace(self.faults, **body)
        return 200, dataclasses.asdict(self.faults)

    def handle_reset(self, body: Any) -> tuple[int, dict[str, Any]]:
        """Answer POST /control/reset: clear the cache and the faults."""
        self.cache.reset()
        self.faults = Misbehaviour()
        return 200, dataclasses.asdict(self.faults)
