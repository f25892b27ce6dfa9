"""The readiness wait: ready on the expected status, a timeout naming the last answer, a dead rank ending it at once."""

from __future__ import annotations

import httpx
import pytest

from kvbake.deployfile import Readiness
from kvbake.errors import RolloutError
from kvbake.ship.adapters.readiness import wait_until_ready

URL = "http://127.0.0.1:8000/health"


class Clock:
    """A clock that moves only when the wait sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def answering(*statuses: int | None) -> httpx.MockTransport:
    """A server that answers each status in turn (None: the connection is refused), then keeps the last."""
    replies = list(statuses)

    def handle(request: httpx.Request) -> httpx.Response:
        status = replies.pop(0) if len(replies) > 1 else replies[0]
        if status is None:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(status)
    return httpx.MockTransport(handle)


def wait(readiness: Readiness, transport: httpx.MockTransport, dead=lambda: None, clock: Clock | None = None) -> float:
    clock = clock or Clock()
    return wait_until_ready(readiness, dead, clock=clock, sleep=clock.sleep, transport=transport)


def test_ready_once_the_probe_answers_the_expected_status() -> None:
    assert wait(Readiness(URL, 200, 60, 2), answering(None, 503, 503, 200)) == 6


def test_another_expected_status_counts() -> None:
    assert wait(Readiness(URL, 204, 60, 1), answering(200, 204)) == 1


def test_a_serve_that_never_answers_times_out_naming_the_last_answer() -> None:
    with pytest.raises(RolloutError) as caught:
        wait(Readiness(URL, 200, 5, 1), answering(None))
    assert caught.value.exit_code == 12
    assert all(field in caught.value.message for field in ("never became ready", URL, "ConnectError", "not 200", "within 5 s"))
    assert "readiness URL" in caught.value.fix


def test_a_serve_stuck_at_503_times_out() -> None:
    with pytest.raises(RolloutError, match=r"answered 503, not 200, within 3 s"):
        wait(Readiness(URL, 200, 3, 1), answering(503))


def test_a_dead_rank_ends_the_wait_at_once() -> None:
    clock = Clock()
    with pytest.raises(RolloutError) as caught:
        wait(Readiness(URL, 200, 600, 1), answering(503), dead=lambda: "the serving container serve on b is not running (exit code 1: boom)",
             clock=clock)
    assert caught.value.exit_code == 12
    assert all(field in caught.value.message for field in ("died before it was ready", "serve on b", "exit code 1: boom"))
    assert "log" in caught.value.fix
    assert clock.now == 0


def test_a_timeout_quotes_what_the_serves_log_says_last() -> None:
    """vLLM exec'd into a container that keeps running (exec and ray shapes) dies without a dead rank: the timeout
    names its exception, which its log (now docker logs) holds."""
    clock = Clock()
    with pytest.raises(RolloutError) as caught:
        wait_until_ready(Readiness(URL, 200, 5, 1), lambda: None, clock=clock, sleep=clock.sleep, transport=answering(None),
                         last_words=lambda: "ValueError: current platform cpu does not support ray.")
    assert caught.value.message.endswith("within 5 s; its log ends: ValueError: current platform cpu does not support ray.")


def test_a_timeout_with_a_silent_log_says_nothing_of_it() -> None:
    clock = Clock()
    with pytest.raises(RolloutError) as caught:
        wait_until_ready(Readiness(URL, 200, 5, 1), lambda: None, clock=clock, sleep=clock.sleep, transport=answering(None),
                         last_words=lambda: "")
    assert caught.value.message.endswith("within 5 s") and "log" not in caught.value.message
