"""Adapter: per-node state kept inside the node's own engine: a lock marker, the release records and an audit log."""

from __future__ import annotations

import getpass
import json
import os
import socket
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from kvbake.engines.adapters.client import Engine
from kvbake.errors import RolloutError
from kvbake.secretscan import withhold_credentials
from kvbake.ship.core.noderecords import LEGACY, SLOTS, NodeRecords, decode, encode, next_slot
from kvbake.ship.core.release import release_to_json

LOCK_NAME = "kvbake-lock"
STATE_NAME = "kvbake-state"
STATE_DIR = "/kvbake"
AUDIT = "audit.log"


def who() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}:{os.getpid()}"


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
            raise self._held_lock_error(owner, held.get("kvbake.lock.deploy"), age)
        if not break_stale:
            raise RolloutError(f"node {self.node} holds a stale lock from {owner} ({int(age)} s old)",
                               "check that no deploy is running, then pass --break-lock (it is recorded in the audit log)")
        self.append_audit(image, f"broke stale lock of {owner} (deploy {held.get('kvbake.lock.deploy')}, {int(age)} s old)")
        self.engine.remove_container(LOCK_NAME)
        if not self.engine.create_marker(image, LOCK_NAME, labels):
            raise RolloutError(f"node {self.node}: another deploy took the lock", "retry later")

    def _held_lock_error(self, owner: str, holder: str | None, age: float) -> RolloutError:
        """A lock that is not stale: wait for its deploy; if the node also keeps that deploy's journal, it may have died,
        and any operator host can finish or undo it (resume and revert take the lock over)."""
        message = f"node {self.node} is locked by {owner} for deploy {holder} ({int(age)} s ago)"
        transition = self.read().transition or {}
        if holder and transition.get("id") == holder:
            return RolloutError(f"{message} and keeps that deploy's journal",
                                "wait for it to finish; if it is no longer running, finish or undo it from any operator host with "
                                "python build.py deploy --resume or deploy --revert (they take over its lock)")
        return RolloutError(message, "wait for that deploy to finish; two deploys never run at once")

    def release_lock(self) -> None:
        self.engine.remove_container(LOCK_NAME)

    def read(self) -> NodeRecords:
        """The node's newest intact records (empty when it has none); a corrupt record is a typed error."""
        with tempfile.TemporaryDirectory(prefix="kvbake-state-") as tmp:
            target = Path(tmp) / "s"
            if self.engine.container_inspect(STATE_NAME) is None or not self.engine.copy_out(STATE_NAME, STATE_DIR, target):
                return NodeRecords()
            files = {name: (target / name).read_bytes() for name in (*SLOTS, *LEGACY) if (target / name).is_file()}
            return decode(self.node, files, _text(target / AUDIT))

    def write(self, image: str, records: NodeRecords, audit_line: str) -> NodeRecords:
        """Write the whole record (under the node lock) into the slot that does not hold the newest copy, and append
        one audit line. Every field is written, so a release or transition that became none is cleared. A string that
        looks like a credential (in a record an earlier kvbake wrote, a launcher's line in a diverged mark) is written as
        a note of what was withheld, so that no write can stop a transition or its revert; what a deploy or an adoption
        adds was refused before it started."""
        records = replace(records, current=withhold_credentials(records.current), previous=withhold_credentials(records.previous),
                          transition=withhold_credentials(records.transition), diverged=withhold_credentials(records.diverged))
        audit_line = withhold_credentials(audit_line)
        old = self._read_or_fresh()
        written = replace(records, audit=old.audit + _audit_line(audit_line), seq=old.seq + 1, slot=next_slot(old))
        with tempfile.TemporaryDirectory(prefix="kvbake-state-") as tmp:
            folder = Path(tmp) / "kvbake"
            folder.mkdir()
            (folder / written.slot).write_bytes(encode(written, written.seq))
            (folder / AUDIT).write_text(written.audit)
            self._ensure_state(image)
            self.engine.copy_in(folder, STATE_NAME, "/")
        return written

    def update(self, image: str, audit_line: str, **fields: object) -> NodeRecords:
        """Read, change the named fields, write whole."""
        return self.write(image, replace(self._read_or_fresh(), **fields), audit_line)

    def _read_or_fresh(self) -> NodeRecords:
        """Damaged records are overwritten only on a node being reseated: every transition reads the nodes' records
        first and refuses damaged ones."""
        try:
            return self.read()
        except RolloutError:
            return NodeRecords()

    def append_audit(self, image: str, line: str) -> None:
        self.write(image, self.read(), line)

    def _ensure_state(self, image: str) -> None:
        if self.engine.container_inspect(STATE_NAME) is None:
            self.engine.create_marker(image, STATE_NAME, {"kvbake.state": "1"})


def _audit_line(text: str) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return f"{stamp} {who()} {' '.join(text.split())}\n"


def _text(path: Path) -> str:
    return path.read_text() if path.is_file() else ""


def records_json(records: NodeRecords) -> dict:
    return {"current": json.loads(release_to_json(records.current)) if records.current else None,
            "previous": json.loads(release_to_json(records.previous)) if records.previous else None}
