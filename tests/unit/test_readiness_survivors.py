"""The readiness wait on a terminal: its progress line names the URL and the status it waits for, and shows the last
answer the probe saw."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from kvbake.deployfile import Readiness
from kvbake.terminal import progress
from test_readiness import URL, answering, wait


@pytest.fixture()
def screen(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """A terminal 200 columns wide that the progress lines go to."""
    monkeypatch.setitem(progress._SHOWN, "console", None)
    drawn = io.StringIO()
    progress.show_on(Console(file=drawn, force_terminal=True, width=200), lambda: 0.0)
    yield drawn
    progress.show_on(None)


def test_the_wait_shows_the_url_and_status_it_waits_for_and_the_last_answer(screen: io.StringIO) -> None:
    assert wait(Readiness(URL, 204, 60, 1), answering(503, 204)) == 1
    line = [line for line in screen.getvalue().splitlines() if URL in line][-1]
    assert line.split(URL, 1)[1].count("204") == 2, "the status waited for, then the last answer"
