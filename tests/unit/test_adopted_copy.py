"""The adopted serve's copy on fake nodes: adopt commits each serve's writable layer; a --rm serve comes back from it with
its mods on every way back and verifies; an adopt that cannot commit, or is undone, leaves no copy; adopt --release
and hand-back remove it; a copy gone from its node is named, not silently replaced by the bare image."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbake.errors import EngineError, RolloutError
from kvbake.ship.adapters import adoption, status
from kvbake.ship.adapters.adoption import adopt, release_adoption, rollback_to_adopted
from kvbake.ship.adapters.hand_back import hand_back
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.adapters.transitions import revert
from kvbake.ship.core.adopted_copy import (as_recorded, compared_layers, copy_record, copy_reference, image_to_recreate, runs_the_copy,
                                           stray_copies)

from fake_fleet import CONTAINER, CONTROL, PACKING, World, deploy, make_world, start_serves
from message_words import says

MOD = "/src/vllm/version.py"  # a file a launcher's mod patched inside the running container
MODDED = b"__version__ = 'modded'\n"


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


def modded_rm_serves(world: World, shape: str = "exec") -> None:
    """Each node serves by hand with --rm, and a mod has patched a vLLM file in its writable layer."""
    start_serves(world, shape, auto_remove=True)
    for engine in world.engines.values():
        engine.files.setdefault(CONTAINER, {})[MOD] = MODDED


def copies(world: World) -> dict[str, list[str]]:
    return {node: engine.tags_of_repository("kvbake-adopted") for node, engine in world.engines.items()}


def test_the_copy_record_is_the_base_plus_exactly_one_layer():
    image = {"Id": "sha256:c", "RootFS": {"Layers": ["sha256:l1", "sha256:l2", "sha256:top"]}}
    assert copy_record("kvbake-adopted:abc", image, ["sha256:l1", "sha256:l2"]) == {
        "reference": "kvbake-adopted:abc", "image_id": "sha256:c", "layer": "sha256:top"}
    with pytest.raises(ValueError):
        copy_record("kvbake-adopted:abc", image, ["sha256:l1"])  # two layers more than the base
    with pytest.raises(ValueError):
        copy_record("kvbake-adopted:abc", image, ["sha256:other", "sha256:l2"])  # another base underneath
    assert copy_reference("0123456789abcdef0123") == "kvbake-adopted:0123456789ab"


def test_a_container_runs_the_copy_only_on_its_image_with_the_base_plus_its_layer():
    info = {"copy": {"reference": "kvbake-adopted:x", "image_id": "sha256:c", "layer": "sha256:top"}, "spec": {"image": "sha256:base"}}
    good = {"RootFS": {"Layers": ["sha256:l1", "sha256:top"]}}
    assert runs_the_copy({"Image": "sha256:c"}, good, info, ["sha256:l1"])
    assert not runs_the_copy({"Image": "sha256:base"}, good, info, ["sha256:l1"])
    assert not runs_the_copy({"Image": "sha256:c"}, {"RootFS": {"Layers": ["sha256:l1", "sha256:else"]}}, info, ["sha256:l1"])
    assert not runs_the_copy({"Image": "sha256:c"}, good, {"spec": {"image": "sha256:base"}}, ["sha256:l1"])
    assert compared_layers({"Image": "sha256:c"}, good, info, ["sha256:l1"]) == ("sha256:l1",)
    assert compared_layers({"Image": "sha256:base"}, good, info, ["sha256:l1"]) == ("sha256:l1", "sha256:top")
    assert image_to_recreate(info) == "sha256:c" and image_to_recreate({"spec": {"image": "sha256:base"}}) == "sha256:base"
    assert as_recorded({"image": "sha256:c", "config": {}}, info) == {"image": "sha256:base", "config": {}}
    assert as_recorded({"image": "sha256:other"}, info) == {"image": "sha256:other"}
    assert stray_copies(["kvbake-adopted:a", "kvbake-adopted:b"], {"kvbake-adopted:b"}) == ["kvbake-adopted:a"]


@pytest.mark.parametrize("shape", ["main", "exec"])
def test_a_rm_serve_comes_back_from_its_copy_with_its_mod_and_verifies(world, shape):
    modded_rm_serves(world, shape)
    releases = adopt(world.fleet, "the operator's serve", False)
    for node, release in releases.items():
        copy = release.adopted["copy"]
        assert copy["reference"] == copy_reference(release.adopted["container_id"])
        assert world.engines[node].image_files[copy["image_id"]][MOD] == MODDED, "the copy holds the mod"
    deploy(world, CONTROL)
    assert all(CONTAINER not in engine.files or MOD not in engine.files[CONTAINER] for engine in world.engines.values())
    rollback_to_adopted(world.fleet, False)
    for node, engine in world.engines.items():
        serve = engine.containers[CONTAINER]
        assert serve["Id"] != releases[node].adopted["container_id"], "a --rm serve is gone once set aside: created again"
        assert serve["Image"] == releases[node].adopted["copy"]["image_id"]
        assert engine.files[CONTAINER][MOD] == MODDED, "the mod is back"
    assert [r.node for r in status.verify_running(world.fleet, None)] == ["a", "b"]  # raises on any failure


def test_the_revert_of_a_failed_first_deploy_brings_the_mod_back(world):
    modded_rm_serves(world)
    adopt(world.fleet, "the operator's serve", False)
    world.failing_launch.add(f"b:{PACKING.preset}")
    with pytest.raises(RolloutError):
        deploy(world, PACKING)
    for engine in world.engines.values():
        assert engine.files[CONTAINER][MOD] == MODDED
    assert [r.node for r in status.verify_running(world.fleet, None)] == ["a", "b"]


def test_an_adopt_that_cannot_commit_leaves_no_copy_and_no_record(world, monkeypatch):
    modded_rm_serves(world)
    engine_b = world.engines["b"]

    def full_disk(container: str, reference: str) -> str:
        raise EngineError("b: commit failed (no space left on device)", "check the engine")

    monkeypatch.setattr(engine_b, "commit", full_disk)
    with pytest.raises(RolloutError) as raised:
        adopt(world.fleet, "the operator's serve", False)
    line = raised.value.one_line()
    assert all(says(line, phrase) for phrase in ("writable layer of b's serve", "no space left", "nothing was changed")), line
    assert copies(world) == {"a": [], "b": []}
    assert all(NodeState(node, engine).read().current is None for node, engine in world.engines.items())


def test_an_undone_adopt_leaves_no_copy(world, monkeypatch):
    modded_rm_serves(world)
    real = adoption.run_transition

    def transition_then_revert(fleet, journal, folder, guard):
        monkeypatch.setattr(adoption, "run_transition", real)
        revert(fleet, journal, folder, guard=guard)
        raise RolloutError("adopt was undone", "retry")

    monkeypatch.setattr(adoption, "run_transition", transition_then_revert)
    with pytest.raises(RolloutError):
        adopt(world.fleet, "the operator's serve", False)
    assert copies(world) == {"a": [], "b": []}


def test_adopt_release_and_hand_back_remove_the_copy(world):
    modded_rm_serves(world, "main")
    adopt(world.fleet, "the operator's serve", False)
    assert all(len(found) == 1 for found in copies(world).values())
    deploy(world, CONTROL)
    release_adoption(world.fleet, False)
    assert copies(world) == {"a": [], "b": []}


def test_hand_back_removes_the_copy_the_serve_runs_from(world):
    modded_rm_serves(world, "main")
    adopt(world.fleet, "the operator's serve", False)
    deploy(world, CONTROL)
    rollback_to_adopted(world.fleet, False)
    handed = hand_back(world.fleet, False)
    assert copies(world) == {"a": [], "b": []}
    assert all(any(name.startswith("kvbake-adopted:") for name in h.removed) for h in handed)
    assert all(engine.containers[CONTAINER]["State"]["Running"] for engine in world.engines.values()), "the serve goes on"


def test_a_copy_gone_from_its_node_is_named_not_replaced_by_the_bare_image(world):
    modded_rm_serves(world)
    releases = adopt(world.fleet, "the operator's serve", False)
    deploy(world, CONTROL)
    world.engines["b"].tags.pop(releases["b"].adopted["copy"]["reference"])
    world.engines["b"].images.pop(releases["b"].adopted["copy"]["image_id"])
    with pytest.raises(RolloutError) as raised:
        rollback_to_adopted(world.fleet, False)
    assert says(raised.value.one_line(), "node b: the adopted serve's copy"), raised.value.one_line()
