"""A Ray cluster restarts as a gang: every old Ray node stops before the first new one starts (on deploy, rollback and
a revert), so that no new node joins the old head's cluster; init starts a Ray head first."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kvbake.deployfile import Launcher
from kvbake.errors import RolloutError
from kvbake.ship.adapters import rollout

from kvbake.engines.core.procfs import Process

from fake_fleet import CONTAINER, CONTROL, PACKING, World, deploy, make_world


@pytest.fixture()
def ray_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    """Two nodes whose launcher starts the ray shape, head first; every stop and launch is logged in order."""
    world = make_world(tmp_path, monkeypatch)
    d = world.fleet.deployment
    launcher = Launcher(d.launcher.command, d.launcher.container, d.launcher.timeout_s, {"SHAPE": "ray"})
    world.fleet = dataclasses.replace(world.fleet, deployment=dataclasses.replace(d, launcher=launcher, start="in-order"))
    world.events = []
    for name, engine in world.engines.items():
        real_stop = engine.stop

        def stop(container, timeout_s=30, real_stop=real_stop, name=name):
            world.events.append(f"stop {name}")
            real_stop(container, timeout_s)
        monkeypatch.setattr(engine, "stop", stop)
    real_launch = world.launch

    def launch(env):
        world.events.append(f"start {env['KVBAKE_NODE']}")
        done = real_launch(env)
        container = world.engines[env["KVBAKE_NODE"]].containers.get(CONTAINER)
        if done.returncode == 0 and container is not None:  # the ray shape: a Ray node; the head's vLLM exec'd beside it
            serve = container["Processes"][0]
            ray = Process(1, 0, ("ray", "start", "--block", "--head" if env["KVBAKE_ROLE"] == "head" else "--address=h:6379"),
                          serve.env, "/", "/usr/bin/python3")
            exec_serve = Process(7, 0, serve.argv, serve.env, serve.cwd, serve.exe)
            container.update(Processes=(ray, exec_serve) if env["KVBAKE_ROLE"] == "head" else (ray,), Main=ray)
        return done
    monkeypatch.setattr(world, "launch", launch)
    return world


def test_every_old_ray_node_stops_before_the_first_new_one_starts(ray_world):
    deploy(ray_world, CONTROL)
    assert ray_world.events == ["start a", "start b"], "a first deploy has nothing to stop"
    ray_world.events.clear()
    deploy(ray_world, PACKING)
    assert ray_world.events == ["stop a", "stop b", "start a", "start b"]
    ray_world.events.clear()
    rollout.rollback(ray_world.fleet, False)
    assert ray_world.events == ["stop a", "stop b", "start a", "start b"]


def test_a_failed_ray_deploy_stops_the_new_gang_before_the_old_one_starts_again(ray_world):
    deploy(ray_world, CONTROL)
    ray_world.events.clear()
    ray_world.failing_launch.add("b:packing")
    with pytest.raises(RolloutError, match="launcher on b exited 1"):
        deploy(ray_world, PACKING)
    # b's new Ray node never started (its launcher failed); the revert stops the new head before the old gang starts
    assert ray_world.events == ["stop a", "stop b", "start a", "start b", "stop a", "start a", "start b"]


def test_init_starts_a_ray_cluster_head_first_and_other_pairs_workers_first():
    from kvbake.ship.core.init_documents import deploy_document
    from test_init_placeholders import described, nodes

    pair = nodes("a", "b")
    assert deploy_document(pair, described(shape="ray"), "/r")["start"] == "in-order"
    assert [n["name"] for n in deploy_document(pair, described(shape="ray"), "/r")["nodes"]] == ["a", "b"], "the head first"
    assert deploy_document(pair, described(shape="exec"), "/r")["start"] == "workers-first"
