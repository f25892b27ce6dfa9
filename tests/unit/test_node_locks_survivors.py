"""What a host that lost its lock is told about the holder when the holder's claim names no deploy."""

from __future__ import annotations

from kvbake.ship.adapters.node_locks import LOCK_NAME, NodeLock
from kvbake.ship.core.lock_claims import LABEL

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
