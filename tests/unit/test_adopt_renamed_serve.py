"""adopt after a launcher named its serve anew (run_cluster.sh's `node-<random>` on every start): the container the
deployment file names is gone, so adopt takes the node's one running serve, found by its processes as init finds it;
two candidates, or none, are refused naming the container the file names."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kvbake.errors import RolloutError
from kvbake.ship.adapters.adoption import adopt

from fake_fleet import World, make_world, start_serves
from message_words import says


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    w = make_world(tmp_path, monkeypatch)
    nodes = tuple(dataclasses.replace(node, container=f"node-{n}") for n, node in zip((11, 12), w.fleet.deployment.nodes))
    w.fleet = dataclasses.replace(w.fleet, deployment=dataclasses.replace(w.fleet.deployment, nodes=nodes))
    return w


def test_a_serve_started_again_under_a_new_name_is_found_by_its_processes(world):
    start_serves(world, names={"a": "node-21", "b": "node-22"})
    releases = adopt(world.fleet, "the launcher's new run", False)
    assert {node: r.adopted["name"] for node, r in releases.items()} == {"a": "node-21", "b": "node-22"}


def test_the_named_container_wins_while_it_runs(world):
    start_serves(world, names={"a": "node-11", "b": "node-22"})
    releases = adopt(world.fleet, "one kept its name", False)
    assert {node: r.adopted["name"] for node, r in releases.items()} == {"a": "node-11", "b": "node-22"}


def test_two_serving_containers_are_refused_naming_the_one_the_file_names(world):
    start_serves(world, names={"a": "node-21", "b": "node-22"})
    start_serves(world, names={"a": "node-31", "b": "node-32"})
    with pytest.raises(RolloutError) as refused:
        adopt(world.fleet, "which one?", False)
    assert says(refused.value.message, "no running container node-11, node-12")
    assert all("kvbake-state" not in engine.containers for engine in world.engines.values()), "nothing was changed"
