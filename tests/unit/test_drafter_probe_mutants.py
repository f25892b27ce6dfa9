"""The drafter probe: the first positive `max_model_len` its `/v1/models` lists, asked at `URL/v1/models` whatever the
URL's trailing slash, within TIMEOUT_S."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from kvbake.ship.adapters import served_length as drafter_probe
from kvbake.ship.adapters.served_length import serve_length, served_positions
from tests.doubles.openai_double import OpenAIDouble


class Asked:
    """A stand-in for httpx.get that answers a models list and remembers what it was asked."""

    def __init__(self, models: list[Any]) -> None:
        self.models, self.urls, self.timeouts = models, [], []

    def __call__(self, url: str, **options: Any) -> httpx.Response:
        self.urls.append(url)
        self.timeouts.append(options.get("timeout", "none given"))
        return httpx.Response(200, json={"data": self.models}, request=httpx.Request("GET", url))


def asked(monkeypatch, models: list[Any]) -> Asked:
    fake = Asked(models)
    monkeypatch.setattr(drafter_probe.httpx, "get", fake)
    return fake


@pytest.mark.parametrize(("models", "positions"), [
    ([{"max_model_len": 0}, {"max_model_len": 65536}], 65536),
    ([{"max_model_len": 0}], None),
    ([{"max_model_len": 1}], 1),
    ([{"max_model_len": True}, {"max_model_len": -5}, {"max_model_len": 4096}], 4096),
])
def test_the_first_positive_length_listed_is_the_drafters(monkeypatch, models, positions):
    asked(monkeypatch, models)
    assert served_positions("http://10.0.0.20:8100") == positions


@pytest.mark.parametrize(("url", "models_url"), [
    ("http://10.0.0.20:8100/", "http://10.0.0.20:8100/v1/models"),
    ("http://10.0.0.20:8100//", "http://10.0.0.20:8100/v1/models"),
    ("http://DRAFTER-BOX/", "http://DRAFTER-BOX/v1/models"),
    ("http://10.0.0.20:8100/X", "http://10.0.0.20:8100/X/v1/models"),
])
def test_the_models_list_is_asked_below_the_url_without_a_doubled_slash(monkeypatch, url, models_url):
    fake = asked(monkeypatch, [{"max_model_len": 2048}])
    assert served_positions(url) == 2048
    assert fake.urls == [models_url]


def test_the_probe_waits_at_most_its_timeout(monkeypatch):
    fake = asked(monkeypatch, [{"max_model_len": 2048}])
    served_positions("http://10.0.0.20:8100")
    assert fake.timeouts == [drafter_probe.TIMEOUT_S]


def test_a_running_drafter_named_with_a_trailing_slash_is_read():
    with OpenAIDouble(max_model_len=327680) as drafter:
        assert served_positions(drafter.url + "/") == 327680


# ---- the serve's own length, when it was started without --max-model-len ----

def test_a_serve_says_its_length_when_asked_with_its_api_key():
    with OpenAIDouble(max_model_len=4096, api_key="sk-rig-only") as serve:
        assert serve_length(serve.url, "sk-rig-only") == (4096, "")
        assert serve_length(serve.url + "/", None) == (None, f"{serve.url}/v1/models answered HTTP 401")
        assert serve_length(serve.url, "another key") == (None, f"{serve.url}/v1/models answered HTTP 401")


def test_a_serve_that_names_no_length_or_does_not_answer_says_so():
    with OpenAIDouble() as serve:
        assert serve_length(serve.url, None) == (None, f"{serve.url}/v1/models names no max_model_len")
        url = serve.url
    assert serve_length(url, None) == (None, f"{url}/v1/models did not answer (ConnectError)")


def test_the_serves_probe_uses_no_proxy_of_the_environment(monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "")
    with OpenAIDouble(max_model_len=2048) as serve:
        assert serve_length(serve.url, None) == (2048, "")
