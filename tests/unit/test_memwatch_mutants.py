"""The memory watcher keeps each node's lowest reading and samples from a daemon thread."""

from __future__ import annotations

from kvbake.operate.adapters.memwatch import GIB, MemoryWatcher, NodeMemory


def test_the_lowest_reading_of_each_node_is_kept_when_it_rises_again() -> None:
    readings = iter([[NodeMemory("a", 5 * GIB), NodeMemory("b", 9 * GIB)],
                     [NodeMemory("a", 8 * GIB), NodeMemory("b", 7 * GIB)]])
    watcher = MemoryWatcher(lambda: next(readings), GIB)
    watcher.sample()
    watcher.sample()
    assert watcher.lowest == {"a": 5 * GIB, "b": 7 * GIB} and watcher.samples == 2


def test_the_sampling_thread_is_a_daemon_so_it_never_holds_the_process() -> None:
    with MemoryWatcher(lambda: [NodeMemory("a", 4 * GIB)], GIB, interval_s=3600) as watcher:
        assert watcher._thread is not None and watcher._thread.daemon is True
    assert watcher.samples == 0
