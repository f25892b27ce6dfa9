"""Adopting every serve shape on fake nodes, through the journal: main process, docker exec beside `sleep infinity`, --rm,
names that differ per node; kept restorable through any number of deploys until adopt --release; a kill at every
step finished by adopt --resume or undone by adopt --revert."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kvbake.deployfile import Node
from kvbake.errors import RolloutError
from kvbake.ship.adapters import rollout
from kvbake.ship.adapters.adoption import adopt, release_adoption, rollback_to_adopted
from kvbake.ship.adapters.nodestate import NodeState

from fake_fleet import CONTAINER, CONTROL, PACKING, World, deploy, killed_adopt, make_world, start_serves

KEPT = f"{CONTAINER}-kvbake-adopted"


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


def serve_state(world: World, name: str = CONTAINER) -> dict:
    """What serves on every node: container, whether it runs, its processes' command lines and switch, restart policy."""
    state = {}
    for node, engine in world.engines.items():
        found = engine.containers.get(name)
        state[node] = None if found is None else (
            found["State"]["Running"], tuple((p.argv, p.env.get("S")) for p in found.get("Processes", ())),
            (found.get("HostConfig") or {}).get("RestartPolicy", {}).get("Name"))
    return state


@pytest.mark.parametrize("shape", ["main", "exec"])
@pytest.mark.parametrize("auto_remove", [False, True], ids=["kept", "--rm"])
def test_every_shape_is_adopted_set_aside_and_brought_back_exactly(world, shape, auto_remove):
    start_serves(world, shape, auto_remove)
    serving = serve_state(world)
    releases = adopt(world.fleet, "seed serve", False)
    assert {r.adopted["shape"] for r in releases.values()} == {shape} and {r.switches["S"] for r in releases.values()} == {"3"}
    if shape == "exec":
        assert releases["a"].adopted["exec"] == {"argv": ["python3", "/usr/local/bin/vllm", "serve", "/models/m", "--max-model-len", "4096"],
                                                 "env": {"S": "3"}, "cwd": "/srv", "user": "1000"}
    deploy(world, CONTROL)
    for engine in world.engines.values():
        kept = engine.containers.get(KEPT)
        if auto_remove:
            assert kept is None, "a --rm serve is gone once stopped"
        else:
            assert not kept["State"]["Running"] and kept["HostConfig"]["RestartPolicy"]["Name"] == "no", "never started at boot"
    rollout.rollback(world.fleet, False)
    assert serve_state(world) == serving
    assert all(KEPT not in engine.containers for engine in world.engines.values())


def test_the_adopted_serve_stays_restorable_through_deploys_until_released(world):
    ids = start_serves(world)
    adopt(world.fleet, "seed serve", False)
    for release in (CONTROL, PACKING, CONTROL):
        deploy(world, release)
    assert all(engine.containers[KEPT]["Id"] == ids[node] for node, engine in world.engines.items())
    rollback_to_adopted(world.fleet, False)
    assert {node: engine.containers[CONTAINER]["Id"] for node, engine in world.engines.items()} == ids
    rollout.rollback(world.fleet, False)
    assert world.snapshot()["nodes"]["a"]["records"] == (CONTROL.id, NodeState("a", world.engines["a"]).read().adopted.id)
    assert release_adoption(world.fleet, False) == ["a", "b"]
    for node, engine in world.engines.items():
        records = NodeState(node, engine).read()
        assert KEPT not in engine.containers and records.adopted is None and records.previous is None
    with pytest.raises(RolloutError, match="keeps no adopted serve"):
        rollback_to_adopted(world.fleet, False)


def test_release_is_refused_while_the_adopted_serve_runs(world):
    start_serves(world)
    adopt(world.fleet, "seed serve", False)
    before = world.snapshot()
    with pytest.raises(RolloutError, match="adopt --release: the adopted serve runs now on a, b") as refused:
        release_adoption(world.fleet, False)
    assert refused.value.exit_code == 12 and world.snapshot() == before


def test_names_that_differ_per_node_come_from_the_deployment_file(world):
    names = {"a": "vllm_node", "b": "node"}
    world.fleet.deployment.__dict__["nodes"] = tuple(dataclasses.replace(n, container=names[n.name]) for n in world.fleet.deployment.nodes)
    ids = start_serves(world, names=names)
    releases = adopt(world.fleet, "seed serve", False)
    assert {node: r.adopted["name"] for node, r in releases.items()} == names
    deploy(world, CONTROL)
    rollout.rollback(world.fleet, False)
    assert {node: engine.containers[names[node]]["Id"] for node, engine in world.engines.items()} == ids
    assert all(CONTAINER not in engine.containers for engine in world.engines.values()), "kvbake's serve is gone"


def test_a_first_deploy_that_fails_brings_back_a_rm_exec_serve(world):
    start_serves(world, "exec", auto_remove=True)
    serving = serve_state(world)
    adopt(world.fleet, "seed serve", False)
    world.failing_launch.add("b:control")
    with pytest.raises(RolloutError, match="launcher on b exited 1"):
        deploy(world, CONTROL)
    assert serve_state(world) == serving
    assert [e[1][-5] for e in world.engines["a"].execs] == ["/usr/local/bin/vllm", "/usr/local/bin/vllm"], "exec'd again once"


