"""Counterexamples the rollout model found, replayed step by step on its world of two nodes and two operator hosts."""

from __future__ import annotations

from pathlib import Path

import pytest

import model_commands as commands
from kvbake.errors import DivergedError, EngineError, LockLost, RolloutError
from kvbake.ship.adapters.node_locks import LOCK_NAME
from kvbake.ship.adapters.nodestate import STATE_NAME
from model_fixes import fix_failures
from model_oracle import (adopted_failures, audit_lines, lost_audit_lines, named_stray_tags, records, serving_failures, tag_failures,
                          unsettled)
from fake_fleet import CONTAINER, OTHER, PACKING, REPO
from model_world import NODES, STALE, Fault, World, acting_on, patched


@pytest.fixture
def world(tmp_path):
    with patched(), acting_on(World(tmp_path, "in-order")) as chosen:
        yield chosen


def nodes_back_and_locks_stale(world: World) -> None:
    for fake in world.fakes.values():
        fake.down, fake.clock = False, fake.clock + STALE + 1


def test_a_revert_from_the_other_host_lets_the_first_host_drop_its_diverged_mark(world):
    """h0's deploy loses node a half-way and its revert fails (diverged); h1 reverts it. h0's named repair then finds no
    node keeping that journal: it drops its own copy and its own diverged mark, and h0 deploys again."""
    assert isinstance(world.run("h0", commands.deploy("control"), Fault("a.tag", 2, "lost")), DivergedError)
    nodes_back_and_locks_stale(world)
    assert world.run("h1", commands.recover("revert", "deploy", True)) is None
    refused = world.run("h0", commands.recover("revert", "deploy", True))
    assert isinstance(refused, RolloutError) and refused.exit_code != 0
    assert not unsettled(world)
    assert world.run("h0", commands.deploy("packing")) is None


def interrupted_packing(world: World) -> None:
    """h0 runs control, then its deploy of packing is killed once both nodes keep the journal; its locks go stale."""
    assert world.run("h0", commands.deploy("control")) is None
    assert world.run("h0", commands.deploy("packing"), Fault("journal", 3, "kill")) == "killed"
    nodes_back_and_locks_stale(world)


def test_a_revert_refuses_a_journal_another_host_finished_while_it_waited_for_the_locks(world):
    """h1's deploy --revert reads the journal the nodes keep; before it takes a lock, h0 resumes and finishes it. Under
    the locks h1 finds no node keeping that journal: it is refused, and the finished deploy is not walked back."""
    interrupted_packing(world)
    refused = world.run("h1", commands.recover("revert", "deploy", True), Fault("a.*", 3, "meanwhile-resume"))
    assert isinstance(refused, RolloutError) and refused.exit_code == RolloutError.exit_code
    assert not world.rewalked and not unsettled(world)
    assert {records(world, node).current.preset for node in NODES} == {"packing"}


def test_a_lock_breaker_never_writes_back_records_another_host_changed_since_it_read_them(world, monkeypatch):
    """h1 breaks h0's stale lock on node a and records the break in a's audit log; h0 tries to resume its deploy between
    h1's read of a's records and h1's write of them. h1 writes only once it holds the lock, so h0 is refused and h1
    reverts the deploy once; no write puts back records read before another host changed them."""
    fake, broke = world.fakes["a"], []
    rename, copy_out = fake.rename_container, fake.copy_out

    def rename_noted(container: str, new_name: str) -> bool:
        broke.append(new_name.startswith(f"{LOCK_NAME}-broken-"))
        return rename(container, new_name)

    def read_then_resume(container: str, path: str, destination: Path) -> bool:
        copied = copy_out(container, path, destination)
        if container == STATE_NAME and broke and broke.pop() and world.acting == "h1":
            world.meanwhile("resume")
        return copied

    interrupted_packing(world)
    monkeypatch.setattr(fake, "rename_container", rename_noted)
    monkeypatch.setattr(fake, "copy_out", read_then_resume)
    assert world.run("h1", commands.recover("revert", "deploy", True)) is None
    assert not world.rewalked and not serving_failures(world) and not tag_failures(world)
    assert {records(world, node).current.preset for node in NODES} == {"control"}
    assert not any(records(world, node).transition for node in NODES)


