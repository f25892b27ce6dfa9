"""adopt of a `--rm` serve: adopted when kvbake can recreate it from its spec, refused before any change (naming the
node and the settings) when it sets what a recreated container could not be given; a kept container may set them. The
serve's name is recorded without the slash Docker puts before it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbake.errors import RolloutError
from kvbake.ship.adapters.adoption import adopt

from fake_fleet import CONTAINER, World, make_world, start_serves

UNRESTORABLE = {"Links": ["/db:/app/db"], "CpuQuota": 50000}


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


def test_a_rm_serve_that_sets_what_kvbake_cannot_recreate_is_refused_naming_the_node_and_the_settings(world):
    start_serves(world, auto_remove=True)
    world.engines["b"].containers[CONTAINER]["HostConfig"].update(UNRESTORABLE)
    before = world.snapshot()
    with pytest.raises(RolloutError) as refused:
        adopt(world.fleet, "their serve", False)
    assert "b's serve runs with --rm" in refused.value.message and "Links, CpuQuota" in refused.value.message
    assert "a's" not in refused.value.message and "without --rm" in refused.value.fix
    assert world.snapshot() == before


def test_a_rm_serve_kvbake_can_recreate_is_adopted(world):
    start_serves(world, auto_remove=True)
    adopted = adopt(world.fleet, "their serve", False)
    assert {release.adopted["spec"]["host"].get("AutoRemove") for release in adopted.values()} == {True}


def test_a_kept_serve_with_settings_a_recreated_container_could_not_be_given_is_adopted(world):
    start_serves(world)
    for engine in world.engines.values():
        engine.containers[CONTAINER]["HostConfig"].update(UNRESTORABLE)
    assert set(adopt(world.fleet, "their serve", False)) == {"a", "b"}


def test_the_serves_name_is_recorded_without_dockers_leading_slash(world):
    start_serves(world)
    for engine in world.engines.values():
        engine.containers[CONTAINER]["Name"] = f"/{CONTAINER}"
    adopted = adopt(world.fleet, "their serve", False)
    assert {(r.adopted["name"], r.kept_as) for r in adopted.values()} == {(CONTAINER, f"{CONTAINER}-kvbake-adopted")}
