"""Adapter: MemAvailable of every node, read inside its serving container through the node's docker host."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kvbake.engines.adapters.client import Engine
from kvbake.errors import KvbakeError, ValidationStop

GIB = 1024 ** 3
DEFAULT_MEMINFO = "/proc/meminfo"
_MEM_AVAILABLE = re.compile(r"^MemAvailable:\s+(\d+)\s*kB\s*$", re.MULTILINE)


@dataclass(frozen=True)
class NodeMemory:
    """One reading: a node's MemAvailable in bytes."""

    node: str
    available: int


Reader = Callable[[], Sequence[NodeMemory]]


def parse_mem_available(text: str) -> int | None:
    """MemAvailable in bytes from /proc/meminfo text, or None when the line is absent."""
    found = _MEM_AVAILABLE.search(text)
    return int(found.group(1)) * 1024 if found else None


def gib(value: int) -> str:
    return f"{value / GIB:.2f} GiB"


class NodeMemoryReader:
    """Reads MemAvailable on every node with `docker exec <container> cat <path>`; any unreadable node stops the run."""

    def __init__(self, nodes: Sequence[tuple[str, Engine]], container: str, path: str = DEFAULT_MEMINFO) -> None:
        self.nodes = tuple(nodes)
        self.container = container
        self.path = path

    def read_node(self, name: str, engine: Engine) -> NodeMemory:
        try:
            text = engine.exec_in(self.container, ["cat", self.path])
        except KvbakeError as err:
            raise ValidationStop(f"node {name}: cannot read MemAvailable from {self.container}:{self.path} ({err.message})",
                                 "start the serving container on that node or fix --meminfo-path; the run is stopped") from None
        available = parse_mem_available(text)
        if available is None:
            raise ValidationStop(f"node {name}: {self.container}:{self.path} has no MemAvailable line",
                                 "point --meminfo-path at a meminfo file (default /proc/meminfo)")
        return NodeMemory(name, available)

    def __call__(self) -> tuple[NodeMemory, ...]:
        return tuple(self.read_node(name, engine) for name, engine in self.nodes)


class MemoryWatcher:
    """Samples every node now and then; the first reading below the floor (or a failed read) becomes the stop reason."""

    def __init__(self, reader: Reader, floor: int, interval_s: float = 0.0, on_breach: Callable[[], None] | None = None) -> None:
        self.reader = reader
        self.floor = floor
        self.interval_s = interval_s
        self.on_breach = on_breach
        self.lowest: dict[str, int] = {}
        self.samples = 0
        self.readings: list[tuple[float, str, int]] = []  # (seconds since the first sample, node, MemAvailable bytes)
        self._started: float | None = None
        self.stop_reason: ValidationStop | None = None
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        """Read every node once; raise the stop (now and at every later call) once a node is low or unreadable."""
        if self.stop_reason is None:
            try:
                self._record(self.reader())
            except ValidationStop as err:
                self._breach(err)
        if self.stop_reason is not None:
            raise self.stop_reason

    def _record(self, readings: Sequence[NodeMemory]) -> None:
        with self._lock:
            self.samples += 1
            now = time.monotonic()
            self._started = now if self._started is None else self._started
            for reading in readings:
                self.readings.append((now - self._started, reading.node, reading.available))
                self.lowest[reading.node] = min(self.lowest.get(reading.node, reading.available), reading.available)
        low = [r for r in readings if r.available < self.floor]
        if low:
            names = ", ".join(f"{r.node} {gib(r.available)}" for r in low)
            raise ValidationStop(f"memory floor: MemAvailable below {gib(self.floor)} on {names}",
                                 "restore the base serve and reduce the context or concurrency before another run")

    def _breach(self, err: ValidationStop) -> None:
        with self._lock:
            first = self.stop_reason is None
            self.stop_reason = self.stop_reason or err
        if first and self.on_breach is not None:
            self.on_breach()

    def _loop(self) -> None:
        while not self._done.wait(self.interval_s):
            try:
                self.sample()
            except ValidationStop:
                return

    def __enter__(self) -> MemoryWatcher:
        if self.interval_s > 0:
            self._thread = threading.Thread(target=self._loop, name="kvbake-memwatch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
