"""A node lock's claim (owner token, holder, deploy) and renewal, as labels and JSON; whether a lock is live or stale."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Mapping

LABEL = "kvbake.lock."
RENEWAL_DIR = "kvbake-lock"
RENEWAL_FILE = "renewed.json"


@dataclass(frozen=True)
class LockClaim:
    """Who holds a node lock: a random owner token only the holder knows, the holder's user@host:pid and machine id, the
    transition it runs, and when it took the lock by the node's own clock."""

    token: str
    owner: str
    machine: str
    deploy: str
    since: float

    def labels(self) -> dict[str, str]:
        return {LABEL + "token": self.token, LABEL + "owner": self.owner, LABEL + "machine": self.machine,
                LABEL + "deploy": self.deploy, LABEL + "since": f"{self.since:.3f}"}

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
                     labels.get(LABEL + "deploy", ""), since)


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
