"""Bringing the adopted serve back: one that still runs restarts with its gang (its vLLM exec'd once again), found by
ID, spec (whatever its restart policy now) or Docker's slash-prefixed name; refused, naming the node, when its name is
taken or its container does not start."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kvbake.errors import RolloutError
from kvbake.ship.adapters import adopted_serve
from kvbake.ship.adapters.adoption import adopt
from kvbake.ship.core.release import Release

from fake_fleet import CONTAINER, CONTROL, World, deploy, make_world, nameless_adopted_record, start_serves
from message_words import says


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


def serving(world: World) -> tuple:
    found = world.engines["a"].containers[CONTAINER]
    return (found["Id"], found["State"]["Running"], (found.get("HostConfig") or {}).get("RestartPolicy"),
            tuple((p.pid, p.argv) for p in found.get("Processes", ())))


@pytest.mark.parametrize("shown_as", [CONTAINER, "/" + CONTAINER], ids=["plain", "docker's leading slash"])
def test_an_adopted_exec_serve_that_still_runs_restarts_with_its_gang_and_its_vllm_is_executed_once_again(world, shown_as):
    start_serves(world, "exec")
    policy = serving(world)[2]
    adopted = adopt(world.fleet, "seed serve", False)["a"]
    world.engines["a"].containers[CONTAINER]["Name"] = shown_as
    container, running, held, processes = serving(world)
    assert held["Name"] == "no" != policy["Name"], "adopt turned its restart policy off"
    execs = len(world.engines["a"].execs)
    adopted_serve.bring_back(world.engines["a"], "a", adopted, CONTAINER, CONTAINER)
    assert serving(world)[:3] == (container, running, policy), "the same container, running, its restart policy back"
    assert [argv for _, argv in serving(world)[3]] == [argv for _, argv in processes], "its vLLM runs once, not twice"
    assert [pid for pid, _ in serving(world)[3]] != [pid for pid, _ in processes], "stopped and started afresh"
    assert len(world.engines["a"].execs) == execs + 1


def test_a_serve_recreated_from_a_nameless_record_under_the_launchers_name_is_found_by_its_spec_and_restarted_in_place(world):
    start_serves(world)
    engine = world.engines["a"]
    recorded = nameless_adopted_record(engine)
    container, running, policy, processes = serving(world)
    adopted_serve.bring_back(engine, "a", recorded, CONTAINER, CONTAINER)
    assert serving(world) == (container, running, policy, processes), "the same container (not recreated), its policy back"
    assert set(engine.containers) == {CONTAINER}, "nothing is left under the kept name"


def test_a_running_rm_serve_recorded_without_a_spec_stays_as_it_runs(world):
    start_serves(world, auto_remove=True)
    engine = world.engines["a"]
    recorded = nameless_adopted_record(engine)
    recorded = dataclasses.replace(recorded, adopted={**recorded.adopted, "spec": None, "container_id": engine.containers[CONTAINER]["Id"]})
    before = serving(world)
    adopted_serve.bring_back(engine, "a", recorded, CONTAINER, CONTAINER)
    assert serving(world) == before, "stopping it would lose it: nothing could recreate it"


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


KEPT = f"{CONTAINER}-kvbake-adopted"


def set_aside_by_a_deploy(world: World) -> Release:
    """Node a's adopted exec serve, set aside under its kept name by a deploy; its record."""
    start_serves(world, "exec")
    adopted = adopt(world.fleet, "seed serve", False)["a"]
    deploy(world, CONTROL)
    assert KEPT in world.engines["a"].containers
    return adopted


@pytest.mark.parametrize("name", [CONTAINER, "Xavier"])
def test_a_stopped_adopted_serve_under_dockers_slash_name_is_started_where_it_is(world, name):
    world.fleet.deployment.__dict__["nodes"] = tuple(dataclasses.replace(n, container=name) for n in world.fleet.deployment.nodes)
    start_serves(world, "exec", names={"a": name, "b": name})
    adopted = adopt(world.fleet, "seed serve", False)["a"]
    engine = world.engines["a"]
    engine.stop(name)  # set aside half-way: stopped under its own name
    engine.containers[name]["Name"] = "/" + name
    adopted_serve.bring_back(engine, "a", adopted, name, name)
    assert engine.containers[name]["State"]["Running"] and engine.containers[name]["Name"] == "/" + name


def test_an_adopted_serve_whose_name_another_container_holds_is_refused_naming_it(world):
    adopted = set_aside_by_a_deploy(world)
    with pytest.raises(RolloutError) as refused:
        adopted_serve.bring_back(world.engines["a"], "a", adopted, CONTAINER, "another-launchers-serve")
    assert says(refused.value.message, f"node a: the adopted serve cannot take its name {CONTAINER} back")
    assert says(refused.value.fix, f"remove that container {CONTAINER}, then roll back again")


def test_an_adopted_exec_serve_whose_container_does_not_start_is_refused_naming_the_node(world, monkeypatch):
    adopted = set_aside_by_a_deploy(world)
    engine = world.engines["a"]
    monkeypatch.setattr(adopted_serve, "START_WAIT_S", 0.0)
    monkeypatch.setattr(engine, "start", lambda name: None)  # the container exits at once
    with pytest.raises(RolloutError) as refused:
        adopted_serve.bring_back(engine, "a", adopted, CONTAINER, CONTAINER)
    assert says(refused.value.message, f"node a: the adopted container {CONTAINER} did not start within 0 s")
