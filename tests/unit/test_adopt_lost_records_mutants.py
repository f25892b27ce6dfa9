"""adopt on nodes whose records were lost (the state container removed by hand) while their `current` and `previous`
tags stayed: adopt keeps the `previous` tag, and a killed adopt undone by `adopt --revert` gives both tags back."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbake.ship.adapters import rollout
from kvbake.ship.adapters.adoption import adopt
from kvbake.ship.adapters.nodestate import STATE_NAME

from fake_fleet import CONTROL, PACKING, REPO, World, deploy, killed_adopt, make_world, start_serves


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    deploy(w := make_world(tmp_path, monkeypatch), CONTROL)
    deploy(w, PACKING)
    for engine in w.engines.values():
        engine.remove_container(STATE_NAME)
    start_serves(w)
    return w


def tags(world: World) -> dict[str, tuple[str | None, str | None]]:
    return {name: (engine.image_id_of(f"{REPO}:current"), engine.image_id_of(f"{REPO}:previous")) for name, engine in world.engines.items()}


def test_adopting_keeps_the_previous_tag_of_nodes_without_records(world):
    before = tags(world)
    adopted = adopt(world.fleet, "their serve", False)
    assert tags(world) == {name: (release.adopted["image_id"], before[name][1]) for name, release in adopted.items()}


def test_a_killed_adopt_undone_gives_the_nodes_their_tags_back(world):
    before = tags(world)
    killed_adopt(world, 3)  # after its last journal write: the first node was retagged, the second was not
    assert tags(world) != before
    world.advance(world.fleet.deployment.lock_stale_after_s + 1)
    rollout.recover(world.fleet, "revert", True, command="adopt")
    assert tags(world) == before and all(current and previous for current, previous in before.values())
