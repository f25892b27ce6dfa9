"""The machine-wide lock on the community launchers' fixed ports: a second process waits while one holds it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kvbake_rig.ports import fixed_ports_held

TRY_LOCK = """
import fcntl, sys
with open(sys.argv[1], "a") as lock:
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print("held elsewhere")
    else:
        print("taken")
"""


def other_process_tries(path: Path) -> str:
    return subprocess.run([sys.executable, "-c", TRY_LOCK, str(path)], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_another_process_cannot_take_the_fixed_ports_while_they_are_held_and_can_once_released(tmp_path: Path):
    lock = tmp_path / "fixed-ports.lock"  # the machine's own lock may be held by a docker pass running meanwhile
    with fixed_ports_held(lock):
        assert other_process_tries(lock) == "held elsewhere"
    assert other_process_tries(lock) == "taken"
