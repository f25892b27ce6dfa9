"""The OpenAI client at its edges, against the loopback test double: the URL, the model asked once, error excerpts,
metrics, tokenize bodies, concurrent sends; and the bearer header against a loopback server that records it."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from kvbake.errors import ValidationStop
from kvbake.operate.adapters.openai_client import (
    BODY_EXCERPT_CHARS, CompletionRequest, OpenAIClient, parse_completion, parse_model_ids,
)
from tests.doubles.openai_double import DEFAULT_MODEL, Fault, Misbehaviour, OpenAIDouble


@pytest.fixture
def double() -> Iterator[OpenAIDouble]:
    with OpenAIDouble() as running:
        yield running


def test_a_trailing_slash_of_the_endpoint_is_dropped(double: OpenAIDouble) -> None:
    with OpenAIClient(double.url + "/", timeout_s=10) as client:
        assert client.base_url == double.url
        assert client.complete(CompletionRequest("Hello there.")).prompt_tokens > 0


def test_the_model_is_asked_once_and_then_kept(double: OpenAIDouble) -> None:
    with OpenAIClient(double.url, timeout_s=10) as client:
        assert client.resolve_model() == DEFAULT_MODEL
        client.complete(CompletionRequest("a"))
        client.tokenize("b")
        client.complete_many([CompletionRequest("c"), CompletionRequest("d")])
        assert client.models() == (DEFAULT_MODEL,)
    assert double.counts["models"] == 2, "resolve_model once, models() once"


def test_a_model_given_is_never_asked_for(double: OpenAIDouble) -> None:
    with OpenAIClient(double.url, model=DEFAULT_MODEL, timeout_s=10) as client:
        client.complete(CompletionRequest("a"))
    assert double.counts["models"] == 0


def test_an_error_body_is_one_line_cut_to_the_excerpt_length(double: OpenAIDouble) -> None:
    with OpenAIDouble(max_model_len=100) as small, OpenAIClient(small.url, timeout_s=10) as client:
        with pytest.raises(ValidationStop) as caught:
            client.complete(CompletionRequest("word " * 200, max_tokens=10))
    prefix = f"{small.url}/v1/completions answered HTTP 400: "
    excerpt = caught.value.message[len(prefix):]
    assert caught.value.message.startswith(prefix)
    assert len(excerpt) == BODY_EXCERPT_CHARS and excerpt.startswith('{"object": "error", "message": "This model')
    assert "read the serve log" in (caught.value.fix or "")


def test_an_invalid_url_is_a_stop_that_says_it_cannot_reach_it() -> None:
    with OpenAIClient("http://[not-a-host", model="m", timeout_s=1) as client, pytest.raises(ValidationStop) as caught:
        client.complete(CompletionRequest("a"))
    assert caught.value.message.startswith("cannot reach http://[not-a-host/v1/completions: ")


def test_a_body_that_is_not_json_is_a_body_stop(double: OpenAIDouble) -> None:
    double.faults = Misbehaviour(faults=(Fault("invalid_json"),))
    with OpenAIClient(double.url, model=DEFAULT_MODEL, timeout_s=10) as client, pytest.raises(ValidationStop) as caught:
        client.complete(CompletionRequest("a"))
    assert caught.value.message.startswith(f"{double.url}/v1/completions ") and caught.value.message.endswith(": not JSON")
    assert "--enable-prompt-tokens-details" in (caught.value.fix or "")


def test_metrics_are_the_text_on_200_and_none_otherwise(double: OpenAIDouble) -> None:
    with OpenAIClient(double.url, timeout_s=10) as client:
        assert client.metrics_text() is None, "the double answers 404 without metrics"
        double.metrics = lambda: "vllm:num_preemptions_total 3\n"
        assert client.metrics_text() == "vllm:num_preemptions_total 3\n"
    with OpenAIDouble() as gone:
        closed = gone.url
    with OpenAIClient(closed, timeout_s=1) as client:
        assert client.metrics_text() is None, "an unreachable serve has no metrics"


def test_tokenize_returns_the_servers_ids_as_integers(double: OpenAIDouble) -> None:
    with OpenAIClient(double.url, timeout_s=10) as client:
        ids = client.tokenize("one two three four")
    assert ids and all(type(i) is int for i in ids)


def test_tokenize_without_a_tokens_list_is_a_body_stop(double: OpenAIDouble) -> None:
    double.faults = Misbehaviour(faults=(Fault("drop_tokens", kind="tokenize"),))
    with OpenAIClient(double.url, timeout_s=10) as client, pytest.raises(ValidationStop) as caught:
        client.tokenize("x")
    assert caught.value.message.startswith(f"{double.url}/tokenize ") and "no tokens list" in caught.value.message


def test_model_ids_are_read_from_data_and_a_body_without_them_is_refused() -> None:
    assert parse_model_ids({"data": [{"id": "a"}, {"id": 7}]}, "u") == ("a", "7")
    assert parse_model_ids({"data": []}, "u") == ()
    for body in ({"data": [{"name": "a"}]}, {"models": []}, None):
        with pytest.raises(ValidationStop) as caught:
            parse_model_ids(body, "http://h/v1/models")
        assert caught.value.message.startswith("http://h/v1/models returned an unexpected body: no data[].id (")


def test_a_completion_whose_counts_are_not_integers_is_refused() -> None:
    body = {"choices": [{"text": "x"}], "usage": {"prompt_tokens": "3", "prompt_tokens_details": {"cached_tokens": 0}}}
    with pytest.raises(ValidationStop) as caught:
        parse_completion(body, "u")
    assert "usage.prompt_tokens is not an integer" in caught.value.message
    body = {"choices": [{"text": "x"}], "usage": {"prompt_tokens": 3, "prompt_tokens_details": {"cached_tokens": "0"}}}
    with pytest.raises(ValidationStop) as caught:
        parse_completion(body, "u")
    assert "cached_tokens is missing" in caught.value.message
    with pytest.raises(ValidationStop) as caught:
        parse_completion({"choices": [{"text": "x"}]}, "u")
    assert "no choices[0].text or usage.prompt_tokens (KeyError('usage'))" in caught.value.message


def test_concurrent_results_keep_the_order_of_the_requests(double: OpenAIDouble) -> None:
    requests = [CompletionRequest(f"Prompt number {i} " * (i + 1), cache_salt=f"s-{i}") for i in range(5)]
    with OpenAIClient(double.url, timeout_s=10) as client:
        done = client.complete_many(requests, max_workers=2)
        assert client.complete_many([]) == ()
    lengths = [d.prompt_tokens for d in done]
    assert lengths == sorted(lengths) and len(set(lengths)) == 5


class HeaderRecorder:
    """A loopback server that answers every GET and POST with one JSON body (by default a /v1/models list naming
    "m") and records the Authorization header and the header names, as sent, of every request."""

    def __init__(self, answer: Any = None) -> None:
        self.seen: list[str | None] = []
        self.names: list[tuple[str, ...]] = []
        body = json.dumps({"data": [{"id": "m"}]} if answer is None else answer).encode()
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                recorder.seen.append(self.headers.get("Authorization"))
                recorder.names.append(tuple(self.headers.keys()))
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.do_GET()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HeaderRecorder:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


def test_an_api_key_is_sent_as_a_bearer_token_and_none_sends_no_header() -> None:
    with HeaderRecorder() as server:
        with OpenAIClient(server.url, api_key="k-123", timeout_s=10) as client:
            assert client.models() == ("m",)
        with OpenAIClient(server.url, timeout_s=10) as client:
            client.models()
    assert server.seen == ["Bearer k-123", None]
