"""A code-selecting variable the release's image sets in its own Env is the image's own: a rank that runs with it
passes, and one that runs with another value does not."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kvbake.ship.core.release import runtime_config

from fake_fleet import CONTAINER, CONTROL, World, deploy, make_world


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


def test_a_pythonpath_the_image_sets_itself_passes_and_another_is_named(world):
    own = replace(CONTROL, image_config=runtime_config({"Env": ["PYTHONPATH=/opt/app"]}))
    world.offer(own)
    deploy(world, own)
    engine = world.engines["a"]
    image = engine.containers[CONTAINER]["Image"]
    engine.run_serving(CONTAINER, image, ["PYTHONPATH=/opt/app"])  # Docker gives the process its image's Env
    assert world.fleet.check_rank("a", own).failures == ()
    engine.run_serving(CONTAINER, image, ["PYTHONPATH=/opt/shadow"])
    assert any("PYTHONPATH" in failure and "/opt/shadow" in failure for failure in world.fleet.check_rank("a", own).failures)
