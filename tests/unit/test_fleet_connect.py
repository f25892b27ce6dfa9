"""The fleet a ship command works on: one engine per node of the deployment (an unreachable node stops it, named), the
release repository, the manifest's switch names and the lock's baked files as absolute paths in the image."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from fake_engine import FakeEngine
from kvbake.bake.core.provenance import switch_names
from kvbake.deployfile import Deployment, Launcher, Node
from kvbake.errors import RolloutError
from kvbake.lock import read_lock
from kvbake.manifest import load_manifest
from kvbake.ship.adapters import fleet as fleet_module

STANDIN = Path(__file__).resolve().parents[2] / "examples" / "standin" / "manifest.yaml"


@pytest.fixture
def nodes(tmp_path, monkeypatch):
    engines = {"unix:///a": FakeEngine("a"), "unix:///b": FakeEngine("b")}
    monkeypatch.setattr(fleet_module, "Engine", lambda host: engines[host])
    deployment = Deployment(tmp_path / "deploy.yaml", (Node("a", "unix:///a", "head"), Node("b", "unix:///b", "worker")),
                            Launcher(("launch",), "vllm-serve", 60), 900)
    return engines, deployment


def test_the_fleet_has_each_nodes_engine_and_what_every_rank_must_hold(nodes):
    engines, deployment = nodes
    manifest = load_manifest(STANDIN)
    lock = read_lock(manifest)
    fleet = fleet_module.make_fleet(deployment, manifest, lock)
    assert fleet.deployment is deployment
    assert fleet.engines == {"a": engines["unix:///a"], "b": engines["unix:///b"]}
    assert fleet.repository == manifest.output.repository and fleet.tag("current") == f"{manifest.output.repository}:current"
    assert fleet.switch_names == tuple(switch_names(manifest)) and fleet.switch_names
    assert fleet.source_root == lock.source_root
    assert fleet.baked_paths == tuple(f"{lock.source_root}/{f.path}" for f in lock.files) and fleet.baked_paths
    assert all(path.startswith("/") and "//" not in path for path in fleet.baked_paths)


def test_an_unreachable_node_stops_the_command_naming_the_node(nodes):
    engines, deployment = nodes
    engines["unix:///b"].down = True
    with pytest.raises(RolloutError) as failure:
        fleet_module.connect(deployment)
    assert failure.value.message.startswith("node b: ") and "unreachable" in failure.value.message
    assert "bring the node's engine back" in failure.value.fix and "nothing was changed" in failure.value.fix


def serving_names(deployment: Deployment) -> tuple[str, str, str, str]:
    """The serving container's name for no release, a baked release, an adopted serve recorded by name, and one an
    earlier kvbake recorded without a name."""
    fleet = fleet_module.make_fleet(deployment, load_manifest(STANDIN), read_lock(load_manifest(STANDIN)))
    baked = SimpleNamespace(adopted=None)
    named, unnamed = SimpleNamespace(adopted={"name": "eugr-serve", "kept_as": "k"}), SimpleNamespace(adopted={"kept_as": "k"})
    return (fleet.serving_container_name(), fleet.serving_container_name(baked), fleet.serving_container_name(named),
            fleet.serving_container_name(unnamed))


def test_a_release_is_served_by_the_launchers_container_unless_it_is_an_adopted_serve_with_a_name_of_its_own(nodes):
    _, deployment = nodes
    assert serving_names(deployment) == ("vllm-serve", "vllm-serve", "eugr-serve", "vllm-serve")
