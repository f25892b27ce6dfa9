"""Phase 1 refuses a deploy to a node that lacks the locked base, or holds another image under its name (other
layers), before anything moves: kvbake ships only the thin layer."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbake.errors import RolloutError

from fake_fleet import CONTROL, World, deploy, make_world


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


@pytest.mark.parametrize("held", ["nothing", "another image"])
def test_a_node_without_the_locked_base_is_refused_by_name_before_anything_moves(world, held):
    engine = world.engines["b"]
    if held == "nothing":
        del engine.tags["base:1"]
    else:
        engine.images["sha256:other"] = {"Id": "sha256:other", "RootFS": {"Layers": ["sha256:other"]}, "Config": {"Labels": {}, "Env": []}}
        engine.tags["base:1"] = "sha256:other"
    before = world.snapshot()
    with pytest.raises(RolloutError) as refused:
        deploy(world, CONTROL)
    assert "node b lacks the base image base:1" in refused.value.message and "node a" not in refused.value.message
    assert "base sync" in refused.value.fix and world.snapshot() == before and world.launches == []
