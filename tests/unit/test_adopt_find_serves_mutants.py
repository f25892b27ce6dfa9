"""adopt refuses a container that runs no vLLM serve, naming each node's container as Docker names it (without its
slash, whatever letter it begins with) and its main process: its command line cut at 60 characters, or gone; and nodes
whose own serving containers do not run, naming each container."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kvbake.errors import RolloutError
from kvbake.ship.adapters.adoption import adopt
from kvbake.engines.core.procfs import Process

from fake_fleet import World, make_world

NAME = "Xserve"
LONG = ("python3", "-c", "import time; " + "x = 1; " * 20 + "time.sleep(1e9)")


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


def without_vllm(world: World, node: str, processes: tuple[Process, ...]) -> None:
    engine = world.engines[node]
    engine.run_serving(NAME, "base:1", ["LANG=C"], main=("sleep", "infinity"))
    engine.containers[NAME].update(Name=f"/{NAME}", Processes=processes)
    engine.containers[NAME].pop("Main")


def refusal(world: World) -> str:
    before = world.snapshot()
    with pytest.raises(RolloutError) as refused:
        adopt(world.fleet, "their serve", False, NAME)
    assert world.snapshot() == before and "start vLLM in it" in refused.value.fix
    return refused.value.message


def test_each_container_without_vllm_is_named_with_its_main_process_cut_at_60_characters(world):
    without_vllm(world, "a", (Process(1, 0, ("sleep", "infinity"), {}, "/", "/bin/sleep"),))
    without_vllm(world, "b", (Process(1, 0, LONG, {}, "/", "/usr/bin/python3"),))
    cut = " ".join(LONG)[:60]
    assert len(" ".join(LONG)) > 61
    assert f"no vLLM serve runs in a ({NAME}: its main process is sleep infinity); b ({NAME}: its main process is {cut})" in refusal(world)


def test_a_container_whose_main_process_is_gone_is_named_as_such(world):
    for node in ("a", "b"):
        without_vllm(world, node, (Process(5, 0, ("sleep", "infinity"), {}, "/", "/bin/sleep"),))
    assert f"a ({NAME}: its main process is gone); b ({NAME}: its main process is gone)" in refusal(world)


def test_nodes_without_their_own_serving_container_are_named_with_each_containers_name(world):
    d = world.fleet.deployment
    nodes = tuple(replace(node, container=f"serve-{node.name}") for node in d.nodes)
    world.fleet = replace(world.fleet, deployment=replace(d, nodes=nodes))
    with pytest.raises(RolloutError) as refused:
        adopt(world.fleet, "their serve", False)
    assert "a, b run no serve (no running container serve-a, serve-b)" in refused.value.message
