"""Adapter: per-node state kept inside the node's own engine: the release records and an audit log."""

from __future__ import annotations

import logging
import secrets
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

from kvbake.engines.adapters.client import Engine
from kvbake.errors import RolloutError
from kvbake.ship.adapters.node_locks import who
from kvbake.secretscan import withhold_credentials
from kvbake.ship.core.noderecords import LEGACY, SLOTS, NodeRecords, decode, encode, next_slot
from kvbake.ship.core.withheld_records import SCRUBBED, records_in_clear, withhold_records

log = logging.getLogger(__name__)

STATE_NAME = "kvbake-state"
STATE_DIR = "/kvbake"
AUDIT = "audit.log"  # the audit log before each line became a file of its own: read first, never written again
# One file per write, never rewritten: a write that lands late (a host stopped with its fence advanced) adds its line
# and removes none. Names sort by the record's sequence number, after AUDIT ("audit.log" is a prefix of each).
AUDIT_ENTRY = AUDIT + ".{seq:010d}-{token}"


class NodeState:
    """The records and audit log of one node, reached through its docker host."""

    def __init__(self, node_name: str, engine: Engine) -> None:
        self.node = node_name
        self.engine = engine

    def read(self) -> NodeRecords:
        """The node's newest intact records (empty when it has none); a corrupt record is a typed error."""
        with tempfile.TemporaryDirectory(prefix="kvbake-state-") as tmp:
            target = Path(tmp) / "s"
            if self.engine.container_inspect(STATE_NAME) is None or not self.engine.copy_out(STATE_NAME, STATE_DIR, target):
                return NodeRecords()
            files = {name: (target / name).read_bytes() for name in (*SLOTS, *LEGACY) if (target / name).is_file()}
            return decode(self.node, files, audit_text(target))

    def write(self, image: str, records: NodeRecords, audit_line: str) -> NodeRecords:
        """Write the whole record (under the node lock) into the slot that does not hold the newest copy, and append
        one audit line. Every field is written, so a release or transition that became none is cleared. A string that
        looks like a credential (in a record an earlier kvbake wrote, a launcher's line in a diverged mark) is written as
        a note of what was withheld, so that no write can stop a transition or its revert; what a deploy or an adoption
        adds was refused before it started. An adopted serve's secrets are written by name only: a value an older
        kvbake wrote in clear goes from both slots, and the command says so."""
        records = withhold_records(records)
        records = replace(records, current=withhold_credentials(records.current), previous=withhold_credentials(records.previous),
                          transition=withhold_credentials(records.transition), diverged=withhold_credentials(records.diverged),
                          adopted=withhold_credentials(records.adopted))
        audit_line = withhold_credentials(audit_line)
        old = self._read_or_fresh()
        in_clear = records_in_clear(old) if old.slot else []
        line = _audit_line(audit_line)
        written = replace(records, audit=old.audit + line, seq=old.seq + 1, slot=next_slot(old))
        with tempfile.TemporaryDirectory(prefix="kvbake-state-") as tmp:
            folder = Path(tmp) / "kvbake"
            folder.mkdir()
            (folder / written.slot).write_bytes(encode(written, written.seq))
            if in_clear:  # the other slot keeps the copy before this write: withheld as well
                (folder / old.slot).write_bytes(encode(withhold_records(old), old.seq))
            (folder / AUDIT_ENTRY.format(seq=written.seq, token=secrets.token_hex(4))).write_text(line)
            self._ensure_state(image)
            self.engine.copy_in(folder, STATE_NAME, "/")
        if in_clear:
            log.warning(SCRUBBED.format(what=" and ".join(in_clear), where=self.node))
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


def node_audit(node_name: str) -> Callable[[Engine, str, str], None]:
    """How a node's lock records a break: one audit line, appended through the (fenced) engine the lock gives."""
    return lambda engine, image, line: NodeState(node_name, engine).append_audit(image, line)


def _audit_line(text: str) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return f"{stamp} {who()} {' '.join(text.split())}\n"


def audit_text(folder: Path) -> str:
    """A node's audit log from a copy of its state folder: the old whole-file log, then each write's line in order."""
    entries = sorted(folder.glob(AUDIT + ".*"))
    return "".join(path.read_text() for path in [folder / AUDIT, *entries] if path.is_file())

