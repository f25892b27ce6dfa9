"""A small client for vLLM's OpenAI-compatible API: completions with cached-token counts, models, tokenize."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import functools
import ssl
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from types import TracebackType
from typing import Any

import httpx

from kvbake.errors import UsageError, ValidationStop
from kvbake.operate.core.completions import Completion, CompletionRequest

DEFAULT_TIMEOUT_S = 900.0
BODY_EXCERPT_CHARS = 200
REFUSED_ACCESS = (401, 403)  # vLLM's answer to a /v1 request without its --api-key
BARRIER_TIMEOUT_S = 30.0  # how long the threads of concurrent requests wait for each other before sending


def completion_payload(model: str, request: CompletionRequest) -> dict[str, Any]:
    """The JSON body of POST /v1/completions: greedy (temperature 0), with cache_salt and ignore_eos only when set."""
    payload: dict[str, Any] = {
        "model": model,
        "prompt": request.prompt,
        "max_tokens": request.max_tokens,
        "temperature": 0,
    }
    if request.cache_salt is not None:
        payload["cache_salt"] = request.cache_salt
    if request.ignore_eos:
        payload["ignore_eos"] = True
    return payload


def _body_error(url: str, what: str) -> ValidationStop:
    return ValidationStop(
        f"{url} returned an unexpected body: {what}",
        fix="point --endpoint at a vLLM OpenAI-compatible server started with --enable-prompt-tokens-details",
    )


def parse_completion(body: Any, url: str) -> Completion:
    """Read text, usage.prompt_tokens and usage.prompt_tokens_details.cached_tokens from a completion body."""
    try:
        text = body["choices"][0]["text"]
        usage = body["usage"]
        prompt_tokens = usage["prompt_tokens"]
    except (KeyError, IndexError, TypeError) as err:
        raise _body_error(url, f"no choices[0].text or usage.prompt_tokens ({err!r})") from err
    details = usage.get("prompt_tokens_details") if isinstance(usage, Mapping) else None
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    if not isinstance(cached, int):
        raise _body_error(url, "usage.prompt_tokens_details.cached_tokens is missing")
    if not isinstance(text, str) or not isinstance(prompt_tokens, int):
        raise _body_error(url, "choices[0].text is not a string or usage.prompt_tokens is not an integer")
    return Completion(text=text, prompt_tokens=prompt_tokens, cached_tokens=cached)


def parse_model_ids(body: Any, url: str) -> tuple[str, ...]:
    """Read the model ids from a GET /v1/models body."""
    try:
        return tuple(str(entry["id"]) for entry in body["data"])
    except (KeyError, TypeError) as err:
        raise _body_error(url, f"no data[].id ({err!r})") from err


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One verifying TLS context for every client; building it loads the CA bundle, which is slow."""
    return httpx.create_ssl_context()


class OpenAIClient:
    """Talks to one OpenAI-compatible server; safe to share between threads (httpx pools the connections)."""

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        api_key: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.sends_key = bool(api_key)
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s, headers=headers, verify=_tls_context())
        self._model = model

    def __enter__(self) -> OpenAIClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the pooled connections."""
        self._http.close()

    def _call(self, method: str, path: str, payload: Mapping[str, Any] | None = None) -> Any:
        url = f"{self.base_url}{path}"
        try:
            response = self._http.request(method, path, json=payload)
        except (httpx.HTTPError, httpx.InvalidURL) as err:
            raise ValidationStop(
                f"cannot reach {url}: {type(err).__name__}: {err}",
                fix="start the serve, check the endpoint URL and that it listens on that address",
            ) from err
        if response.status_code in REFUSED_ACCESS:
            # no validation failure: the run cannot ask the serve anything, so it stops before judging (and never rolls back)
            sent = "the API key sent is not the serve's own" if self.sends_key else "no API key was sent"
            raise UsageError(f"{url} refused the request (HTTP {response.status_code}): {sent}",
                             fix="export the serve's API key where kvbake runs, as VLLM_API_KEY (or the variable "
                                 "--api-key-env names), then run validate again")
        if response.is_error:
            excerpt = " ".join(response.text.split())[:BODY_EXCERPT_CHARS]
            raise ValidationStop(
                f"{url} answered HTTP {response.status_code}: {excerpt}",
                fix="read the serve log for this request and restore the base serve if it is unhealthy",
            )
        try:
            return response.json()
        except ValueError as err:
            raise _body_error(url, "not JSON") from err

    def models(self) -> tuple[str, ...]:
        """The model ids the server offers (GET /v1/models)."""
        return parse_model_ids(self._call("GET", "/v1/models"), f"{self.base_url}/v1/models")

    def resolve_model(self) -> str:
        """The model given at construction, else the first one the server lists (asked once)."""
        if self._model is None:
            ids = self.models()
            if not ids:
                raise ValidationStop(
                    f"{self.base_url}/v1/models lists no model", fix="wait until the serve has loaded its model"
                )
            self._model = ids[0]
        return self._model

    def complete(self, request: CompletionRequest) -> Completion:
        """Send one greedy completion (POST /v1/completions) and read its text and token counts."""
        body = self._call("POST", "/v1/completions", completion_payload(self.resolve_model(), request))
        return parse_completion(body, f"{self.base_url}/v1/completions")

    def complete_many(self, requests: Sequence[CompletionRequest], max_workers: int = 16) -> tuple[Completion, ...]:
        """Send requests concurrently from a thread pool, together when the pool has a thread for each; every request
        is sent and awaited, then the first failure in request order is raised. Results keep the order of the requests."""
        self.resolve_model()  # ask for the model once, before the threads start
        workers = max(1, min(max_workers, len(requests)))
        start = threading.Barrier(workers) if workers == len(requests) else None

        def send(request: CompletionRequest) -> Completion:
            if start is not None:
                try:
                    start.wait(timeout=BARRIER_TIMEOUT_S)
                except threading.BrokenBarrierError:
                    pass  # a thread that did not start in time: send anyway
            return self.complete(request)

        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(send, request) for request in requests]
            wait(futures)
        return tuple(future.result() for future in futures)

    def metrics_text(self) -> str | None:
        """The serve's Prometheus metrics (GET /metrics), or None when it does not answer them."""
        try:
            response = self._http.get("/metrics")
        except (httpx.HTTPError, httpx.InvalidURL):
            return None
        return response.text if response.status_code == 200 else None

    def tokenize(self, prompt: str) -> tuple[int, ...]:
        """The server's token ids for a prompt (vLLM's POST /tokenize), for exact shared-prefix lengths."""
        body = self._call("POST", "/tokenize", {"model": self.resolve_model(), "prompt": prompt})
        tokens = body.get("tokens") if isinstance(body, Mapping) else None
        if not isinstance(tokens, list):
            raise _body_error(f"{self.base_url}/tokenize", "no tokens list")
        return tuple(int(token) for token in tokens)
