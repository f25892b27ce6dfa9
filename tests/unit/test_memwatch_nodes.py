"""The memory watcher's node reader (docker exec cat of meminfo over fake node engines) and its sampling thread."""

from __future__ import annotations

import threading

import pytest

from kvbake.errors import EngineError, ValidationStop
from kvbake.operate.adapters.memwatch import DEFAULT_MEMINFO, GIB, MemoryWatcher, NodeMemory, NodeMemoryReader, gib, parse_mem_available

MEMINFO = "MemTotal:       131072000 kB\nMemFree:          1000 kB\nMemAvailable:    4194304 kB\nBuffers: 1 kB\n"


class MeminfoNode:
    """A node engine whose `docker exec` answers a meminfo text, or fails like an engine that cannot exec."""

    def __init__(self, text: str | None) -> None:
        self.text = text
        self.execs: list[tuple[str, list[str]]] = []

    def exec_in(self, container: str, argv: list[str]) -> str:
        self.execs.append((container, argv))
        if self.text is None:
            raise EngineError("exec in serve failed (no such container)", "start it")
        return self.text


def test_every_node_is_read_inside_its_serving_container() -> None:
    a, b = MeminfoNode(MEMINFO), MeminfoNode(MEMINFO.replace("4194304", "2097152"))
    reader = NodeMemoryReader([("a", a), ("b", b)], "serve")
    assert reader() == (NodeMemory("a", 4 * GIB), NodeMemory("b", 2 * GIB))
    assert a.execs == [("serve", ["cat", DEFAULT_MEMINFO])] and b.execs == [("serve", ["cat", "/proc/meminfo"])]


def test_the_meminfo_path_given_is_the_one_read() -> None:
    node = MeminfoNode(MEMINFO)
    NodeMemoryReader([("a", node)], "serve", "/host/proc/meminfo")()
    assert node.execs == [("serve", ["cat", "/host/proc/meminfo"])]


def test_a_node_that_cannot_exec_stops_naming_node_container_path_and_cause() -> None:
    reader = NodeMemoryReader([("a", MeminfoNode(MEMINFO)), ("b", MeminfoNode(None))], "serve")
    with pytest.raises(ValidationStop) as caught:
        reader()
    message = caught.value.message
    assert message.startswith("node b: ") and "serve:/proc/meminfo" in message and "(exec in serve failed (no such container))" in message
    assert "--meminfo-path" in caught.value.fix


def test_a_meminfo_without_memavailable_stops_naming_the_node() -> None:
    reader = NodeMemoryReader([("a", MeminfoNode("MemTotal: 1 kB\n"))], "serve", "/x/meminfo")
    with pytest.raises(ValidationStop) as caught:
        reader()
    assert caught.value.message.startswith("node a: serve:/x/meminfo has no MemAvailable line")
    assert "--meminfo-path" in caught.value.fix


def test_memavailable_is_read_only_from_a_whole_line_in_kb() -> None:
    assert parse_mem_available("MemAvailable:  12 kB") == 12 * 1024
    assert parse_mem_available("MemAvailable:12 kB\n") is None, "at least one space after the colon"
    assert parse_mem_available("MemAvailable:  12 MB\n") is None
    assert parse_mem_available("XMemAvailable:  12 kB\n") is None
    assert parse_mem_available("MemAvailable:  12 kB extra\n") is None
    assert parse_mem_available("MemAvailable:  12kB  \n") == 12 * 1024


def test_gib_has_two_decimals() -> None:
    assert gib(3 * GIB // 2) == "1.50 GiB" and gib(0) == "0.00 GiB"


def test_a_reading_exactly_at_the_floor_is_not_a_breach() -> None:
    watcher = MemoryWatcher(lambda: [NodeMemory("a", GIB)], GIB)
    watcher.sample()
    assert watcher.stop_reason is None and watcher.samples == 1 and watcher.lowest == {"a": GIB}


def test_a_breach_names_every_low_node() -> None:
    watcher = MemoryWatcher(lambda: [NodeMemory("a", GIB // 2), NodeMemory("b", 2 * GIB), NodeMemory("c", GIB // 4)], GIB)
    with pytest.raises(ValidationStop) as caught:
        watcher.sample()
    assert caught.value.message.endswith("on a 0.50 GiB, c 0.25 GiB")
    assert watcher.lowest == {"a": GIB // 2, "b": 2 * GIB, "c": GIB // 4}


def test_the_first_stop_is_kept_and_breach_is_called_once() -> None:
    calls: list[int] = []
    stops = iter([ValidationStop("first", "f"), ValidationStop("second", "s")])

    def failing() -> list[NodeMemory]:
        raise next(stops)

    watcher = MemoryWatcher(failing, GIB, on_breach=lambda: calls.append(1))
    for _ in range(2):
        with pytest.raises(ValidationStop) as caught:
            watcher.sample()
        assert caught.value.message == "first"
    assert calls == [1] and watcher.samples == 0, "no reading was recorded"


def test_a_breach_without_a_callback_still_stops() -> None:
    watcher = MemoryWatcher(lambda: [NodeMemory("a", 0)], GIB)
    with pytest.raises(ValidationStop):
        watcher.sample()
    assert watcher.stop_reason is not None


def test_with_an_interval_a_thread_samples_until_the_watcher_exits() -> None:
    sampled = threading.Event()
    count = [0]

    def reader() -> list[NodeMemory]:
        count[0] += 1
        if count[0] >= 3:
            sampled.set()
        return [NodeMemory("a", 4 * GIB)]

    watcher = MemoryWatcher(reader, GIB, interval_s=0.001)
    with watcher:
        assert watcher._thread is not None and watcher._thread.name == "kvbake-memwatch"
        assert sampled.wait(10)
    assert not watcher._thread.is_alive() and watcher.samples >= 3


def test_the_sampling_thread_ends_at_the_first_breach_and_closes_once() -> None:
    breached = threading.Event()
    watcher = MemoryWatcher(lambda: [NodeMemory("a", 0)], GIB, interval_s=0.001, on_breach=breached.set)
    with watcher:
        assert breached.wait(10)
        watcher._thread.join(10)
        assert not watcher._thread.is_alive(), "the loop returned after the breach"
    assert watcher.stop_reason is not None and watcher.samples == 1


def test_without_an_interval_no_thread_is_started() -> None:
    watcher = MemoryWatcher(lambda: [NodeMemory("a", 4 * GIB)], GIB)
    with watcher:
        assert watcher._thread is None
    assert watcher.samples == 0