def test_a_lock_taken_by_a_break_whose_audit_fails_is_released(world):
    """h1 breaks h0's stale lock on node a and takes it, then the engine refuses the audit line: h1 is refused, and it
    leaves no lock of its own behind on a."""
    interrupted_packing(world)
    refused = world.run("h1", commands.recover("revert", "deploy", True), Fault("a.copy_in", 1, "error"))
    assert isinstance(refused, RolloutError) and refused.exit_code == RolloutError.exit_code
    assert LOCK_NAME not in world.fakes["a"].containers


@pytest.mark.parametrize("first", ["revert", "resume"])
def test_a_recovery_from_the_nodes_copy_killed_in_turn_is_reverted_on_every_node(world, first):
    """h0's deploy of other is killed after its last restart began; h1 starts a revert (or a resume) from the copy the
    nodes keep, and is killed after its second journal write. h1's deploy --revert then walks back every node, not only
    those its own interrupted steps reached, and the fleet serves control again."""
    assert world.run("h0", commands.deploy("control")) is None
    assert world.run("h0", commands.deploy("other"), Fault("journal", 5, "kill")) == "killed"
    nodes_back_and_locks_stale(world)
    assert world.run("h1", commands.recover(first, "deploy", True), Fault("journal", 2, "kill")) == "killed"
    nodes_back_and_locks_stale(world)
    assert world.run("h1", commands.recover("revert", "deploy", True)) is None
    assert not serving_failures(world) and not tag_failures(world)
    assert {records(world, node).current.preset for node in NODES} == {"control"}


def test_the_nodes_copy_of_a_resumed_journal_still_says_nothing_of_progress(world):
    """h0's first deploy is killed after retagging; h0 resumes it and is killed again once both ranks run. The nodes keep
    the plan only (not h0's progress of before the resume), so h1's deploy --revert removes both serving containers."""
    assert world.run("h0", commands.deploy("control"), Fault("journal", 3, "kill")) == "killed"
    nodes_back_and_locks_stale(world)
    assert world.run("h0", commands.recover("resume", "deploy", True), Fault("ready", 1, "kill")) == "killed"
    nodes_back_and_locks_stale(world)
    assert world.run("h1", commands.recover("revert", "deploy", True)) is None
    assert not serving_failures(world) and not tag_failures(world)
    assert all(records(world, node).current is None and CONTAINER not in world.fakes[node].containers for node in NODES)


