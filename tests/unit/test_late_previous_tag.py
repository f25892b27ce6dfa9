"""A `previous` tag that a host whose lock was broken moved late, onto a node whose records name no previous release:
it is never taken for a rollback target; rollback and deploy refuse it, naming it, until `deploy --reset-tags` removes
it; then the next release makes the old current the previous on every node."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbake.errors import RolloutError
from kvbake.ship.adapters import rollout
from kvbake.ship.adapters.tag_reset import reset_tags

from fake_fleet import CONTROL, PACKING, REPO, World, deploy, make_world

NAMED = "node a: tag previous points at"


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    """Both nodes deployed CONTROL once (no previous release); node a then got a stray `previous` tag."""
    deploy(w := make_world(tmp_path, monkeypatch), CONTROL)
    engine = w.engines["a"]
    engine.tag(engine.image_id_of(f"{REPO}:current"), f"{REPO}:previous")
    return w


def previous_tags(world: World) -> dict[str, str | None]:
    return {name: engine.image_id_of(f"{REPO}:previous") for name, engine in world.engines.items()}


def test_the_stray_tag_is_no_rollback_target(world):
    with pytest.raises(RolloutError, match=f"{NAMED} .*, but its records name no previous release"):
        rollout.rollback(world.fleet, False)
    assert previous_tags(world)["a"] is not None, "a refused rollback changes nothing"


def test_deploying_the_current_release_again_is_refused_until_the_reset_removes_the_stray_tag(world):
    with pytest.raises(RolloutError, match=NAMED):
        deploy(world, CONTROL)
    assert previous_tags(world)["a"] is not None, "a refused deploy changes nothing"
    assert [(r.stray.node, r.stray.kind, r.target) for r in reset_tags(world.fleet, False)] == [("a", "previous", None)]
    assert previous_tags(world) == {"a": None, "b": None}
    deploy(world, CONTROL)
    assert previous_tags(world) == {"a": None, "b": None}


def test_the_next_release_makes_the_old_current_the_previous_on_every_node(world):
    current = {name: engine.image_id_of(f"{REPO}:current") for name, engine in world.engines.items()}
    reset_tags(world.fleet, False)
    deploy(world, PACKING)
    assert previous_tags(world) == current
