"""Owned node locks on fake engines: an owner token, a heartbeat measured by the node's clock, a compare-and-swap
break, recovery that takes a lock like any deploy, and a host that lost its lock changing nothing more."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import kvbake.ship.adapters.transitions as transitions
from kvbake.errors import DivergedError, LockLost, RolloutError
from kvbake.ship.adapters import node_locks, rollout
from kvbake.ship.adapters.node_locks import LOCK_NAME, HeldLocks, NodeLock
from kvbake.ship.adapters.nodestate import NodeState, node_audit
from kvbake.ship.core.lock_claims import LockClaim, broken_name, claim_from_labels, is_stale, node_epoch, renewal_bytes, renewed_at

from fake_fleet import CONTAINER, CONTROL, OTHER, PACKING, World, deploy, interrupted_deploy, locks_taken_after_each_retag, make_world

STALE = 60.0


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


def lock_of(world: World, node: str = "a") -> NodeLock:
    return NodeLock(node, world.engines[node], STALE, node_audit(node))


def no_note(claim: LockClaim) -> str:
    return ""


def holder_token(world: World, node: str = "a") -> str:
    return world.engines[node].containers[LOCK_NAME]["Config"]["Labels"]["kvbake.lock.token"]


# ---- the pure claim ----

def test_the_node_clock_is_read_to_the_microsecond_in_any_zone():
    assert node_epoch("1970-01-01T00:00:10.123456789Z") == pytest.approx(10.123456)
    assert node_epoch("1970-01-01T01:00:10Z") == 3610.0
    assert node_epoch("1970-01-01T02:00:10.5+01:00") == pytest.approx(3610.5)
    assert node_epoch("1970-01-01t01:00:10.25z") == pytest.approx(3610.25), "RFC 3339 allows a lower-case t and z"


def test_a_claim_round_trips_through_labels_and_an_unlabelled_lock_has_no_token():
    claim = LockClaim("t" * 32, "ops@h:42", "m1", "deploy-1", 12.5)
    assert claim_from_labels(claim.labels()) == claim and claim.pid == 42
    old = claim_from_labels({"kvbake.lock.owner": "ops@h:1", "kvbake.lock.since": "7"})
    assert (old.token, old.since, old.deploy) == ("", 7.0, "")


def test_only_the_holders_own_renewal_counts():
    claim = LockClaim("mine", "o", "m", "d", 100.0)
    assert renewed_at(claim, renewal_bytes("mine", 150.0)) == 150.0
    assert renewed_at(claim, renewal_bytes("theirs", 150.0)) == 100.0, "a renewal written under another token"
    assert renewed_at(claim, b"{not json") == 100.0 and renewed_at(claim, None) == 100.0
    assert renewed_at(claim, renewal_bytes("mine", 50.0)) == 100.0, "never older than the lock itself"


def test_staleness_counts_from_the_last_renewal_or_a_gone_holder():
    assert not is_stale(100.0, 159.9, 60, False) and is_stale(100.0, 160.0, 60, False)
    assert is_stale(100.0, 100.0, 60, True)
    assert broken_name("kvbake-lock", "a" * 64) == "kvbake-lock-broken-" + "a" * 32


# ---- one node's lock ----

def test_a_taken_lock_carries_a_secret_token_and_refuses_a_second_host_naming_the_holder(world):
    first = lock_of(world)
    first.acquire("base:1", "deploy-1", False, no_note)
    assert holder_token(world) == first.token and len(first.token) == 32
    with pytest.raises(RolloutError) as refused:
        lock_of(world).acquire("base:1", "deploy-2", True, no_note)
    assert refused.value.exit_code == 12 and f"locked by {node_locks.who()} for deploy-1 (last renewed 0 s ago" in refused.value.message
    assert holder_token(world) == first.token, "--break-lock on a live lock changed nothing"


def test_the_heartbeat_keeps_a_long_deploy_from_looking_stale(world):
    """Measured from the last renewal, not from the start: 80 s after the start but 40 s after a renewal is live."""
    holder = lock_of(world)
    holder.acquire("base:1", "deploy-1", False, no_note)
    world.advance(40)
    holder.renew()
    world.advance(40)
    with pytest.raises(RolloutError, match=r"last renewed 40 s ago"):
        lock_of(world).acquire("base:1", "deploy-2", True, no_note)
    world.advance(20)
    breaker = lock_of(world)
    breaker.acquire("base:1", "deploy-2", True, no_note)
    assert holder_token(world) == breaker.token
    assert "broke stale lock of" in NodeState("a", world.engines["a"]).read().audit and "not renewed for 60 s" in NodeState("a", world.engines["a"]).read().audit


def test_a_stale_lock_is_refused_without_break_lock(world):
    lock_of(world).acquire("base:1", "deploy-1", False, no_note)
    world.advance(STALE)
    with pytest.raises(RolloutError, match=r"holds a stale lock from .* \(deploy-1, not renewed for 60 s\)") as refused:
        lock_of(world).acquire("base:1", "deploy-2", False, no_note)
    assert "--break-lock" in refused.value.fix


def test_releasing_removes_only_the_holders_own_lock(world):
    """A host whose stale lock was broken must not delete the lock the breaker holds now."""
    slow = lock_of(world)
    slow.acquire("base:1", "deploy-1", False, no_note)
    world.advance(STALE + 1)
    breaker = lock_of(world)
    breaker.acquire("base:1", "deploy-2", True, no_note)
    slow.release()
    assert holder_token(world) == breaker.token
    with pytest.raises(LockLost, match="node a: this host no longer holds its lock"):
        slow.renew()


def test_of_two_hosts_breaking_one_stale_lock_only_one_wins(world):
    lock_of(world).acquire("base:1", "deploy-1", False, no_note)
    world.advance(STALE + 1)
    first, second = lock_of(world), lock_of(world)
    stale_id = world.engines["a"].containers[LOCK_NAME]["Id"]
    seen = second._read()
    first.acquire("base:1", "deploy-2", True, no_note)
    assert seen is not None and seen[0] == stale_id
    with pytest.raises(RolloutError, match="another host broke the stale lock of .* first"):
        second._break("base:1", "deploy-3", seen[0], seen[1], "not renewed")
    assert holder_token(world) == first.token


def test_a_host_whose_rename_lost_the_race_to_a_new_lock_takes_nothing(world):
    """Between the break and the create another deploy may take the free name: the breaker then holds nothing."""
    lock_of(world).acquire("base:1", "deploy-1", False, no_note)
    world.advance(STALE + 1)
    breaker, newcomer = lock_of(world), lock_of(world)
    stale_id, claim, _ = breaker._read()
    original = world.engines["a"].rename_container

    def rename_then_newcomer(container, name):
        done = original(container, name)
        if "-broken-" in name:  # the break's rename, not a fence's
            newcomer.acquire("base:1", "deploy-9", False, no_note)
        return done

    world.engines["a"].rename_container = rename_then_newcomer
    with pytest.raises(RolloutError, match="another deploy took the lock"):
        breaker._break("base:1", "deploy-2", stale_id, claim, "not renewed")
    assert holder_token(world) == newcomer.token and breaker.container_id is None
    assert [n for n in world.engines["a"].containers if n.startswith(LOCK_NAME)] == [LOCK_NAME]


def test_a_lock_whose_holder_process_is_gone_on_this_machine_is_stale_at_once(world, monkeypatch):
    holder = lock_of(world)
    holder.acquire("base:1", "deploy-1", False, no_note)
    labels = world.engines["a"].containers[LOCK_NAME]["Config"]["Labels"]
    dead = 2**22 + 12345
    with pytest.raises(ProcessLookupError):
        os.kill(dead, 0)
    labels["kvbake.lock.owner"] = f"ops@host:{dead}"
    with pytest.raises(RolloutError, match=r"stale lock from ops@host:\d+ \(deploy-1, its process is gone\)"):
        lock_of(world).acquire("base:1", "deploy-2", False, no_note)
    labels["kvbake.lock.machine"] = "another-machine"
    with pytest.raises(RolloutError, match="is locked by"):
        lock_of(world).acquire("base:1", "deploy-2", False, no_note)


def test_the_held_locks_check_renews_every_lock_and_reports_a_broken_lock(world):
    locks = [lock_of(world, name) for name in ("a", "b")]
    for lock in locks:
        lock.acquire("base:1", "deploy-1", False, no_note)
    held = HeldLocks(locks, 3600)
    try:
        world.advance(1000)
        held.check()
        assert renewed_at(claim_from_labels(world.engines["b"].containers[LOCK_NAME]["Config"]["Labels"]),
                          world.engines["b"].files[LOCK_NAME]["/kvbake-lock/renewed.json"]) == world.engines["b"].clock
        world.engines["b"].remove_container(LOCK_NAME)
        with pytest.raises(LockLost, match="node b"):
            held.check()
        with pytest.raises(LockLost):
            held.check()
    finally:
        held.release()
    assert LOCK_NAME not in world.engines["a"].containers


# ---- recovery takes a lock like any deploy ----

def test_recovery_from_another_host_is_refused_while_the_lock_is_live(world, tmp_path):
    deploy(world, CONTROL)
    interrupted_deploy(world)
    other = world.host(tmp_path / "host2", STALE)
    before = world.snapshot()["nodes"]
    for mode in ("revert", "resume"):
        with pytest.raises(RolloutError, match=r"node a is locked by .* for deploy-.* \(last renewed 0 s ago.*keeps that deploy's journal"):
            rollout.recover(other, mode, True)
    assert world.snapshot()["nodes"] == before
    world.advance(STALE)
    rollout.recover(other, "revert", True)
    state = world.snapshot()["nodes"]
    assert {n: (s["records"], s["transition"], s["lock"]) for n, s in state.items()} == {n: ((CONTROL.id, None), None, False) for n in "ab"}


def test_a_host_that_lost_its_locks_mid_deploy_changes_nothing_more_and_reverts_nothing(world, tmp_path):
    deploy(world, CONTROL)
    with locks_taken_after_each_retag(world), pytest.raises(LockLost):
        deploy(world, PACKING)
    state = world.snapshot()
    assert state["nodes"]["a"]["current"] == PACKING.config_digest and state["nodes"]["b"]["current"] == CONTROL.config_digest
    assert world.launches == ["a:control", "b:control"], "nothing was launched or reverted after the lock was lost"
    assert [n for n in world.engines["a"].containers if n.startswith(LOCK_NAME)] == [LOCK_NAME] and holder_token(world) == "other"


# ---- the fixes around the journal ----

def test_a_node_that_cannot_take_the_journal_stops_the_deploy_before_any_node_changes(world):
    deploy(world, CONTROL)
    before = world.snapshot()
    original = NodeState.update

    def b_refuses_the_journal(self, image, line, **fields):
        if self.node == "b" and fields.get("transition"):
            raise RolloutError("node b: state write failed", "retry")
        return original(self, image, line, **fields)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(NodeState, "update", b_refuses_the_journal)
        with pytest.raises(RolloutError, match="could not begin: node b: state write failed") as refused:
            deploy(world, PACKING)
    assert "nothing was changed on any node" in refused.value.fix
    assert world.snapshot() == before
    assert world.launches == ["a:control", "b:control"], "no node was restarted"


def test_a_resume_is_refused_on_a_fleet_a_node_marks_diverged(world, tmp_path):
    deploy(world, CONTROL)
    interrupted_deploy(world)
    world.advance(STALE)
    NodeState("b", world.engines["b"]).update("base:1", "diverged", diverged={"by": "ops@h1", "revert_error": "x",
                                                                         "repair": "python build.py deploy --revert"})
    other = world.host(tmp_path / "host2", STALE)
    before = world.snapshot()["nodes"]
    with pytest.raises(DivergedError, match="node b is marked diverged by ops@h1") as refused:
        rollout.recover(other, "resume", True)
    assert refused.value.exit_code == 13 and "deploy --revert" in refused.value.fix
    assert {n: {k: v for k, v in s.items() if k != "lock"} for n, s in world.snapshot()["nodes"].items()} == {
        n: {k: v for k, v in s.items() if k != "lock"} for n, s in before.items()}
    rollout.recover(other, "revert", True)
    assert world.snapshot()["nodes"]["b"]["records"] == (CONTROL.id, None)


def test_a_revert_walks_back_only_the_nodes_the_journal_says_were_touched(world):
    """b's retag fails once: both retags were journalled, no restart was: the revert retags back and restarts nothing."""
    deploy(world, CONTROL)
    world.launches.clear()
    original = transitions.retag

    failed = []

    def b_down_before_retag(fleet, name, current, previous):
        if name == "b" and not failed:
            failed.append(name)
            raise RolloutError("node b: retag failed", "retry")
        original(fleet, name, current, previous)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transitions, "retag", b_down_before_retag)
        with pytest.raises(RolloutError, match="retag failed"):
            deploy(world, OTHER)
    assert world.launches == [], "no node had been restarted, so none is restarted to walk back"
    assert world.snapshot()["nodes"]["a"]["records"] == (CONTROL.id, None)


