"""rollback --to adopted on a deployment of a single node: its journal names that node's adopted serve and it serves again."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbake.deployfile import Deployment, Launcher, Node
from kvbake.ship.adapters.adoption import adopt, rollback_to_adopted
from kvbake.ship.adapters.fleet import Fleet
from kvbake.ship.adapters.nodestate import NodeState

from fake_fleet import CONTAINER, CONTROL, LAUNCHER, REPO, SOURCE_ROOT, SWITCH, World, deploy, make_world, start_serves


@pytest.fixture()
def single_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    """The fake world cut down to its node a."""
    world = make_world(tmp_path, monkeypatch)
    engines = {"a": world.engines["a"]}
    deployment = Deployment(tmp_path / "deploy.yaml", (Node("a", "unix:///a", "head"),), Launcher(LAUNCHER, CONTAINER, 10), 900)
    world.engines = engines
    world.fleet = Fleet(deployment, engines, REPO, (SWITCH,), (f"{SOURCE_ROOT}/x.py",), SOURCE_ROOT)
    return world


def test_rollback_to_adopted_on_a_single_node_names_its_adopted_serve_and_brings_it_back(single_node):
    ids = start_serves(single_node)
    adopt(single_node.fleet, "seed serve", False)
    deploy(single_node, CONTROL)
    journal = rollback_to_adopted(single_node.fleet, False)
    records = NodeState("a", single_node.engines["a"]).read()
    assert journal.kind == "rollback" and journal.release_id == records.adopted.id
    assert [plan.node for plan in journal.nodes] == ["a"]
    assert single_node.engines["a"].containers[CONTAINER]["Id"] == ids["a"]
    assert records.current.id == records.adopted.id
