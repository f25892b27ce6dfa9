"""What a host that lost its lock is told about the holder (with or without the deploy its claim names); a host's
locks fence only the nodes they were taken on; a lock this host never took, or released, is LockLost with a fix; and a
lock taken carries the start time and PID namespace of its holder's process. A machine without a boot id gives none,
and a holder on it is never judged gone from here."""

from __future__ import annotations

import os

import pytest

from kvbake.errors import LockLost
from kvbake.ship.adapters.node_fence import FencedEngine
from kvbake.ship.adapters import node_locks
from kvbake.ship.adapters.node_locks import LOCK_NAME, HeldLocks, NodeLock, boot_id, holder_gone, process_start, this_host
from kvbake.ship.core.lock_claims import LABEL, LockClaim, claim_from_labels

from fake_engine import FakeEngine
from test_node_locks import STALE, no_note


def holder_lock(engine: FakeEngine, deploy: str) -> NodeLock:
    engine.images.setdefault("base:1", {"Id": "base:1"})
    lock = NodeLock("a", engine, STALE, lambda engine, image, line: None)
    lock.acquire("base:1", deploy, False, no_note)
    return lock


def test_a_holder_whose_claim_names_no_deploy_is_said_to_hold_it_for_a_deploy():
    engine = FakeEngine("a")
    lock = holder_lock(engine, "deploy-2")
    del engine.container_inspect(LOCK_NAME)["Config"]["Labels"][LABEL + "deploy"]
    told = lock.holder_now()
    assert told.endswith("broke it as stale and holds it for a deploy")


def test_a_holder_whose_claim_names_its_deploy_is_said_to_hold_it_for_that_deploy():
    engine = FakeEngine("a")
    lock = holder_lock(engine, "deploy-2")
    assert lock.holder_now().endswith("holds it for deploy-2")


def no_audit(engine, image: str, line: str) -> None:
    raise AssertionError("nothing is audited here")


def test_only_the_nodes_locked_get_a_fenced_engine():
    engine_a, engine_b = object(), object()
    held = HeldLocks([NodeLock("a", engine_a, 30.0, no_audit)], 30.0)  # type: ignore[arg-type]
    fenced = held.fenced({"a": engine_a, "b": engine_b})  # type: ignore[dict-item]
    assert isinstance(fenced["a"], FencedEngine) and fenced["b"] is engine_b


def test_a_lock_never_taken_is_lost_with_a_fix():
    lock = NodeLock("a", object(), 30.0, no_audit)  # type: ignore[arg-type]
    with pytest.raises(LockLost) as lost:
        lock.prove_held()
    assert lost.value.message.startswith("node a: this host no longer holds its lock")
    assert lost.value.fix and "take it first" in lost.value.fix


def test_a_lock_taken_records_the_start_time_and_pid_namespace_of_the_process_that_holds_it():
    engine = FakeEngine("a")
    holder_lock(engine, "deploy-1")
    claim = claim_from_labels(engine.containers[LOCK_NAME]["Config"]["Labels"])
    assert claim.started and claim.started == process_start(os.getpid())
    assert claim.pid_namespace and claim.pid_namespace == os.readlink("/proc/self/ns/pid")


def test_a_machine_without_a_boot_id_gives_none_and_its_holders_are_never_judged_gone(tmp_path, monkeypatch):
    monkeypatch.setattr(node_locks, "BOOT_ID_FILE", str(tmp_path / "no-boot-id"))
    assert boot_id() == ""
    here = this_host()
    gone_pid = 2 ** 22 + 1  # above any PID the kernel hands out
    claim = LockClaim("t", f"ops@{here.host}:{gone_pid}", here.machine, "deploy-1", 0.0, here.boot, here.host, "1", here.pid_namespace)
    assert claim.pid == gone_pid and not holder_gone(claim)
