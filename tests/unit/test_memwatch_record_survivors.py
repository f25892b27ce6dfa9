"""The memory watcher stamps each reading with the seconds since its first sample."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kvbake.operate.adapters import memwatch
from kvbake.operate.adapters.memwatch import GIB, MemoryWatcher, NodeMemory


def scripted_clock(monkeypatch: pytest.MonkeyPatch, *times: float) -> None:
    """time.monotonic() as the watcher sees it returns `times`, one per call."""
    ticks = iter(times)
    monkeypatch.setattr(memwatch, "time", SimpleNamespace(monotonic=lambda: next(ticks)))


def test_readings_are_timed_from_the_first_sample_not_from_the_clock_origin(monkeypatch):
    scripted_clock(monkeypatch, 1000.0, 1002.5, 1007.0)
    readings = iter([[NodeMemory("a", 5 * GIB), NodeMemory("b", 6 * GIB)],
                     [NodeMemory("a", 4 * GIB)], [NodeMemory("b", 3 * GIB)]])
    watcher = MemoryWatcher(lambda: next(readings), GIB)
    for _ in range(3):
        watcher.sample()
    assert watcher.readings == [(0.0, "a", 5 * GIB), (0.0, "b", 6 * GIB), (2.5, "a", 4 * GIB), (7.0, "b", 3 * GIB)]


def test_the_first_sample_fixes_the_time_origin_for_every_later_one(monkeypatch):
    scripted_clock(monkeypatch, 50.0, 80.0)
    readings = iter([[NodeMemory("a", 5 * GIB)], [NodeMemory("a", 5 * GIB)]])
    watcher = MemoryWatcher(lambda: next(readings), GIB)
    watcher.sample()
    watcher.sample()
    assert [seconds for seconds, _, _ in watcher.readings] == [0.0, 30.0]
