"""A Ray gang's old nodes stop before the new one starts: an adopted serve is set aside, and every node after it still stops."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbake.ship.adapters import transitions
from kvbake.ship.adapters.adoption import adopt

from fake_fleet import CONTAINER, PACKING, World, make_world, start_serves


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


def test_every_old_node_stops_even_after_an_adopted_one_is_set_aside(world: World) -> None:
    start_serves(world)
    adopted = adopt(world.fleet, "seed serve", False)["a"]
    transitions.stop_old_gang(world.fleet, {"a": adopted, "b": PACKING})
    a, b = world.engines["a"], world.engines["b"]
    assert CONTAINER not in a.containers and not a.containers[adopted.kept_as]["State"]["Running"]
    assert not b.containers[CONTAINER]["State"]["Running"]
