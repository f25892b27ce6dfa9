"""The terminal's progress lines: drawn with label, elapsed time and detail on a terminal, nothing elsewhere; shared by
steps in threads; the byte count of a save."""

from __future__ import annotations

import io
import threading

import pytest
from rich.console import Console

from kvbake.terminal import progress


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
def screen(monkeypatch) -> io.StringIO:
    """A terminal 160 columns wide that the progress lines go to, on a clock the test moves."""
    monkeypatch.setitem(progress._SHOWN, "console", None)
    drawn = io.StringIO()
    progress.show_on(Console(file=drawn, force_terminal=True, width=160), Clock())
    yield drawn
    progress.show_on(None)


def clock() -> Clock:
    return progress._SHOWN["clock"]


def test_nothing_is_drawn_and_the_detail_is_ignored_off_a_terminal(capsys):
    progress.show_on(None)
    with progress.step("pull r:1") as update:
        update("abc: Pulling fs layer")
    assert not progress.shown() and capsys.readouterr() == ("", "")


def test_a_step_shows_its_label_its_elapsed_time_its_last_detail_and_that_it_is_done(screen):
    with progress.step("wait for GET http://127.0.0.1:8000/health to answer 200") as update:
        update("last answer: no answer (ConnectError)")
        clock().now += 75
        update(b"last answer: 503\n")
    drawn = screen.getvalue()
    assert "wait for GET http://127.0.0.1:8000/health to answer 200" in drawn
    assert "0:01:15" in drawn and "done" in drawn
    assert progress._SHOWN["bar"] is None, "the live display ends with the last step"


def test_a_step_that_raises_says_failed_and_the_error_goes_on(screen):
    with pytest.raises(RuntimeError, match="refused"):
        with progress.step("push r:1"):
            clock().now += 3
            raise RuntimeError("refused")
    drawn = screen.getvalue()
    assert "push r:1" in drawn and "0:00:03" in drawn and "failed" in drawn and "done" not in drawn


def test_steps_in_threads_share_one_display_that_ends_with_the_last(screen):
    both_open = threading.Barrier(2)
    displays = []

    def pull(node: str) -> None:
        with progress.step(f"pull r:1 on {node}"):
            both_open.wait(timeout=10)
            displays.append(progress._SHOWN["bar"])
            both_open.wait(timeout=10)

    threads = [threading.Thread(target=pull, args=(node,)) for node in ("spark-a", "spark-b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(displays) == 2 and displays[0] is displays[1] is not None
    assert "pull r:1 on spark-a" in screen.getvalue() and "pull r:1 on spark-b" in screen.getvalue()
    assert progress._SHOWN["bar"] is None and progress._SHOWN["steps"] == 0


def test_a_counted_stream_passes_every_chunk_and_shows_the_bytes_read(screen):
    with progress.step("save base:1 (read once, for the lock)") as update:
        chunks = list(progress.counted(iter([b"a" * 1500, b"b" * 1500]), update))
    assert chunks == [b"a" * 1500, b"b" * 1500]
    assert "3.0 kB read" in screen.getvalue()


@pytest.mark.parametrize(("printed", "shown"), [
    (b"abc: Waiting\ndef: Downloading\n\n", "def: Downloading"),
    ("  one line  ", "one line"),
    ("", ""),
    ("x" * 100, "x" * 71 + "…"),
])
def test_a_detail_is_the_last_non_empty_line_cut_to_the_width(printed, shown):
    assert progress.one_line(printed) == shown


def test_a_digest_reference_is_cut_to_twelve_hex_digits_for_its_line_and_a_tag_is_kept():
    assert progress.short_reference("127.0.0.1:5000/kvbake/s@sha256:" + "ab" * 32) == "127.0.0.1:5000/kvbake/s@sha256:abababababab"
    assert progress.short_reference("127.0.0.1:5000/kvbake/s:0.33.0-kvpack") == "127.0.0.1:5000/kvbake/s:0.33.0-kvpack"


def test_on_a_narrow_terminal_the_label_is_cut_and_the_time_and_outcome_stay(monkeypatch):
    drawn = io.StringIO()
    progress.show_on(Console(file=drawn, force_terminal=True, width=40), Clock())
    with progress.step("pull 127.0.0.1:5000/kvbake/standin-kvpack@sha256:abababababab on ssh://spark-b"):
        clock().now += 61
    progress.show_on(None)
    assert "0:01:01" in drawn.getvalue() and "done" in drawn.getvalue()
