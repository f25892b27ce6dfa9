"""Adapter: wait until the serve answers its readiness probe; stop at once when a rank's serving container dies first."""

from __future__ import annotations

import time
from typing import Callable

import httpx

from kvbake.deployfile import Readiness
from kvbake.errors import RolloutError
from kvbake.terminal import progress


def probe(client: httpx.Client, url: str) -> str:
    """What the probe sees now: the status code, or why there is none."""
    try:
        return str(client.get(url).status_code)
    except httpx.HTTPError as err:
        return f"no answer ({type(err).__name__})"


def wait_until_ready(readiness: Readiness, dead_rank: Callable[[], str | None], clock: Callable[[], float] = time.monotonic,
                     sleep: Callable[[float], None] = time.sleep, transport: httpx.BaseTransport | None = None,
                     last_words: Callable[[], str] = lambda: "") -> float:
    """Poll GET `readiness.url` until it answers `readiness.status`; returns the seconds it took. `dead_rank` names a
    serving container that is no longer running (or None): that ends the wait at once, as does the timeout, whose
    message quotes `last_words` (what the serve's log says last) when it says anything."""
    start = clock()
    last = "not probed"
    with (httpx.Client(timeout=min(10.0, readiness.timeout_s), trust_env=False, follow_redirects=False, transport=transport) as client,
          progress.step(f"wait for GET {readiness.url} to answer {readiness.status}") as update):
        while True:
            last = probe(client, readiness.url)
            update(f"last answer: {last}")
            if last == str(readiness.status):
                return clock() - start
            dead = dead_rank()
            if dead:
                raise RolloutError(f"the serve died before it was ready: {dead}", "read the container's log on that node; every node was reverted")
            if clock() - start >= readiness.timeout_s:
                words = last_words()
                raise RolloutError(f"the serve never became ready: GET {readiness.url} answered {last}, not {readiness.status}, "
                                   f"within {readiness.timeout_s:g} s" + (f"; its log ends: {words}" if words else ""),
                                   "check the launcher and the readiness URL in the deployment file; every node was reverted")
            sleep(readiness.interval_s)
