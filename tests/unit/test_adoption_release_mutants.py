"""adopt --release on fake nodes (its audit line; whether the rollback target goes too), and a killed rollback to the adopted serve undone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvbake.errors import LockLost, RolloutError
from kvbake.ship.adapters import rollout
from kvbake.ship.adapters.adoption import adopt, release_adoption, rollback_to_adopted
from kvbake.ship.adapters.node_locks import LOCK_NAME, HeldLocks
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.core.lock_claims import claim_from_labels

from fake_fleet import (CONTAINER, CONTROL, PACKING, World, deploy, killed_after_journal_write, locks_taken_after_each_retag, make_world,
                        start_serves)
from message_words import says

KEPT = f"{CONTAINER}-kvbake-adopted"


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


def last_audit(world: World, node: str) -> str:
    """The node's newest audit line without its time stamp and author."""
    return NodeState(node, world.engines[node]).read().audit.splitlines()[-1].split(" ", 2)[2]


def test_releasing_an_adopted_serve_that_is_the_rollback_target_drops_that_target_and_says_so(world):
    start_serves(world)
    adopted = adopt(world.fleet, "seed serve", False)
    deploy(world, CONTROL)
    assert release_adoption(world.fleet, False) == ["a", "b"]
    for node, engine in world.engines.items():
        records = NodeState(node, engine).read()
        assert (records.current.id, records.previous, records.adopted) == (CONTROL.id, None, None)
        assert world.fleet.tag("previous") not in engine.tags and KEPT not in engine.containers
        assert last_audit(world, node) == f"adopt --release: forgot the adopted serve {adopted[node].id} (it was the rollback target)"


def test_releasing_an_adopted_serve_two_deploys_back_keeps_the_rollback_target(world):
    start_serves(world)
    adopted = adopt(world.fleet, "seed serve", False)
    deploy(world, CONTROL)
    deploy(world, PACKING)
    previous_image = {node: engine.tags[world.fleet.tag("previous")] for node, engine in world.engines.items()}
    assert release_adoption(world.fleet, False) == ["a", "b"]
    for node, engine in world.engines.items():
        records = NodeState(node, engine).read()
        assert (records.current.id, records.previous.id, records.adopted) == (PACKING.id, CONTROL.id, None)
        assert engine.tags[world.fleet.tag("previous")] == previous_image[node] and KEPT not in engine.containers
        assert last_audit(world, node) == f"adopt --release: forgot the adopted serve {adopted[node].id}"


def test_a_rollback_to_the_adopted_serve_killed_at_any_write_is_undone_to_the_records_and_tags_before_it(world):
    start_serves(world)
    adopt(world.fleet, "seed serve", False)
    deploy(world, CONTROL)
    deploy(world, PACKING)
    before = world.snapshot()
    at = 1
    while killed_after_journal_write(at, lambda: rollback_to_adopted(world.fleet, False)):
        world.advance(901)  # the killed host's locks went stale
        rollout.recover(world.fleet, "revert", True, command="deploy")
        assert world.snapshot() == before, f"killed after journal write {at}"
        at += 1
    assert at > 2, "the rollback was killed at a step that changed a node at least once"


def test_release_holds_every_nodes_lock_as_a_release_on_the_image_that_serves(world):
    start_serves(world)
    adopt(world.fleet, "seed serve", False)
    deploy(world, CONTROL)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(HeldLocks, "release", lambda self: None)  # the locks stay as they were held
        release_adoption(world.fleet, False)
    for engine in world.engines.values():
        lock = engine.containers[LOCK_NAME]
        assert re.fullmatch(r"release-\d{8}T\d{6}Z-[0-9a-f]{6}", claim_from_labels(lock["Config"]["Labels"]).deploy)
        assert lock["Image"] == engine.tags[world.fleet.tag("current")]


def test_release_while_the_adopted_serve_runs_is_refused_with_the_deploy_that_comes_first(world):
    start_serves(world)
    adopt(world.fleet, "seed serve", False)
    with pytest.raises(RolloutError) as refused:
        release_adoption(world.fleet, False)
    assert says(refused.value.fix, "deploy a kvbake release first (python build.py deploy --preset NAME)")


def test_release_with_no_adopted_serve_kept_is_refused_as_nothing_to_do(world):
    deploy(world, CONTROL)
    before = world.snapshot()
    with pytest.raises(RolloutError) as refused:
        release_adoption(world.fleet, False)
    assert says(refused.value.message, "no node keeps an adopted serve") and says(refused.value.fix, "nothing to do")
    assert world.snapshot() == before


def test_a_rollback_to_the_adopted_serve_is_journalled_under_its_own_id_and_holds_the_locks_by_it(world):
    start_serves(world)
    adopted = adopt(world.fleet, "seed serve", False)
    deploy(world, CONTROL)
    serving = {node: engine.tags[world.fleet.tag("current")] for node, engine in world.engines.items()}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(HeldLocks, "release", lambda self: None)  # the locks stay as they were held
        journal = rollback_to_adopted(world.fleet, False)
    assert re.fullmatch(r"rollback-\d{8}T\d{6}Z-[0-9a-f]{6}", journal.id)
    assert (journal.kind, journal.release_id) == ("rollback", adopted["a"].id)
    for node, engine in world.engines.items():
        lock = engine.containers[LOCK_NAME]
        assert claim_from_labels(lock["Config"]["Labels"]).deploy == journal.id
        assert lock["Image"] == serving[node]  # the lock was made from what served when it was taken


def test_a_rollback_to_an_adopted_serve_no_node_keeps_is_refused_naming_every_node(world):
    deploy(world, CONTROL)
    before = world.snapshot()
    with pytest.raises(RolloutError) as refused:
        rollback_to_adopted(world.fleet, False)
    assert says(refused.value.message, "a, b keeps no adopted serve (none was adopted, or adopt --release forgot it)")
    assert says(refused.value.fix, "roll back to the previous release instead (python build.py rollback)")
    assert world.snapshot() == before


def test_a_rollback_to_the_adopted_serve_while_it_serves_is_refused_as_nothing_to_do(world):
    start_serves(world)
    adopt(world.fleet, "seed serve", False)
    before = world.snapshot()
    with pytest.raises(RolloutError) as refused:
        rollback_to_adopted(world.fleet, False)
    assert says(refused.value.message, "a, b already serves the adopted serve") and says(refused.value.fix, "nothing to do")
    assert world.snapshot() == before


def test_a_rollback_to_the_adopted_serve_whose_locks_are_taken_from_it_midway_stops_at_once(world):
    start_serves(world)
    adopt(world.fleet, "seed serve", False)
    deploy(world, CONTROL)
    with locks_taken_after_each_retag(world), pytest.raises(LockLost):
        rollback_to_adopted(world.fleet, False)


def test_redeploying_the_current_release_keeps_the_adopted_serve_restorable(world):
    start_serves(world)
    adopt(world.fleet, "seed serve", False)
    deploy(world, CONTROL)
    deploy(world, CONTROL)
    for node, engine in world.engines.items():
        records = NodeState(node, engine).read()
        assert records.current == CONTROL and records.adopted is not None and records.previous == records.adopted
