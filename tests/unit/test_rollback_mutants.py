"""rollback on fake nodes: the locks it holds, its journal, its audit line, a deployment of one node, and its refusals
(nothing to roll back to, a record without its tag, nodes whose previous releases differ, a signature the deployment
file requires without a key to check it); a resume or revert admits the release it moves to by the same check."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from kvbake.deployfile import Signing
from kvbake.errors import RolloutError, SignatureError
from kvbake.ship.adapters import rollout
from kvbake.ship.adapters.node_locks import LOCK_NAME, HeldLocks
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.core.lock_claims import claim_from_labels

from fake_fleet import CONTROL, OTHER, PACKING, REPO, World, deploy, interrupted_deploy, make_world
from message_words import says


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


def test_a_rollback_is_journalled_as_one_and_holds_the_locks_under_its_id_made_from_what_served(world):
    deploy(world, CONTROL)
    deploy(world, PACKING)
    serving = {node: engine.image_id_of(f"{REPO}:current") for node, engine in world.engines.items()}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(HeldLocks, "release", lambda self: None)  # the locks stay as they were held
        journal = rollout.rollback(world.fleet, False)
    assert re.fullmatch(r"rollback-\d{8}T\d{6}Z-[0-9a-f]{6}", journal.id)
    assert (journal.kind, journal.release_id) == ("rollback", CONTROL.id)
    for node, engine in world.engines.items():
        lock = engine.containers[LOCK_NAME]
        assert claim_from_labels(lock["Config"]["Labels"]).deploy == journal.id and lock["Image"] == serving[node]


def test_a_rollback_notes_in_each_nodes_audit_what_it_moved_to_and_its_signature(world):
    deploy(world, CONTROL)
    deploy(world, PACKING)
    journal = rollout.rollback(world.fleet, False)
    for node, engine in world.engines.items():
        lines = [line.split(" ", 2)[2] for line in NodeState(node, engine).read().audit.splitlines()]
        assert f"rollback {journal.id} begins: {CONTROL.image} (signature not required by the deployment file)" in lines


def test_a_rollback_with_nothing_to_roll_back_to_is_refused_naming_every_node(world):
    deploy(world, CONTROL)
    before = world.snapshot()
    with pytest.raises(RolloutError) as refused:
        rollout.rollback(world.fleet, False)
    assert says(refused.value.message, "no previous release on a, b") and says(refused.value.fix, "there is nothing to roll back to")
    assert world.snapshot() == before


def test_a_previous_record_whose_tag_is_gone_is_nothing_to_roll_back_to(world):
    deploy(world, CONTROL)
    deploy(world, PACKING)
    world.engines["b"].untag(f"{REPO}:previous")
    before = world.snapshot()
    with pytest.raises(RolloutError) as refused:
        rollout.rollback(world.fleet, False)
    assert says(refused.value.message, "no previous release on b")
    assert world.snapshot() == before


def test_a_rollback_the_deployment_file_requires_signed_without_keys_names_that_file(world):
    deploy(world, CONTROL)
    deploy(world, PACKING)
    world.fleet.deployment.__dict__["signing"] = Signing(require_signature=True)
    before = world.snapshot()
    with pytest.raises(SignatureError) as refused:
        rollout.rollback(world.fleet, False)
    assert refused.value.message.startswith(f"{world.fleet.deployment.path.name}: signing.require_signature is true")
    assert world.snapshot() == before


def test_a_deployment_of_one_node_rolls_back(world):
    world.engines.pop("b")
    world.fleet = replace(world.fleet, deployment=replace(world.fleet.deployment, nodes=world.fleet.deployment.nodes[:1]))
    deploy(world, CONTROL)
    deploy(world, PACKING)
    journal = rollout.rollback(world.fleet, False)
    records = NodeState("a", world.engines["a"]).read()
    assert journal.release_id == CONTROL.id and (records.current, records.previous) == (CONTROL, PACKING)


def test_nodes_whose_previous_releases_differ_are_refused_before_anything_moves(world):
    deploy(world, CONTROL)
    deploy(world, PACKING)
    state = NodeState("b", world.engines["b"])
    state.update(world.engines["b"].image_id_of(f"{REPO}:current"), "a previous record from elsewhere", previous=OTHER)
    world.engines["b"].pull(OTHER.image)  # and its tag where that record says, so that only the releases differ
    world.engines["b"].tag(world.engines["b"].image_id_of(OTHER.image), f"{REPO}:previous")
    before = world.snapshot()
    with pytest.raises(RolloutError) as refused:
        rollout.rollback(world.fleet, False)
    assert f"a={CONTROL.id}, b={OTHER.id}" in refused.value.message
    assert "deploy --preset" in refused.value.fix
    assert world.snapshot() == before


def test_a_preset_deployed_on_the_image_already_current_is_rolled_back_to_the_previous_preset(world):
    same_image = replace(CONTROL, preset="packing", switches={"S": "3"})
    assert same_image.id != CONTROL.id
    deploy(world, CONTROL)
    deploy(world, same_image)
    records = NodeState("a", world.engines["a"]).read()
    assert (records.current, records.previous) == (same_image, CONTROL)
    assert rollout.rollback(world.fleet, False).release_id == CONTROL.id
    assert all(NodeState(n, e).read().current == CONTROL for n, e in world.engines.items())


def test_a_resume_admits_the_release_it_moves_to_as_a_deploy_does(world):
    """Another host's deploy of PACKING died after its journal; under a deployment file that requires a signature, a
    resume (to PACKING, new to the nodes) from this host is refused by the deploy's own check before any tag moves, and
    its fix names the revert."""
    deploy(world, CONTROL)
    interrupted_deploy(world, PACKING)
    world.fleet.deployment.__dict__["signing"] = Signing(require_signature=True)
    before = world.snapshot()
    with pytest.raises(SignatureError) as refused:
        rollout.recover(world.fleet, "resume", True)
    assert refused.value.message.startswith(f"{world.fleet.deployment.path.name}: signing.require_signature is true")
    assert PACKING.image in refused.value.message and "python build.py deploy --revert" in refused.value.fix
    assert world.snapshot() == before
    world.fleet.deployment.__dict__["signing"] = Signing()
    world.advance(world.fleet.deployment.lock_stale_after_s)  # the dead host's lock goes stale and is broken
    rollout.recover(world.fleet, "resume", True)
    assert {NodeState(n, e).read().current.id for n, e in world.engines.items()} == {PACKING.id}


def test_a_revert_returns_to_the_release_the_nodes_served_before_even_unsigned_under_a_required_signature(world):
    """CONTROL was deployed before the deployment file required a signature: a revert to it is admitted by the record
    the nodes keep (they held and served it), so the interrupted deploy can always be undone."""
    deploy(world, CONTROL)
    before = world.snapshot()
    interrupted_deploy(world, PACKING)
    world.fleet.deployment.__dict__["signing"] = Signing(require_signature=True)
    world.advance(world.fleet.deployment.lock_stale_after_s)
    rollout.recover(world.fleet, "revert", True)
    assert world.snapshot() == before
