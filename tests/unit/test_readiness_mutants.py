"""The readiness wait's client and clock: its probe timeout, no proxies from the environment, no redirects, the elapsed time."""

from __future__ import annotations

import httpx
import pytest

from kvbake.deployfile import Readiness
from kvbake.errors import RolloutError
from kvbake.ship.adapters.readiness import wait_until_ready
from message_words import says
from test_readiness import URL, Clock, answering, wait


def probe_timeouts(readiness: Readiness) -> dict:
    """The timeouts the first probe was sent with."""
    seen: list[dict] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request.extensions["timeout"])
        return httpx.Response(readiness.status)
    wait(readiness, httpx.MockTransport(handle))
    return seen[0]


def test_a_probe_waits_at_most_ten_seconds_for_an_answer() -> None:
    assert probe_timeouts(Readiness(URL, 200, 60, 1)) == {"connect": 10.0, "read": 10.0, "write": 10.0, "pool": 10.0}


def test_a_probe_waits_no_longer_than_the_whole_readiness_timeout() -> None:
    assert probe_timeouts(Readiness(URL, 200, 3, 1))["read"] == 3


def test_the_seconds_returned_count_from_the_start_of_the_wait() -> None:
    clock = Clock()
    clock.now = 100.0
    assert wait(Readiness(URL, 200, 60, 2), answering(503, 200), clock=clock) == 2


def test_the_wait_ends_when_the_elapsed_time_reaches_the_timeout() -> None:
    clock = Clock()
    with pytest.raises(RolloutError):
        wait(Readiness(URL, 200, 3, 1), answering(503, 503, 503, 503, 200), clock=clock)
    assert clock.now == 3


def test_a_redirect_is_not_followed_so_it_is_not_ready() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/ready":
            return httpx.Response(200)
        return httpx.Response(302, headers={"Location": "http://127.0.0.1:8000/ready"})
    with pytest.raises(RolloutError) as caught:
        wait(Readiness(URL, 200, 0, 1), httpx.MockTransport(handle))
    assert says(caught.value.message, "answered 302")


def test_the_probe_ignores_proxies_named_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A proxy setting httpx would refuse (an ftp:// proxy) does not matter: the probe never reads the environment's."""
    for name in ("NO_PROXY", "no_proxy", "REQUEST_METHOD"):
        monkeypatch.delenv(name, raising=False)
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, "ftp://no-such-proxy")
    clock = Clock()
    with pytest.raises(RolloutError) as caught:
        wait_until_ready(Readiness("http://127.0.0.1:9/health", 599, 0, 1), lambda: None, clock=clock, sleep=clock.sleep)
    assert says(caught.value.message, "never became ready")