ADOPT_STEPS = 3  # this host's journal, then one retag per node


@pytest.mark.parametrize("at", range(1, ADOPT_STEPS + 1))
def test_a_kill_at_every_step_of_adopt_is_finished_by_resume_or_undone_by_revert(world, at):
    start_serves(world)
    before = world.snapshot()
    for mode in ("resume", "revert"):
        killed_adopt(world, at)
        with pytest.raises(RolloutError, match="run adopt --resume to finish it or adopt --revert"):
            deploy(world, CONTROL)
        world.advance(901)  # the killed host's locks went stale
        if at == 1 and mode == "resume":  # killed after this host's journal alone: nothing began, so nothing is resumed
            with pytest.raises(RolloutError, match="never began .* nothing to resume.*fix: adopt again"):
                rollout.recover(world.fleet, mode, True, command="adopt")
            assert world.snapshot() == before
            continue
        journal = rollout.recover(world.fleet, mode, True, command="adopt")
        state = world.snapshot()
        assert state["journal"] is None and all(n["transition"] is None and not n["lock"] for n in state["nodes"].values())
        if journal.phase == "never began" or mode == "revert":
            assert state == before
        else:
            assert {n["records"][0] for n in state["nodes"].values()} != {None}
            release_adoption_after_revert(world)


def release_adoption_after_revert(world: World) -> None:
    """Undo a finished adoption by hand of the test, so the next round starts from the unadopted serve again."""
    for node, engine in world.engines.items():
        NodeState(node, engine).update("base:1", "test: forget", current=None, adopted=None)
        engine.untag(world.fleet.tag("current"))


def test_adopt_resume_without_an_interrupted_adopt_and_deploy_resume_of_an_adopt(world):
    start_serves(world)
    with pytest.raises(RolloutError, match="there is no interrupted adopt to resume or revert"):
        rollout.recover(world.fleet, "resume", False, command="adopt")
    killed_adopt(world, 2)
    world.advance(901)
    with pytest.raises(RolloutError, match=r"the interrupted transition is adopt adopt-.*; fix: finish or undo it with python build.py adopt "
                                           r"--resume or adopt --revert"):
        rollout.recover(world.fleet, "revert", True)
    deploy_journal = rollout.recover(world.fleet, "revert", True, command="adopt")
    assert deploy_journal.kind == "adopt"


def start_ray_cluster(world: World) -> None:
    """run_cluster.sh's shape: a `node` container whose main process is `ray start --block` on both nodes, given the
    same `-e` switch, and vLLM started by docker exec on the head only (its workers are Ray actors on the other node, no
    vLLM serve process)."""
    host = {"RestartPolicy": {"Name": "no", "MaximumRetryCount": 0}}
    for node, engine in world.engines.items():
        engine.run_serving(CONTAINER, "base:1", ["LANG=C", "S=3"], main=("ray", "start", "--block"), host=host)
        found = engine.containers[CONTAINER]
        found["Processes"] = found["Processes"][:1]  # the Ray node alone
        if node == "a":
            engine.exec_detached(CONTAINER, ["vllm", "serve", "/models/m", "--max-model-len", "4096", "--distributed-executor-backend", "ray"],
                                 {"S": "3"}, "/", "0")


def test_a_ray_cluster_whose_worker_runs_no_vllm_is_adopted_verified_and_brought_back(world):
    from kvbake.ship.adapters.status import verify_running

    start_ray_cluster(world)
    serving = serve_state(world)
    releases = adopt(world.fleet, "ray cluster", False)
    assert (releases["a"].adopted["shape"], releases["b"].adopted["shape"]) == ("exec", "ray-worker")
    assert releases["a"].id == releases["b"].id and releases["b"].switches == {"S": "3"} and releases["b"].max_model_len == 4096
    assert [r.node for r in verify_running(world.fleet, None)] == ["a", "b"]
    deploy(world, CONTROL)
    rollout.rollback(world.fleet, False)
    assert serve_state(world)["b"] == serving["b"] and serve_state(world)["a"][0]
    world.engines["b"].containers[CONTAINER]["Processes"] = ()  # the worker's Ray node is gone
    world.engines["b"].containers[CONTAINER]["Main"] = None
    with pytest.raises(Exception) as caught:
        verify_running(world.fleet, None)
    assert "b: the Ray worker rank runs no Ray node" in str(caught.value)


def test_a_node_without_vllm_that_is_no_ray_node_still_stops_adopt(world):
    start_ray_cluster(world)
    found = world.engines["b"].containers[CONTAINER]
    found["Processes"] = (dataclasses.replace(found["Processes"][0], argv=("sleep", "infinity")),)
    with pytest.raises(RolloutError) as caught:
        adopt(world.fleet, "not a cluster", False)
    assert "no vLLM serve runs in b" in caught.value.message
