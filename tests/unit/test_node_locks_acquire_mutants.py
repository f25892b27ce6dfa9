"""Taking a node lock when the lock a first attempt met is released before it can be read: the second attempt takes it
as this deploy, from the image given, or names the node and asks for a retry; a live lock of no named deploy is held by
"a deploy"."""

from __future__ import annotations

import pytest

from kvbake.errors import RolloutError
from kvbake.ship.adapters.node_locks import LOCK_NAME
from kvbake.ship.core.lock_claims import claim_from_labels
from message_words import says

from test_node_locks import lock_of, no_note, world  # noqa: F401  (world is a fixture)

IMAGE = "base:1"  # an image every fake node holds


def first_create_meets_a_lock_released_at_once(engine, monkeypatch, then_taken_by_another: bool) -> None:
    """The first create_marker finds the name taken by a lock that is gone before it is read; the second meets an empty
    node, or (then_taken_by_another) a lock another deploy created just before it."""
    real = engine.create_marker
    calls = []

    def racing(image: str, name: str, labels: dict[str, str]):
        calls.append(name)
        if len(calls) == 1:
            return None
        if then_taken_by_another:
            real(IMAGE, name, {"kvbake.lock.token": "other"})
            monkeypatch.setattr(engine, "container_inspect", lambda name: None)  # and it is not readable yet
        return real(image, name, labels)

    monkeypatch.setattr(engine, "create_marker", racing)


def test_the_second_attempt_takes_the_lock_as_this_deploy_from_the_image_given(world, monkeypatch):
    engine = world.engines["a"]
    first_create_meets_a_lock_released_at_once(engine, monkeypatch, False)
    lock = lock_of(world)
    lock.acquire(IMAGE, "deploy-2", False, no_note)
    held = engine.containers[LOCK_NAME]
    assert lock.container_id == held["Id"] and held["Image"] == engine.image_id_of(IMAGE)
    assert claim_from_labels(held["Config"]["Labels"]).deploy == "deploy-2"


def test_a_second_attempt_that_loses_names_the_node_and_asks_for_a_retry(world, monkeypatch):
    engine = world.engines["a"]
    first_create_meets_a_lock_released_at_once(engine, monkeypatch, True)
    lock = lock_of(world)
    with pytest.raises(RolloutError) as refused:
        lock.acquire(IMAGE, "deploy-2", False, no_note)
    assert says(refused.value.message, "node a") and says(refused.value.fix, "retry later")
    assert lock.container_id is None


def test_a_live_lock_of_no_named_deploy_is_held_by_a_deploy(world):
    lock_of(world).acquire(IMAGE, "", False, no_note)
    with pytest.raises(RolloutError) as refused:
        lock_of(world).acquire(IMAGE, "deploy-2", False, no_note)
    assert says(refused.value.message, "for a deploy")
