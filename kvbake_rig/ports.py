"""Loopback ports for the rig's daemons."""

from __future__ import annotations

import fcntl
import socket
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A TCP port on the loopback address that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def accepts_connections(port: int, timeout: float = 0.2) -> bool:
    """True when something listens on the loopback `port`."""
    try:
        with socket.create_connection((LOOPBACK, port), timeout=timeout):
            return True
    except OSError:
        return False


# The community launchers bind fixed ports (Ray 6379, its dashboard 8265) that no engine profile's pass may share:
# a test that starts them holds this machine-wide lock, so passes running at the same time take turns.
FIXED_PORTS_LOCK = Path(tempfile.gettempdir()) / "kvbake-rig-fixed-ports.lock"


@contextmanager
def fixed_ports_held(path: Path = FIXED_PORTS_LOCK) -> Iterator[None]:
    """Wait until no other process of this machine holds the launchers' fixed ports, then hold them until the end."""
    with path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
