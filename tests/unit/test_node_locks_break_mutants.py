"""Breaking a stale node lock: the image the new lock and a first state record are made from, the name a broken lock
waits under when its removal fails, and the refusal of a breaker that lost the race."""

from __future__ import annotations

import pytest

from kvbake.errors import EngineError, RolloutError
from kvbake.ship.adapters.node_locks import LOCK_NAME
from kvbake.ship.adapters.nodestate import STATE_NAME
from kvbake.registry.adapters.registry_api import split_repository
from kvbake.ship.adapters.rollout import kept_by_any_node
from kvbake.ship.core.lock_claims import broken_name, claim_from_labels
from message_words import says

from fake_fleet import CONTROL, deploy
from test_node_locks import STALE, lock_of, no_note, world  # noqa: F401  (world is a fixture)

IMAGE = "base:1"  # an image every fake node holds


def stale_lock(world) -> str:
    """Node a's lock, taken and left to go stale; its container ID."""
    lock_of(world).acquire(IMAGE, "deploy-1", False, no_note)
    world.advance(STALE + 1)
    return world.engines["a"].containers[LOCK_NAME]["Id"]


def test_a_broken_lock_is_taken_anew_from_the_image_given_and_a_first_state_record_with_it(world):
    engine = world.engines["a"]
    stale_lock(world)
    assert STATE_NAME not in engine.containers
    lock_of(world).acquire(IMAGE, "deploy-2", True, no_note)
    assert engine.containers[LOCK_NAME]["Image"] == engine.image_id_of(IMAGE)
    assert engine.containers[STATE_NAME]["Image"] == engine.image_id_of(IMAGE)  # where the break is recorded


def test_a_broken_lock_whose_removal_fails_waits_under_the_name_derived_from_its_id(world, monkeypatch):
    engine = world.engines["a"]
    stale_id = stale_lock(world)

    def engine_fails(name: str) -> None:
        raise EngineError("a: remove failed", "check the engine")

    monkeypatch.setattr(engine, "remove_container", engine_fails)
    with pytest.raises(EngineError):
        lock_of(world).acquire(IMAGE, "deploy-2", True, no_note)
    assert engine.containers[broken_name(LOCK_NAME, stale_id)]["Id"] == stale_id


def test_a_breaker_that_lost_the_race_is_told_to_retry_later(world):
    stale_id = stale_lock(world)
    first, second = lock_of(world), lock_of(world)
    seen = second._read()
    first.acquire(IMAGE, "deploy-2", True, no_note)
    with pytest.raises(RolloutError) as refused:
        second._break(IMAGE, "deploy-3", stale_id, seen[1], "not renewed")
    assert says(refused.value.fix, "retry later")


def test_a_node_whose_records_are_corrupt_is_named_when_looking_for_a_journal(world):
    deploy(world, CONTROL)
    world.engines["b"].files[STATE_NAME] = {"/kvbake/state-a.json": b"{", "/kvbake/state-b.json": b""}
    with pytest.raises(RolloutError) as refused:
        kept_by_any_node(world.fleet, "deploy-1")
    assert says(refused.value.message, "node b: every copy of its state record is corrupt")


def test_a_registry_host_with_a_port_and_no_dot_is_the_registry():
    assert split_repository("myreg:5000/team/model") == ("myreg:5000", "team/model")


def test_a_broken_lock_is_taken_anew_under_the_breakers_deploy(world):
    stale_lock(world)
    lock_of(world).acquire(IMAGE, "deploy-2", True, no_note)
    assert claim_from_labels(world.engines["a"].containers[LOCK_NAME]["Config"]["Labels"]).deploy == "deploy-2"


def test_a_breaker_whose_free_name_another_deploy_took_is_told_to_retry_later(world):
    stale_id = stale_lock(world)
    breaker, newcomer = lock_of(world), lock_of(world)
    seen = breaker._read()
    engine = world.engines["a"]
    original = engine.rename_container

    def rename_then_newcomer(container, name):
        done = original(container, name)
        if "-broken-" in name:  # the break's rename, not a fence's
            newcomer.acquire(IMAGE, "deploy-9", False, no_note)
        return done

    engine.rename_container = rename_then_newcomer
    with pytest.raises(RolloutError) as refused:
        breaker._break(IMAGE, "deploy-2", stale_id, seen[1], "not renewed")
    assert says(refused.value.message, "node a: another deploy took the lock") and says(refused.value.fix, "retry later")
