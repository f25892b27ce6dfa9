"""A recovery's locks (the ID it holds them under, the image each lock is made from, renewed while it runs) and a
killed rollback undone with the adopted serve's record kept."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import kvbake.ship.adapters.transitions as transitions
from kvbake.errors import LockLost
from kvbake.ship.adapters import rollout
from kvbake.ship.adapters.adoption import adopt
from kvbake.ship.adapters.node_locks import LOCK_NAME, HeldLocks
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.core.journal import Journal, NodePlan, node_copy, read_journal, write_journal
from kvbake.ship.core.lock_claims import claim_from_labels

from fake_fleet import (BASE, CONTROL, PACKING, REPO, World, deploy, interrupted_deploy, killed_after_journal_write, locks_taken_after_each_retag,
                        make_world, start_serves)


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


def recover_keeping_locks(world: World, mode: str) -> rollout.Journal:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(HeldLocks, "release", lambda self: None)  # the locks stay as they were held
        return rollout.recover(world.fleet, mode, True)


@pytest.mark.parametrize("mode", ["resume", "revert"])
def test_a_recovery_holds_each_lock_under_its_own_id_made_from_the_image_the_node_moves_to(world, mode):
    deploy(world, CONTROL)
    interrupted_deploy(world, PACKING)
    journal = read_journal(world.fleet.deployment.state_dir)
    world.advance(901)  # the killed host's locks went stale
    recover_keeping_locks(world, mode)
    for plan in journal.nodes:
        lock = world.engines[plan.node].containers[LOCK_NAME]
        assert re.fullmatch(rf"{mode}-\d{{8}}T\d{{6}}Z-[0-9a-f]{{6}}", claim_from_labels(lock["Config"]["Labels"]).deploy)
        assert lock["Image"] == plan.after_current


def test_a_node_outside_the_journals_plan_is_locked_with_the_image_that_serves_on_it(world):
    deploy(world, CONTROL)
    engine_a = world.engines["a"]
    journal = Journal("deploy-only-a", "deploy", PACKING.id,
                      (NodePlan("a", engine_a.image_id_of(f"{REPO}:current"), None, engine_a.image_id_of(f"{REPO}:current"), None, {}, {}),))
    write_journal(world.fleet.deployment.state_dir, journal)
    NodeState("a", engine_a).update("base:1", "test: a journal of node a alone", transition=node_copy(journal))
    recover_keeping_locks(world, "revert")
    engine_b = world.engines["b"]
    assert engine_b.containers[LOCK_NAME]["Image"] == engine_b.image_id_of(f"{REPO}:current")


def killed_at_node_bs_retag(world: World) -> None:
    """A deploy of PACKING, killed as it retags node b: node a moved, and the host holds its locks."""
    original = transitions.retag

    def retag_or_die(fleet, name, current, previous):
        if name == "b":
            raise KeyboardInterrupt
        original(fleet, name, current, previous)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transitions, "retag", retag_or_die)
        patch.setattr(HeldLocks, "release", lambda self: None)
        with pytest.raises(KeyboardInterrupt):
            rollout.deploy(world.fleet, PACKING, "base:1", BASE, False)


@pytest.mark.parametrize("mode", ["resume", "revert"])
def test_a_recovery_whose_locks_are_taken_from_it_midway_stops_at_once(world, mode):
    deploy(world, CONTROL)
    killed_at_node_bs_retag(world)
    world.advance(901)
    with locks_taken_after_each_retag(world), pytest.raises(LockLost):
        rollout.recover(world.fleet, mode, True)


def adopted_ids(world: World) -> dict[str, str | None]:
    return {node: getattr(NodeState(node, engine).read().adopted, "id", None) for node, engine in world.engines.items()}


def test_a_killed_rollback_undone_at_any_write_keeps_the_adopted_serves_record(world):
    start_serves(world)
    adopt(world.fleet, "seed serve", False)
    deploy(world, CONTROL)
    deploy(world, PACKING)
    before, adopted = world.snapshot(), adopted_ids(world)
    assert all(adopted.values())
    at = 1
    while killed_after_journal_write(at, lambda: rollout.rollback(world.fleet, False)):
        world.advance(901)
        rollout.recover(world.fleet, "revert", True)
        assert (world.snapshot(), adopted_ids(world)) == (before, adopted), f"killed after journal write {at}"
        at += 1
    assert at > 2
