"""Phase 1's pulled image against the release: every difference named in order (the config digest, the layers, the
first three differing labels, each runtime-config field), an engine that does not hold the image after its pull, and
on the containerd store the identity read from the release's own repository. Also a node that cannot stage the image,
a signature the deployment file requires without its keys, each node's audit line of a deploy, and `--reseat` of nodes
whose store did not change."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbake.deployfile import Signing
from kvbake.errors import EngineError, RolloutError, SignatureError
from kvbake.ship.adapters import rollout
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.adapters.rollout import pulled_differences
from kvbake.ship.core.store_changes import check_store_changes

from fake_fleet import BASE, CONTROL, PACKING, REPO, World, deploy, make_world

OTHER_CONFIG = "sha256:" + "f" * 64


def test_every_difference_of_a_pulled_image_is_named_in_order():
    pulled = {"RootFS": {"Layers": ["sha256:x"]},
              "Config": {"Labels": {"a": "1", "b": "2", "c": "3", "d": "4"}, "Env": ["A=1"], "Cmd": ["serve"]}}
    assert pulled_differences(CONTROL, pulled, OTHER_CONFIG) == [
        f"config {OTHER_CONFIG[:19]}, not the lock's {CONTROL.config_digest[:19]}", "other layers", "other labels: a, b, c", "other Env, Cmd"]
    assert pulled_differences(CONTROL, None, None) == ["the engine does not hold it after the pull"]


def test_an_engine_that_does_not_hold_the_image_after_its_pull_is_refused_by_node(tmp_path, monkeypatch):
    world = make_world(tmp_path, monkeypatch)
    monkeypatch.setattr(world.engines["b"], "pull", lambda reference: None)
    before = world.snapshot()
    with pytest.raises(RolloutError) as refused:
        deploy(world, CONTROL)
    assert f"node b: {CONTROL.image} is not the release's image (the engine does not hold it after the pull)" in refused.value.message
    assert world.snapshot() == before


def test_on_the_containerd_store_the_pulled_identity_is_read_from_the_releases_repository(tmp_path, monkeypatch):
    world: World = make_world(tmp_path, monkeypatch, "containerd")
    deploy(world, CONTROL)
    for engine in world.engines.values():
        engine.identified.clear()
    deploy(world, PACKING)
    for engine in world.engines.values():
        pulled = engine.inspect_image(PACKING.image)["Id"]
        assert f"{REPO}@{pulled}" in engine.identified and not [r for r in engine.identified if not r.startswith(REPO + "@")]


def test_reseating_nodes_whose_store_did_not_change_is_refused_naming_them():
    with pytest.raises(RolloutError) as refused:
        check_store_changes({}, {"b", "a"})
    assert refused.value.message.startswith("--reseat a, b: ") and "drop the option" in refused.value.fix



def test_a_pulled_image_that_differs_in_several_ways_is_refused_naming_each(tmp_path, monkeypatch):
    world = make_world(tmp_path, monkeypatch)
    forged = world.engines["b"].registry[CONTROL.image]
    forged["RootFS"]["Layers"] = ["sha256:forged"]
    forged["Config"]["Labels"] = {"k": "forged"}
    with pytest.raises(RolloutError) as refused:
        deploy(world, CONTROL)
    assert refused.value.message.endswith("is not the release's image (other layers; other labels: k)")


def test_a_node_that_cannot_stage_the_pulled_image_is_refused_by_name_before_any_lock(tmp_path, monkeypatch):
    world = make_world(tmp_path, monkeypatch)

    def refuse(image_id, reference):
        raise EngineError("b: tag failed (disk full)", "free space")

    monkeypatch.setattr(world.engines["b"], "tag", refuse)
    with pytest.raises(RolloutError) as refused:
        deploy(world, CONTROL)
    assert "node b: staging failed (b: tag failed (disk full))" in refused.value.message
    assert "nothing serving was changed" in refused.value.fix
    assert world.snapshot()["nodes"]["a"]["lock"] is False and world.launches == []


def test_a_deploy_the_deployment_file_requires_signed_without_keys_names_that_file(tmp_path, monkeypatch):
    world = make_world(tmp_path, monkeypatch)
    world.fleet.deployment.__dict__["signing"] = Signing(require_signature=True)
    with pytest.raises(SignatureError) as refused:
        deploy(world, CONTROL)
    assert refused.value.message.startswith(f"{world.fleet.deployment.path.name}: signing.require_signature is true")
    assert world.engines["a"].image_id_of(f"{REPO}:staged") is None


def test_a_deploy_notes_in_each_nodes_audit_what_it_deploys_and_its_signature(tmp_path, monkeypatch):
    world = make_world(tmp_path, monkeypatch)
    journal = rollout.deploy(world.fleet, CONTROL, "base:1", BASE, False)
    for name, engine in world.engines.items():
        lines = [line.split(" ", 2)[2] for line in NodeState(name, engine).read().audit.splitlines()]
        assert f"deploy {journal.id} begins: {CONTROL.image} (signature not required by the deployment file)" in lines