def test_a_revert_restarts_the_whole_gang_when_one_rank_is_down(world):
    """b's serve died (its node rebooted; ranks restart only as a gang) while a deploy failed before any restart: the
    revert restarts every rank, not only b, so that b can join its peer."""
    deploy(world, CONTROL)
    world.launches.clear()
    original = transitions.retag
    failed = []

    def b_dies_then_retag_fails(fleet, name, current, previous):
        if name == "b" and not failed:
            failed.append(name)
            world.engines["b"].stop(CONTAINER)
            raise RolloutError("node b: retag failed", "retry")
        original(fleet, name, current, previous)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transitions, "retag", b_dies_then_retag_fails)
        with pytest.raises(RolloutError, match="retag failed"):
            deploy(world, OTHER)
    assert world.launches == ["a:control", "b:control"]
    assert all(engine.containers[CONTAINER]["State"]["Running"] for engine in world.engines.values())


def test_a_host_whose_own_journal_no_node_keeps_recovers_the_journal_the_nodes_keep(world, tmp_path):
    """Host 2 keeps the journal of an adoption that never began (no node took it); meanwhile host 1 died deploying, and
    the nodes keep its journal. Host 2's deploy --resume drops its own copy and finishes the deploy the nodes keep."""
    from dataclasses import replace as with_fields

    from kvbake.ship.core.journal import read_journal, write_journal

    deploy(world, CONTROL)
    interrupted_deploy(world)
    other = world.host(tmp_path / "host2", STALE)
    kept = rollout.journal_on_nodes(world.fleet)
    write_journal(other.deployment.state_dir, with_fields(kept, id="adopt-20261205T000000Z-000000", kind="adopt"))
    world.advance(STALE + 1)
    finished = rollout.recover(other, "resume", True)
    assert finished.id == kept.id and read_journal(other.deployment.state_dir) is None
    assert {NodeState(name, engine).read().current.id for name, engine in world.engines.items()} == {PACKING.id}
