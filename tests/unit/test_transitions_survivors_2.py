"""The launcher writes to its node too: when another host claimed the node between kvbake's last write and the launch,
the launcher does not run there and the deploy stops, naming the lock as lost. An adopted serve that its own restart
policy restarts (an old Ray worker waiting for its head) is no dead rank, where a kvbake release so restarted is. Leaving
an adopted Ray cluster, every old Ray node stops before the first new node starts."""

from __future__ import annotations

import pytest

from kvbake.errors import LockLost
from kvbake.ship.adapters import transitions
from kvbake.ship.adapters.adoption import adopt
from kvbake.ship.adapters.node_fence import NodeFence
from kvbake.ship.adapters.node_locks import LOCK_NAME

from fake_fleet import CONTAINER, CONTROL, PACKING, deploy
from test_adoption import start_ray_cluster, world  # noqa: F401  (world is the fixture)
from test_mutants_transitions import adopted_release, ready_fleet, serving_container


def test_a_node_claimed_by_another_host_just_before_its_launch_is_not_launched(world, monkeypatch):
    original = transitions.write_rank_files

    def write_then_another_host_claims_a(folder, settings):
        files = original(folder, settings)
        engine = world.engines["a"]
        engine.remove_container(LOCK_NAME)
        engine.create_marker("base:1", LOCK_NAME, {"kvbake.lock.token": "other"})
        NodeFence("a", engine, lambda: None).claim()
        return files

    monkeypatch.setattr(transitions, "write_rank_files", write_then_another_host_claims_a)
    with pytest.raises(LockLost):
        deploy(world, CONTROL)
    assert not [launch for launch in world.launches if launch.startswith("a:")]


def test_an_adopted_serve_restarted_by_its_own_policy_is_no_dead_rank_and_a_release_so_restarted_is(tmp_path, monkeypatch):
    fleet = ready_fleet(tmp_path)
    seen = []
    monkeypatch.setattr(transitions, "wait_until_ready", lambda readiness, dead_rank, **_: seen.append(dead_rank()) or 0.0)
    for key in ("a", "b"):
        serving_container(fleet.engines[key], f"{key}-1")
        fleet.engines[key].containers[CONTAINER]["RestartCount"] = 1
    transitions.await_readiness(fleet, {"a": adopted_release(), "b": adopted_release()})
    transitions.await_readiness(fleet, {"a": PACKING, "b": PACKING})
    assert seen[0] is None
    assert seen[1].startswith(f"the serving container {CONTAINER} on a keeps restarting")


def test_leaving_an_adopted_ray_cluster_stops_every_old_ray_node_before_the_first_launch(world, monkeypatch):
    start_ray_cluster(world)
    adopt(world.fleet, "ray cluster", False)
    launch = world.launch
    worker_at_first_launch = []

    def launch_seeing_the_worker(env):
        if not worker_at_first_launch:
            worker = world.engines["b"].containers.get(CONTAINER)
            worker_at_first_launch.append(bool(worker and worker["State"].get("Running")))
        return launch(env)

    monkeypatch.setattr(world, "launch", launch_seeing_the_worker)
    deploy(world, CONTROL)
    assert world.launches[0].startswith("a:") and worker_at_first_launch == [False]
