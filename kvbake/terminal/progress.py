"""Adapter: on a terminal a long step shows its label, elapsed time and last detail; elsewhere it prints nothing."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator

from rich.console import Console
from rich.filesize import decimal
from rich.table import Column
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

Update = Callable[[str], None]  # sets the detail shown after a step's label
DETAIL_WIDTH = 72
_SHOWN: dict = {"console": None, "clock": None, "bar": None, "steps": 0}
_GUARD = threading.Lock()  # steps may run in threads (one per node); they share one live display


def show_on(console: Console | None, clock: Callable[[], float] | None = None) -> None:
    """Draw progress on `console` from now on, elapsed time by `clock` (rich's monotonic one unless told); None draws
    nothing."""
    _SHOWN["console"], _SHOWN["clock"] = console, clock


def show_on_terminal(json_output: bool) -> None:
    """The CLI's choice: standard error when it is a terminal and the output is not --json; otherwise nothing."""
    console = Console(stderr=True)
    show_on(console if console.is_terminal and not json_output else None)


def shown() -> bool:
    return _SHOWN["console"] is not None


def _ignore(detail: str) -> None:
    return None


def one_line(detail: str | bytes) -> str:
    """A detail as one short line: the last non-empty line of what a tool printed, cut to DETAIL_WIDTH characters."""
    text = detail.decode(errors="replace") if isinstance(detail, bytes) else detail
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    return last if len(last) <= DETAIL_WIDTH else last[:DETAIL_WIDTH - 1] + "…"


def _columns() -> tuple:
    """Elapsed time and outcome first, so that a narrow terminal cuts the label and the detail, never the time."""
    kept = {"no_wrap": True, "overflow": "ignore"}
    cut = {"no_wrap": True, "overflow": "ellipsis"}
    return (SpinnerColumn(finished_text="·"), TimeElapsedColumn(table_column=Column(min_width=7, **kept)),
            TextColumn("{task.fields[outcome]}", table_column=Column(min_width=6, **kept)),
            TextColumn("{task.description}", table_column=Column(ratio=3, **cut)),
            TextColumn("{task.fields[detail]}", style="dim", table_column=Column(ratio=2, **cut)))


def _open(console: Console, label: str) -> tuple[Progress, TaskID]:
    with _GUARD:
        if _SHOWN["bar"] is None:
            _SHOWN["bar"] = Progress(*_columns(), console=console, transient=False, refresh_per_second=4, expand=True,
                                     get_time=_SHOWN["clock"])
            _SHOWN["bar"].start()
        _SHOWN["steps"] += 1
        bar = _SHOWN["bar"]
        return bar, bar.add_task(label, total=None, outcome="…", detail="")


def _close(bar: Progress, task: TaskID, outcome: str) -> None:
    bar.update(task, total=1, completed=1, outcome=outcome)
    with _GUARD:
        _SHOWN["steps"] -= 1
        if _SHOWN["steps"] == 0:
            bar.stop()
            _SHOWN["bar"] = None


@contextmanager
def step(label: str) -> Iterator[Update]:
    """One long step. On a terminal: a line `0:00:12 label detail` that ticks until the step ends, then stays with its
    time, `done` or `failed`, its label and its last detail. Elsewhere: nothing. Yields the function that sets the detail."""
    console = _SHOWN["console"]
    if console is None:
        yield _ignore
        return
    bar, task = _open(console, label)
    outcome = "failed"
    try:
        yield lambda detail: bar.update(task, detail=one_line(detail))
        outcome = "done"
    finally:
        _close(bar, task, outcome)


def short_reference(reference: str) -> str:
    """An image reference short enough for a progress line: a digest cut to its first 12 hex digits."""
    name, at, digest = reference.partition("@sha256:")
    return f"{name}@sha256:{digest[:12]}" if at else reference


def counted(chunks: Iterable[bytes], update: Update) -> Iterator[bytes]:
    """The chunks as they come, the bytes read so far shown as the step's detail."""
    total = 0
    for chunk in chunks:
        total += len(chunk)
        update(f"{decimal(total)} read")
        yield chunk
