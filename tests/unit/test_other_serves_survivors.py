"""Serves beside kvbake's, read on a node: a container whose processes cannot be read does not hide the next one, an
adopted serve that an earlier kvbake recorded without its name is found under the launcher's name, and a refusal names
every other serve and says how to go on."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kvbake.errors import RolloutError
from kvbake.ship.adapters.adoption import adopt
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.adapters.other_serves import known_serves, refuse_other_serves, serving_containers

from fake_fleet import CONTROL, World, deploy, make_world
from test_other_serves import without_python3


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


def test_a_container_whose_processes_cannot_be_read_does_not_hide_the_serves_after_it(world, monkeypatch):
    engine = world.engines["a"]
    engine.run_serving("aaa-no-python", "base:1", [], ("--max-model-len", "4096"))
    engine.run_serving("zzz-serve", "base:1", [], ("--max-model-len", "4096"))
    without_python3(engine, "aaa-no-python", monkeypatch)
    assert set(serving_containers(engine).values()) == {"aaa-no-python", "zzz-serve"}


def test_an_adopted_serve_recorded_without_its_name_is_found_under_the_launchers_name(world):
    for node in ("a", "b"):
        world.engines[node].run_serving("serve", "base:1", [], ("--max-model-len", "4096"))
    adopt(world.fleet, "adopt", False)
    engine = world.engines["a"]
    records = NodeState("a", engine).read()
    older = replace(records.current, adopted={key: value for key, value in records.current.adopted.items() if key != "name"})
    engine.remove_container("serve")  # recreated with the same create spec: another ID, the launcher's name
    engine.run_serving("serve", "base:1", [], ("--max-model-len", "4096"))
    recreated = str(engine.container_inspect("serve")["Id"])
    assert recreated != records.current.adopted["container_id"]
    assert world.fleet.deployment.launcher.container == "serve"
    assert recreated in known_serves(world.fleet, "a", replace(records, current=older, adopted=None, previous=None))


def test_a_refusal_names_every_other_serve_and_gives_a_fix(world):
    deploy(world, CONTROL)
    for name in ("old-1", "old-2"):
        world.engines["b"].run_serving(name, "base:1", [], ("--max-model-len", "4096"))
    records = {node: NodeState(node, world.engines[node]).read() for node in ("a", "b")}
    with pytest.raises(RolloutError) as refused:
        refuse_other_serves(world.fleet, records)
    assert refused.value.message.startswith("node b runs another vLLM serve in old-1, old-2 (")
    assert refused.value.fix and "stop that container" in refused.value.fix
