"""A node's state record: each write's sequence number is one more than the newest copy's; a node whose state holds
no audit log yet reads an empty one; the record and its audit line land in the labelled state container's /kvbake,
each line in a file of its own after the old whole-file log, so that a write landing late removes none; every audit
line starts with the UTC time."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

from kvbake.ship.adapters.nodestate import AUDIT, STATE_DIR, STATE_NAME, NodeState

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
    for path in [path for path in files if "/" + AUDIT in path]:
        del files[path]
    assert state.read().audit == ""
    state.update("sha256:x", "second")
    assert state.read().audit.count("\n") == 1 and state.read().audit.endswith(" second\n")
    assert state.update("sha256:x", "third").audit == state.read().audit, "a write returns the record as the node now has it"


def test_the_old_whole_file_log_is_read_first_then_each_write_s_line_in_order():
    engine, state = node()
    state.update("sha256:x", "first")
    engine.files[STATE_NAME][f"{STATE_DIR}/{AUDIT}"] = b"2026-01-01T00:00:00Z ops@old:1 before lines were files\n"
    for n in range(2, 12):
        state.update("sha256:x", f"write {n}")
    audit = state.read().audit
    lines = [line.split(" ", 2)[2] for line in audit.splitlines()]
    assert lines == ["before lines were files", "first", *(f"write {n}" for n in range(2, 12))], "ten and more sort by number"
    assert all(re.match(r"\d{4}-\d\d-\d\dT", line) for line in audit.splitlines()), "the files' lines, joined as they are"
    assert f"{STATE_DIR}/{AUDIT}" in engine.files[STATE_NAME], "the old log is never rewritten"


def test_a_write_that_lands_late_removes_no_line_another_host_wrote_meanwhile(tmp_path, monkeypatch):
    """Host 1 is stopped with its copy begun; host 2 writes twice; host 1's copy then lands. Every line stays."""
    engine, state = node()
    state.update("sha256:x", "first")
    original, held = engine.copy_in, []

    def hold(source: Path, container: str, path: str) -> None:
        held.append(shutil.copytree(source, tmp_path / "held" / source.name))

    monkeypatch.setattr(engine, "copy_in", hold)
    state.update("sha256:x", "host 1, late")
    monkeypatch.setattr(engine, "copy_in", original)
    state.update("sha256:x", "host 2 broke the lock")
    state.update("sha256:x", "host 2 reverted")
    original(held[0], STATE_NAME, "/")
    lines = [line.split(" ", 2)[2] for line in state.read().audit.splitlines()]
    assert sorted(lines) == sorted(["first", "host 1, late", "host 2 broke the lock", "host 2 reverted"])
    assert lines[0] == "first" and lines[-1] == "host 2 reverted"


def test_the_record_lands_in_the_state_containers_own_folder_which_is_labelled_for_people():
    engine, state = node()
    state.update("sha256:x", "first")
    written = set(engine.files[STATE_NAME]) - {"/kvbake/state-a.json"}
    assert "/kvbake/state-a.json" in engine.files[STATE_NAME] and len(written) == 1
    assert re.fullmatch(r"/kvbake/audit\.log\.0000000001-[0-9a-f]{8}", written.pop())
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
