"""Background daemons of the rig: start one with its log in a file, find it again by pid, stop it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kvbake.errors import KvbakeError

POLL_SECONDS = 0.05


@dataclass(frozen=True)
class ProcessRef:
    """A process named by pid plus its kernel start time, so a reused pid is never mistaken for it."""

    pid: int
    start_ticks: int

    @classmethod
    def of(cls, pid: int) -> ProcessRef:
        """Capture the identity of the running process `pid`."""
        ticks = _start_ticks(pid)
        if ticks is None:
            raise KvbakeError(f"process {pid} is not running", fix="read its log file for the cause")
        return cls(pid=pid, start_ticks=ticks)

    def alive(self) -> bool:
        """True while this very process runs (a zombie or a reused pid counts as gone)."""
        return _start_ticks(self.pid) == self.start_ticks and _state(self.pid) not in ("Z", "X", None)

    def to_json(self) -> dict[str, int]:
        """Plain form for a state file."""
        return {"pid": self.pid, "start_ticks": self.start_ticks}

    @classmethod
    def from_json(cls, data: Mapping[str, int]) -> ProcessRef:
        """Inverse of `to_json`."""
        return cls(pid=int(data["pid"]), start_ticks=int(data["start_ticks"]))


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text[text.rindex(")") + 2 :].split()


def _start_ticks(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def _state(pid: int) -> str | None:
    fields = _stat_fields(pid)
    return fields[0] if fields else None


@dataclass
class Daemon:
    """A started background process; `popen` is set only in the process that started it."""

    ref: ProcessRef
    popen: subprocess.Popen[bytes] | None = None

    def exited(self) -> bool:
        """True once the process is gone (and reaped, when it is our child)."""
        if self.popen is not None:
            return self.popen.poll() is not None
        return not self.ref.alive()

    def stop(self, grace_seconds: float = 20.0) -> None:
        """SIGTERM, wait up to `grace_seconds`, then SIGKILL and wait again."""
        for sig, timeout in ((signal.SIGTERM, grace_seconds), (signal.SIGKILL, 10.0)):
            if self.exited():
                return
            if self.ref.alive():
                os.kill(self.ref.pid, sig)
            if wait_until(self.exited, timeout):
                return
        raise KvbakeError(f"process {self.ref.pid} survived SIGKILL", fix="inspect it with ps and end it by hand")


def spawn(argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None) -> Daemon:
    """Start `argv` in its own session, stdout and stderr appended to `log_path`."""
    with log_path.open("ab") as log:
        popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            start_new_session=True,
        )
    return Daemon(ref=ProcessRef.of(popen.pid), popen=popen)


def wait_until(predicate: Callable[[], bool], timeout: float) -> bool:
    """Poll `predicate` until it is true or `timeout` seconds passed; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_SECONDS)


def log_tail(log_path: Path, lines: int = 5) -> str:
    """The last lines of a log file joined on one line, for error messages."""
    try:
        text = log_path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])
