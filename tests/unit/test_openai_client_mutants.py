"""The OpenAI client's construction, body checks, model listing and thread pool, pinned against loopback servers."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import pytest

from kvbake.errors import ValidationStop
from kvbake.operate.adapters import openai_client
from kvbake.operate.adapters.openai_client import CompletionRequest, OpenAIClient, _tls_context, parse_completion
from message_words import says
from tests.doubles.openai_double import Fault, Misbehaviour, OpenAIDouble
from tests.unit.test_openai_client_edges import HeaderRecorder

SAFETY_WAIT_S = 20.0  # far above any loopback round trip and below the client's 30 s barrier wait


@pytest.fixture
def served() -> Iterator[OpenAIDouble]:
    with OpenAIDouble() as running:
        yield running


class ThreadNotingClient(OpenAIClient):
    """The real client that notes the name of the thread each completion is sent from."""

    def __init__(self, base_url: str) -> None:
        super().__init__(base_url, timeout_s=10)
        self.threads: set[str] = set()

    def complete(self, request: CompletionRequest) -> Any:
        self.threads.add(threading.current_thread().name)
        return super().complete(request)


class FirstWaitsForLastClient(OpenAIClient):
    """The real client whose first request is sent only once the last one has begun (or a safety wait has passed)."""

    def __init__(self, base_url: str, first: CompletionRequest, last: CompletionRequest) -> None:
        super().__init__(base_url, timeout_s=10)
        self.first, self.last = first, last
        self.last_began = threading.Event()
        self.first_saw_last_begin: bool | None = None

    def complete(self, request: CompletionRequest) -> Any:
        if request is self.last:
            self.last_began.set()
        if request is self.first:
            self.first_saw_last_begin = self.last_began.wait(SAFETY_WAIT_S)
        return super().complete(request)


class OverCounted(Sequence[CompletionRequest]):
    """Requests whose length claims more than iterating them yields, so a pool thread waits for a partner in vain."""

    def __init__(self, items: list[CompletionRequest], claimed: int) -> None:
        self.items, self.claimed = items, claimed

    def __len__(self) -> int:
        return self.claimed

    def __getitem__(self, index: Any) -> Any:
        return self.items[index]


class IndexableUsage:
    """A usage that answers any key with 3 but is no mapping: it has no `get`."""

    def __getitem__(self, key: str) -> int:
        return 3


def test_a_base_url_ending_in_x_keeps_it() -> None:
    with OpenAIClient("http://127.0.0.1:1/proxyX/", timeout_s=1) as client:
        assert client.base_url == "http://127.0.0.1:1/proxyX"


def test_the_timeout_given_is_the_clients_timeout() -> None:
    with OpenAIClient("http://127.0.0.1:1", timeout_s=7.5) as client:
        assert client._http.timeout == httpx.Timeout(7.5)


def test_every_client_verifies_with_the_one_shared_tls_context(monkeypatch: pytest.MonkeyPatch) -> None:
    given: list[Any] = []
    real_client = httpx.Client

    def noting_client(*args: Any, **kwargs: Any) -> httpx.Client:
        given.append(kwargs.get("verify"))
        return real_client(*args, **kwargs)

    monkeypatch.setattr(openai_client.httpx, "Client", noting_client)
    with OpenAIClient("https://127.0.0.1:1"), OpenAIClient("https://127.0.0.1:2"):
        pass
    assert given == [_tls_context(), _tls_context()]
    assert _tls_context().verify_mode == ssl.CERT_REQUIRED and _tls_context().check_hostname


def test_the_api_key_goes_out_under_the_header_name_authorization() -> None:
    with HeaderRecorder() as server, OpenAIClient(server.url, api_key="k-1", timeout_s=10) as client:
        client.models()
    assert "Authorization" in server.names[0]


def test_a_usage_that_is_not_a_mapping_has_no_cached_tokens() -> None:
    body = {"choices": [{"text": "x"}], "usage": IndexableUsage()}
    with pytest.raises(ValidationStop) as caught:
        parse_completion(body, "http://h/v1/completions")
    assert says(caught.value.message, "cached_tokens is missing")


def test_a_models_body_without_data_is_a_stop_naming_the_models_url() -> None:
    with HeaderRecorder({"models": []}) as server, OpenAIClient(server.url, timeout_s=10) as client:
        with pytest.raises(ValidationStop) as caught:
            client.models()
    assert caught.value.message.startswith(f"{server.url}/v1/models ")


def test_a_serve_listing_no_model_is_told_to_wait_for_its_model(served: OpenAIDouble) -> None:
    served.faults = Misbehaviour(faults=(Fault("empty", kind="models"),))
    with OpenAIClient(served.url, timeout_s=10) as client, pytest.raises(ValidationStop) as caught:
        client.resolve_model()
    assert says(caught.value.message, "lists no model")
    assert says(caught.value.fix, "loaded its model")


def test_a_tokenize_body_that_is_a_list_is_a_body_stop() -> None:
    with HeaderRecorder([1, 2, 3]) as server, OpenAIClient(server.url, model="m", timeout_s=10) as client:
        with pytest.raises(ValidationStop) as caught:
            client.tokenize("one two")
    assert caught.value.message.startswith(f"{server.url}/tokenize ") and says(caught.value.message, "no tokens list")


def test_by_default_at_most_sixteen_threads_send(served: OpenAIDouble) -> None:
    with ThreadNotingClient(served.url) as client:
        done = client.complete_many([CompletionRequest(f"Prompt {i}.") for i in range(17)])
    assert len(done) == 17 and 1 <= len(client.threads) <= 16


def test_one_worker_sends_every_request_from_one_thread(served: OpenAIDouble) -> None:
    with ThreadNotingClient(served.url) as client:
        done = client.complete_many([CompletionRequest("First."), CompletionRequest("Second.")], max_workers=1)
    assert len(done) == 2 and len(client.threads) == 1


def test_with_fewer_threads_than_requests_no_request_waits_for_another(served: OpenAIDouble) -> None:
    requests = [CompletionRequest("First."), CompletionRequest("Second."), CompletionRequest("Third.")]
    with FirstWaitsForLastClient(served.url, requests[0], requests[-1]) as client:
        done = client.complete_many(requests, max_workers=2)
    assert client.first_saw_last_begin is True, "the free thread took the third request while the first was held"
    assert [d.prompt_tokens > 0 for d in done] == [True, True, True]


def test_a_thread_whose_partner_never_starts_sends_after_the_barrier_wait(
    served: OpenAIDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(openai_client, "BARRIER_TIMEOUT_S", 0.01)
    with OpenAIClient(served.url, timeout_s=10) as client:
        done = client.complete_many(OverCounted([CompletionRequest("Alone.")], claimed=2))
    assert len(done) == 1 and served.counts["completion"] == 1
