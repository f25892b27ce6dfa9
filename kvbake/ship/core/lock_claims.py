"""A node lock's claim (owner token, holder, deploy) and renewal, as labels and JSON; whether a lock is live or stale."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Mapping

LABEL = "kvbake.lock."
RENEWAL_DIR = "kvbake-lock"
RENEWAL_FILE = "renewed.json"


@dataclass(frozen=True)
class LockClaim:
    """Who holds a node lock: a random owner token only the holder knows, the holder's user@host:pid and machine id, the
    transition it runs, and when it took the lock by the node's own clock; a claim an older kvbake wrote lacks the
    fields after `since`."""

    token: str
    owner: str
    machine: str
    deploy: str
    since: float
    boot: str = ""  # the holder machine's boot id
    host: str = ""  # its host name
    started: str = ""  # the holder process's start time (clock ticks since boot, from /proc/PID/stat)
    pid_namespace: str = ""  # the PID namespace its PID is valid in (`pid:[inode]`)

    def labels(self) -> dict[str, str]:
        return {LABEL + "token": self.token, LABEL + "owner": self.owner, LABEL + "machine": self.machine,
                LABEL + "deploy": self.deploy, LABEL + "since": f"{self.since:.3f}", LABEL + "boot": self.boot,
                LABEL + "host": self.host, LABEL + "started": self.started, LABEL + "pidns": self.pid_namespace}

    @property
    def pid(self) -> int | None:
        text = self.owner.rpartition(":")[2]
        return int(text) if text.isdigit() else None


def claim_from_labels(labels: Mapping[str, str] | None) -> LockClaim:
    """The claim a lock container carries; a lock an older kvbake wrote (no token) gets an empty token."""
    labels = labels or {}
    try:
        since = float(labels.get(LABEL + "since", "0"))
    except ValueError:
        since = 0.0
    return LockClaim(labels.get(LABEL + "token", ""), labels.get(LABEL + "owner", "unknown"), labels.get(LABEL + "machine", ""),
                     labels.get(LABEL + "deploy", ""), since, labels.get(LABEL + "boot", ""), labels.get(LABEL + "host", ""),
                     labels.get(LABEL + "started", ""), labels.get(LABEL + "pidns", ""))


@dataclass(frozen=True)
class HostIdentity:
    """What tells one running machine from another: its machine id, its boot id and its host name. Cloned VMs and
    containers that bind-mount /etc/machine-id share the first; a reboot changes the second. Containers of one machine
    share its boot id too (and its host name with `--network host`), so the PID namespace this process sees PIDs in
    tells whether a holder's PID means the same process here ("" where it cannot be read)."""

    machine: str
    boot: str
    host: str
    pid_namespace: str = ""


def holder_is_gone(claim: LockClaim, here: HostIdentity, my_pid: int, held_here: bool, start_of: Callable[[int], str | None]) -> bool:
    """Whether the lock's holder is known to be gone: it ran on this very machine, in this boot and in this PID
    namespace (machine id, boot id, host name and namespace all match), and its process no longer exists, or another
    process now has its PID (another start time), or it was this process and no longer holds the lock. Anything else
    cannot be judged from here (a claim of an older kvbake names no namespace): False, and the lock goes stale by the
    node's clock alone."""
    if claim.pid is None or not (claim.machine and claim.boot and claim.host and claim.pid_namespace):
        return False
    if (claim.machine, claim.boot, claim.host, claim.pid_namespace) != (here.machine, here.boot, here.host, here.pid_namespace):
        return False
    if claim.pid == my_pid:
        return not held_here
    started = start_of(claim.pid)
    return started is None or (bool(claim.started) and started != claim.started)


def start_time(stat: str) -> str | None:
    """A process's start time (field 22 of /proc/PID/stat, clock ticks since boot); the fields after the command's
    closing parenthesis are counted, since the command itself may hold spaces and parentheses."""
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else None


def renewal_bytes(token: str, at: float) -> bytes:
    return (json.dumps({"token": token, "at": round(at, 3)}, sort_keys=True) + "\n").encode()


def renewed_at(claim: LockClaim, data: bytes | None) -> float:
    """The last renewal by the node's clock: the renewal file's time when the holder's own token wrote it, else the
    time the lock was taken."""
    try:
        doc = json.loads(data.decode("utf-8")) if data else None
    except (UnicodeDecodeError, ValueError):
        doc = None
    if isinstance(doc, dict) and doc.get("token") == claim.token and isinstance(doc.get("at"), (int, float)):
        return max(float(doc["at"]), claim.since)
    return claim.since


def is_stale(renewed: float, now: float, stale_after_s: float, holder_gone: bool) -> bool:
    """A lock is stale when its holder has not renewed it for `stale_after_s` by the node's clock, or when its holder
    was a process of this very machine that no longer exists."""
    return holder_gone or now - renewed >= stale_after_s


def broken_name(lock_name: str, container_id: str) -> str:
    """The one name a broken lock container is renamed to: derived from its ID, so of two hosts racing to break the
    same lock only the first rename succeeds."""
    return f"{lock_name}-broken-{container_id[:32]}"


def node_epoch(system_time: str) -> float:
    """The engine's `SystemTime` (RFC 3339, nanoseconds, Z or an offset) as seconds since the epoch. Python's ISO
    reader (3.11 on) takes any number of fraction digits (to the microsecond), a lower-case `t` and `Z`; not a
    lower-case `z`, which RFC 3339 also allows."""
    return datetime.fromisoformat(re.sub(r"z$", "Z", system_time)).timestamp()