@pytest.mark.parametrize("call", ["a.set_restart_policy", "a.stop"])
def test_a_deploy_that_fails_while_setting_the_adopted_serve_aside_brings_it_back_as_it_ran(world, call):
    """The adopted serve (kept, restarting unless-stopped until adopt turned that off) is being set aside for control when
    node a's engine refuses a call: the revert brings it back as it ran, that very container, restarting unless-stopped
    at boot again."""
    world.serve_unadopted("main", auto_remove=False)
    assert world.run("h0", commands.adopt()) is None
    failed = world.run("h0", commands.deploy("control"), Fault(call, 1, "error"))
    assert isinstance(failed, (EngineError, RolloutError)) and not isinstance(failed, DivergedError)
    assert not serving_failures(world) and not adopted_failures(world) and not unsettled(world)
    serve = world.fakes["a"].containers[CONTAINER]
    assert serve["Id"] == world.unadopted["a"] and serve["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"


def test_a_resume_whose_locks_were_broken_while_it_paused_writes_nothing_over_the_deploy_another_host_settled(world):
    """h0's deploy is killed after its restart began; h0 resumes it with --break-lock and pauses (past the locks'
    staleness) between reading node b's records and writing the audit line of that break, while h1 breaks the locks in
    turn and reverts. Woken, h0 neither writes b's old records back with its audit line nor writes down the deploy h1
    settled: it stops, and its own copy of the journal goes with the resume it names (the rollout model found this)."""
    assert world.run("h0", commands.deploy("other", True), Fault("journal", 5, "kill")) == "killed"
    stopped = world.run("h0", commands.recover("resume", "deploy", True), Fault("b.*", 10, "pause-revert"))
    assert isinstance(stopped, LockLost) and "node b: this host no longer holds its lock" in stopped.one_line(), stopped
    assert not world.rewalked, world.rewalked
    assert unsettled(world) == ["h0 keeps journal.json"] and not serving_failures(world) and not tag_failures(world)
    assert all(records(world, node).current is None and records(world, node).transition is None for node in NODES)
    refused = world.run("h0", commands.recover("resume", "deploy", False))
    assert isinstance(refused, RolloutError) and "nothing to do" not in refused.one_line(), refused
    assert not unsettled(world) and not world.rewalked


@pytest.mark.parametrize("node", NODES)
def test_a_resume_paused_at_any_call_never_writes_down_a_deploy_another_host_settled_meanwhile(tmp_path, node):
    """As above, with the pause before each of h0's first 30 calls to the node in turn (some fall after the locks are
    taken, before the resume's first write): h0 checks its locks before it writes its journal, so it never writes down
    again the deploy h1 settled while it paused."""
    for nth in range(1, 31):
        with patched(), acting_on(World(tmp_path / f"{node}{nth}", "in-order")) as world:
            assert world.run("h0", commands.deploy("other", True), Fault("journal", 5, "kill")) == "killed"
            world.run("h0", commands.recover("resume", "deploy", True), Fault(f"{node}.*", nth, "pause-revert"))
            assert not world.rewalked and not tag_failures(world), (nth, world.rewalked, tag_failures(world))


@pytest.mark.parametrize("where, nth", [("b.copy_in", 2), ("a.copy_in", 4), ("b.copy_in", 5)])
def test_a_record_write_that_lands_late_removes_no_audit_line_the_other_host_wrote(world, where, nth):
    """h0's deploy of packing is paused inside a write of a node's state (its fence advanced); h1 breaks the locks and
    reverts, then h0's write lands. When the audit log was one file written whole, that write put back the log h0 had
    read, and h1's lines (the lock break, the revert) were gone; each line is a file of its own now."""
    assert world.run("h0", commands.deploy("control")) is None
    seen: dict = {}
    lost_audit_lines(world, seen)
    assert isinstance(world.run("h0", commands.deploy("packing"), Fault(where, nth, "late-revert")), LockLost)
    assert world.audit_marks, "h1 ran in the middle of h0's write"
    assert lost_audit_lines(world, seen) == []
    assert any("broke stale lock" in line for line in audit_lines(world, where[0]))


def test_a_late_current_tag_is_named_and_the_refusals_printed_fix_resets_it(world):
    """h0's deploy of other is paused inside its call that points node a's `current` at other; h1 breaks the locks and
    reverts; then h0's call lands. Node a's records say packing, its tag other: status names the tag, the next deploy is
    refused naming it and `deploy --reset-tags`, which puts it back once; the deploy then works."""
    assert world.run("h0", commands.deploy("control")) is None
    assert world.run("h0", commands.deploy("packing")) is None
    assert isinstance(world.run("h0", commands.deploy("other"), Fault("a.tag:current", 1, "late-revert")), LockLost)
    assert tag_failures(world) == [], "the disagreeing tag is named by status"
    assert world.fakes["a"].tags[f"{REPO}:current"] == OTHER.config_digest and records(world, "a").current.preset == "packing"
    [named] = named_stray_tags(world)
    assert named.startswith(f"node a: tag current points at {OTHER.config_digest[:19]}, but its current record names {PACKING.config_digest[:19]}")
    refused = world.run("h1", commands.deploy("control"))
    assert isinstance(refused, RolloutError) and named in refused.message and fix_failures(world, "h1", refused) == []
    assert "python build.py deploy --reset-tags" in refused.fix
    assert world.run("h1", commands.reset_tags()) is None
    assert world.fakes["a"].tags[f"{REPO}:current"] == PACKING.config_digest and named_stray_tags(world) == []
    assert not unsettled(world)
    assert world.run("h1", commands.deploy("control")) is None
