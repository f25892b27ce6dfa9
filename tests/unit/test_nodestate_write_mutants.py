"""A node's state record: each write's sequence number is one more than the newest copy's, and a node whose state
holds no audit log yet reads an empty one."""

from __future__ import annotations

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
