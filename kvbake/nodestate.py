"""Adapter: per-node state kept inside the node's own engine: a lock marker, the release records and an audit log."""

from __future__ import annotations

import getpass
import json
import os
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from kvbake.engine import Engine
from kvbake.errors import RolloutError
from kvbake.release import Release, release_from_json, release_to_json

LOCK_NAME = "kvbake-lock"
STATE_NAME = "kvbake-state"
STATE_DIR = "/kvbake"
CURRENT, PREVIOUS, AUDIT = "current.json", "previous.json", "audit.log"


def who() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class NodeRecords:
    """The release records a node holds and its audit log."""

    current: Release | None
    previous: Release | None
    audit: str


class NodeState:
    """The lock and the records of one node, reached through its docker host."""

    def __init__(self, node_name: str, engine: Engine) -> None:
        self.node = node_name
        self.engine = engine

    def acquire(self, image: str, deploy_id: str, stale_after_s: float, break_stale: bool) -> None:
        """Take the node lock (an atomic container name); a stale lock is broken only when asked, and audited."""
        labels = {"kvbake.lock.owner": who(), "kvbake.lock.since": str(int(time.time())), "kvbake.lock.deploy": deploy_id}
        if self.engine.create_marker(image, LOCK_NAME, labels):
            return
        held = (self.engine.container_inspect(LOCK_NAME) or {}).get("Config", {}).get("Labels") or {}
        age = time.time() - float(held.get("kvbake.lock.since", "0"))
        owner = held.get("kvbake.lock.owner", "unknown")
        if held.get("kvbake.lock.deploy") == deploy_id:
            self.append_audit(image, f"took over the lock of interrupted {deploy_id} from {owner}")
            self.engine.remove_container(LOCK_NAME)
            if self.engine.create_marker(image, LOCK_NAME, labels):
                return
        if age < stale_after_s:
            raise RolloutError(f"node {self.node} is locked by {owner} for deploy {held.get('kvbake.lock.deploy')} ({int(age)} s ago)",
                               "wait for that deploy to finish; two deploys never run at once")
        if not break_stale:
            raise RolloutError(f"node {self.node} holds a stale lock from {owner} ({int(age)} s old)",
                               "check that no deploy is running, then pass --break-lock (it is recorded in the audit log)")
        self.append_audit(image, f"broke stale lock of {owner} (deploy {held.get('kvbake.lock.deploy')}, {int(age)} s old)")
        self.engine.remove_container(LOCK_NAME)
        if not self.engine.create_marker(image, LOCK_NAME, labels):
            raise RolloutError(f"node {self.node}: another deploy took the lock", "retry later")

    def release_lock(self) -> None:
        self.engine.remove_container(LOCK_NAME)

    def read(self) -> NodeRecords:
        with tempfile.TemporaryDirectory(prefix="kvbake-state-") as tmp:
            target = Path(tmp) / "s"
            if self.engine.container_inspect(STATE_NAME) is None or not self.engine.copy_out(STATE_NAME, STATE_DIR, target):
                return NodeRecords(None, None, "")
            return NodeRecords(_release(target / CURRENT), _release(target / PREVIOUS), _text(target / AUDIT))

    def write(self, image: str, current: Release | None, previous: Release | None, audit_line: str) -> None:
        """Replace the records and append one audit line (under the node lock)."""
        records = self.read()
        with tempfile.TemporaryDirectory(prefix="kvbake-state-") as tmp:
            folder = Path(tmp) / "kvbake"
            folder.mkdir()
            for name, release in ((CURRENT, current), (PREVIOUS, previous)):
                if release is not None:
                    (folder / name).write_text(release_to_json(release))
            (folder / AUDIT).write_text(records.audit + _audit_line(audit_line))
            self._ensure_state(image)
            self.engine.copy_in(folder, STATE_NAME, "/")

    def append_audit(self, image: str, line: str) -> None:
        records = self.read()
        self.write(image, records.current, records.previous, line)

    def _ensure_state(self, image: str) -> None:
        if self.engine.container_inspect(STATE_NAME) is None:
            self.engine.create_marker(image, STATE_NAME, {"kvbake.state": "1"})


def _audit_line(text: str) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return f"{stamp} {who()} {' '.join(text.split())}\n"


def _release(path: Path) -> Release | None:
    return release_from_json(path.read_text()) if path.is_file() else None


def _text(path: Path) -> str:
    return path.read_text() if path.is_file() else ""


def records_json(records: NodeRecords) -> dict:
    return {"current": json.loads(release_to_json(records.current)) if records.current else None,
            "previous": json.loads(release_to_json(records.previous)) if records.previous else None}
