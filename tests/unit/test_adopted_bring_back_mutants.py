"""Bringing the adopted serve back when it already runs: nothing is started or executed again, found by ID or by spec."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kvbake.ship.adapters import adopted_serve
from kvbake.ship.adapters.adoption import adopt
from kvbake.ship.core.create_spec import create_spec
from kvbake.ship.core.release import Release

from fake_fleet import CONTAINER, World, make_world, start_serves


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


def serving(world: World) -> tuple:
    found = world.engines["a"].containers[CONTAINER]
    return found["Id"], found["State"]["Running"], tuple(p.argv for p in found.get("Processes", ()))


@pytest.mark.parametrize("shown_as", [CONTAINER, "/" + CONTAINER], ids=["plain", "docker's leading slash"])
def test_an_adopted_exec_serve_that_already_runs_under_its_name_is_not_executed_again(world, shown_as):
    start_serves(world, "exec")
    adopted = adopt(world.fleet, "seed serve", False)["a"]
    world.engines["a"].containers[CONTAINER]["Name"] = shown_as
    before = serving(world)
    adopted_serve.bring_back(world.engines["a"], "a", adopted, CONTAINER, CONTAINER)
    assert serving(world) == before


def test_a_serve_recreated_from_a_nameless_record_under_the_launchers_name_is_found_by_its_spec_and_left_running(world):
    start_serves(world)
    engine = world.engines["a"]
    recorded = Release(image="base:1", config_digest="sha256:c", layers=(), labels={}, preset="adopted", switches={},
                       max_model_len=4096, launcher_args=(), deployed_by="t", deployed_at="now", reason="adopt", override=None,
                       adopted={"container_id": "an-id-now-gone", "kept_as": "kept_serve", "spec": create_spec(engine.containers[CONTAINER])})
    before = serving(world)
    adopted_serve.bring_back(engine, "a", recorded, CONTAINER, CONTAINER)
    assert serving(world) == before


def test_a_serve_whose_name_begins_with_an_x_is_still_known_by_its_name(world):
    names = {"a": "Xavier", "b": "Xavier"}
    world.fleet.deployment.__dict__["nodes"] = tuple(dataclasses.replace(n, container=names[n.name]) for n in world.fleet.deployment.nodes)
    start_serves(world, "exec", names=names)
    adopted = adopt(world.fleet, "seed serve", False)["a"]
    engine = world.engines["a"]
    engine.containers["Xavier"]["Name"] = "/Xavier"
    before = tuple(p.argv for p in engine.containers["Xavier"]["Processes"])
    adopted_serve.bring_back(engine, "a", adopted, "Xavier", "Xavier")
    assert tuple(p.argv for p in engine.containers["Xavier"]["Processes"]) == before
