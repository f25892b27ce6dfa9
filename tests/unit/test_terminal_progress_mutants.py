"""The progress line's layout: a finished mark, the whole time and outcome, the label and dimmed detail sharing the
rest 3:2 and cut with an ellipsis, the line kept on screen at the full width; the detail's cut and decoding."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from kvbake.terminal import progress
from test_terminal_progress import Clock

LABEL = "pull r:1"
DETAIL = "abc: Downloading 12.3MB/100MB"
LONG_LABEL = "pull 127.0.0.1:5000/kvbake/standin-kvpack@sha256:abababababab on ssh://spark-b"
LONG_DETAIL = "abc: Downloading 12.3MB/100MB and more words here to fill"
CONTROL = re.compile(r"\x1b\[([0-9;?]*)([a-zA-Z])")


def screen_lines(drawn: str) -> list[str]:
    """What a terminal shows after the drawn text: carriage return, new line, cursor up and erase line applied."""
    lines, row, col, at = [""], 0, 0, 0
    while at < len(drawn):
        control = CONTROL.match(drawn, at)
        if control:
            argument, kind = control.groups()
            if kind == "A":
                row = max(0, row - int(argument or 1))
            elif kind == "K":
                lines[row] = ""
            at = control.end()
            continue
        char = drawn[at]
        at += 1
        if char == "\r":
            col = 0
        elif char == "\n":
            row, col = row + 1, 0
            lines.extend([""] * (row + 1 - len(lines)))
        else:
            line = lines[row].ljust(col)
            lines[row] = line[:col] + char + line[col + 1:]
            col += 1
    return [line for line in lines if line.strip()]


def run_step(width: int, label: str = LABEL, detail: str = "", seconds: float = 75, fails: bool = False) -> tuple[str, list[str]]:
    """The text drawn for one step on a colour terminal `width` wide, and the frame drawn while it was running."""
    drawn, clock = io.StringIO(), Clock()
    progress.show_on(Console(file=drawn, force_terminal=True, width=width, color_system="standard"), clock)
    running: list[str] = []
    try:
        with progress.step(label) as update:
            progress._SHOWN["bar"].refresh()
            running = screen_lines(drawn.getvalue())
            if detail:
                update(detail)
            clock.now += seconds
            if fails:
                raise RuntimeError("refused")
    except RuntimeError:
        pass
    finally:
        progress.show_on(None)
    return drawn.getvalue(), running


@pytest.fixture(autouse=True)
def nothing_shown(monkeypatch):
    monkeypatch.setitem(progress._SHOWN, "console", None)
    monkeypatch.setitem(progress._SHOWN, "bar", None)
    monkeypatch.setitem(progress._SHOWN, "steps", 0)


def test_a_finished_step_stays_on_screen_as_mark_time_outcome_label_and_detail():
    drawn, _ = run_step(160, detail=DETAIL)
    [line] = screen_lines(drawn)
    assert line.split()[:3] == ["·", "0:01:15", "done"]
    assert line.split()[3:] == [*LABEL.split(), *DETAIL.split()]


def test_the_outcome_column_is_six_wide_so_the_label_starts_at_the_same_place_for_done_and_failed():
    done, _ = run_step(160)
    failed, _ = run_step(160, fails=True)
    assert screen_lines(done)[0].index(LABEL) == screen_lines(failed)[0].index(LABEL) == len("· 0:01:15 failed ")


def test_the_line_fills_the_terminal_and_the_label_and_detail_share_what_is_left_three_to_two():
    drawn, _ = run_step(160, detail=DETAIL)
    [line] = screen_lines(drawn)
    assert len(line) == 160
    label_at, detail_at = line.index(LABEL), line.index(DETAIL)
    label_width, detail_width = detail_at - label_at - 1, len(line) - detail_at
    assert abs(2 * label_width - 3 * detail_width) <= 3, (label_width, detail_width)


def test_the_detail_is_drawn_dim():
    drawn, _ = run_step(160, detail=DETAIL)
    assert f"\x1b[2m{DETAIL}" in drawn


def test_a_running_step_shows_a_pending_outcome_and_no_detail_yet():
    _, running = run_step(160)
    assert running[0].split()[1:] == ["0:00:00", "…", *LABEL.split()]


def test_on_a_narrow_terminal_a_long_label_and_detail_are_cut_with_an_ellipsis_on_one_line():
    drawn, _ = run_step(40, label=LONG_LABEL, detail=LONG_DETAIL)
    [line] = screen_lines(drawn)
    assert line.split()[:3] == ["·", "0:01:15", "done"]
    label, detail, rest = line[len("· 0:01:15 done   "):].split("…")
    assert LONG_LABEL.startswith(label) and len(label) > len("pull ")
    assert LONG_DETAIL.startswith(detail.strip()) and detail.strip() and not rest.strip()


def test_a_terminal_just_wide_enough_keeps_the_whole_time_and_outcome():
    drawn, _ = run_step(14, fails=True)
    assert screen_lines(drawn)[-1].split() == ["0:01:15", "failed"]


def test_the_display_redraws_four_times_a_second(monkeypatch):
    progress.show_on(Console(file=io.StringIO(), force_terminal=True, width=80), Clock())
    try:
        with progress.step(LABEL):
            assert progress._SHOWN["bar"].live.refresh_per_second == 4
    finally:
        progress.show_on(None)


def test_a_detail_exactly_as_wide_as_the_room_is_kept_whole():
    assert progress.one_line("x" * progress.DETAIL_WIDTH) == "x" * progress.DETAIL_WIDTH


def test_bytes_that_are_not_utf8_are_shown_with_a_replacement_character():
    assert progress.one_line(b"caf\xe9 done\n") == "caf\ufffd done"
