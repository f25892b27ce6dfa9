"""A node's state record: each write's sequence number is one more than the newest copy's; a node whose state holds
no audit log yet reads an empty one; the record and its audit log land in the labelled state container's /kvbake, and
every audit line starts with the UTC time."""

from __future__ import annotations

import re
import time

from kvbake.ship.adapters.nodestate import AUDIT, STATE_NAME, NodeState

from fake_engine import FakeEngine


def node() -> tuple[FakeEngine, NodeState]:
    engine = FakeEngine("a")
    engine.images["sha256:x"] = {"Id": "sha256:x"}
    return engine, NodeState("a", engine)


def test_each_write_numbers_its_copy_one_more_than_the_newest():
    engine, state = node()
    assert [state.update("sha256:x", f"write {n}").seq for n in range(3)] == [1, 2, 3]
    assert state.read().seq == 3


def test_a_state_without_an_audit_log_reads_an_empty_one():
    engine, state = node()
    state.update("sha256:x", "first")
    files = engine.files[STATE_NAME]
    audit = next(path for path in files if path.endswith("/" + AUDIT))
    del files[audit]
    assert state.read().audit == ""
    state.update("sha256:x", "second")
    assert state.read().audit.count("\n") == 1 and state.read().audit.endswith(" second\n")


def test_the_record_lands_in_the_state_containers_own_folder_which_is_labelled_for_people():
    engine, state = node()
    state.update("sha256:x", "first")
    assert set(engine.files[STATE_NAME]) == {"/kvbake/state-a.json", "/kvbake/audit.log"}
    assert engine.containers[STATE_NAME]["Config"]["Labels"] == {"kvbake.state": "1"}


def test_an_audit_line_starts_with_the_utc_time_in_any_local_zone(monkeypatch):
    engine, state = node()
    monkeypatch.setenv("TZ", "Pacific/Kiritimati")  # UTC+14: never UTC's hour
    time.tzset()
    try:
        before = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        state.update("sha256:x", "first")
        after = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    finally:
        monkeypatch.undo()
        time.tzset()
    stamp = state.read().audit.split(" ", 1)[0]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamp) and before <= stamp <= after
