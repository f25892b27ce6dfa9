"""Every rank's own switch set: a Ray worker rank runs its Ray node's environment, with the switches the head's vLLM
serve hands its workers where the node sets none; a switch whose value there depends on vLLM's Ray executor is named.
adopt records that set for the worker's node, and verify-running holds the worker to it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kvbake.engines.core.procfs import environment
from kvbake.errors import IntegrityError, RolloutError
from kvbake.ship.adapters.adoption import adopt
from kvbake.ship.adapters.status import verify_running
from kvbake.ship.core.process_checks import handed_switches, ray_worker_switches, worker_switch_problems

from fake_fleet import CONTAINER, World, make_world
from message_words import says

NAMES = ("S", "VLLM_T", "VLLM_U")


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    w = make_world(tmp_path, monkeypatch)
    w.fleet = replace(w.fleet, switch_names=NAMES)
    return w


def ray_cluster(world: World, worker_env: list[str]) -> None:
    """A Ray node (`ray start --block`) in the `node` container of both nodes, both given S=3, the worker's also
    `worker_env`; vLLM started on the head by docker exec with VLLM_T=1 (its workers are Ray actors on b)."""
    for node, engine in world.engines.items():
        env = ["LANG=C", "S=3", *(worker_env if node == "b" else [])]
        engine.run_serving(CONTAINER, "base:1", env, main=("ray", "start", "--block"))
        engine.containers[CONTAINER]["Processes"] = engine.containers[CONTAINER]["Processes"][:1]
    world.engines["a"].exec_detached(CONTAINER, ["vllm", "serve", "/models/m", "--max-model-len", "4096", "--distributed-executor-backend",
                                                 "ray"], {"VLLM_T": "1"}, "/", "0")


def restart_ray_node(world: World, node: str, env: list[str]) -> None:
    """The node's Ray node runs again in its container with `env` (the container itself stays)."""
    container = world.engines[node].containers[CONTAINER]
    ray = container["Processes"][0]
    container["Processes"] = (replace(ray, env=environment(env)),)


def test_a_worker_runs_its_ray_nodes_switches_and_those_the_head_hands_where_the_node_sets_none():
    handed = handed_switches({"S": "3", "VLLM_T": "1", "OTHER": "x"}, NAMES)
    assert handed == {"VLLM_T": "1"}  # carried by its prefix under both executors; S only under vLLM's V2 executor
    assert ray_worker_switches({"S": "5", "VLLM_U": "1"}, handed, NAMES) == {"S": "5", "VLLM_T": "1", "VLLM_U": "1"}
    assert ray_worker_switches({"LANG": "C"}, {}, NAMES) == {}


def test_a_switch_whose_worker_value_depends_on_vllms_ray_executor_is_a_problem():
    """vLLM 0.32's V1 Ray executor writes the head's carried values over the worker's; its V2 executor (the default)
    fills in only what the worker leaves unset, but hands every name. Where they differ, kvbake names the switch."""
    (both,) = worker_switch_problems({"VLLM_T": "0"}, {"VLLM_T": "1"}, NAMES)
    assert says(both, "VLLM_T=0") and says(both, "VLLM_T=1") and says(both, "V2 executor")
    (head_only,) = worker_switch_problems({}, {"S": "3"}, NAMES)
    assert says(head_only, "S=3") and says(head_only, "registers the name")
    assert worker_switch_problems({}, {"S": "3", "VLLM_RAY_EXTRA_ENV_VARS_TO_COPY": "S"}, NAMES) == [], "carried by the head's own list"
    assert worker_switch_problems({"S": "3", "VLLM_T": "1"}, {"S": "3", "VLLM_T": "1"}, NAMES) == [], "alike on both"
    assert worker_switch_problems({"VLLM_U": "1"}, {}, NAMES) == [], "the head leaves it unset: the node's under both"
    assert worker_switch_problems({"VLLM_HOST_IP": "b"}, {"VLLM_HOST_IP": "a"}, ("VLLM_HOST_IP",)) == [], "per worker"


def test_adopt_records_each_workers_own_switch_set(world):
    ray_cluster(world, [])  # the worker's Ray node leaves VLLM_T unset: the head's VLLM_T=1 reaches it
    releases = adopt(world.fleet, "ray cluster", False)
    assert releases["b"].switches == releases["a"].switches == {"S": "3", "VLLM_T": "1"}
    assert [r.node for r in verify_running(world.fleet, None)] == ["a", "b"]


def test_adopt_refuses_a_worker_whose_switch_depends_on_vllms_ray_executor(world):
    ray_cluster(world, ["VLLM_T=0"])  # the head's serve sets VLLM_T=1
    before = world.snapshot()
    with pytest.raises(RolloutError) as refused:
        adopt(world.fleet, "ray cluster", False)
    assert refused.value.exit_code == 12 and says(refused.value.message, "VLLM_T=0") and says(refused.value.message, "VLLM_T=1")
    assert says(refused.value.fix, "nothing was changed") and world.snapshot() == before


def test_adopt_names_a_worker_whose_ray_node_sets_a_switch_the_head_does_not(world):
    ray_cluster(world, ["VLLM_U=1"])
    before = world.snapshot()
    with pytest.raises(RolloutError) as refused:
        adopt(world.fleet, "ray cluster", False)
    assert "b: sha256:base with {'S': '3', 'VLLM_T': '1', 'VLLM_U': '1'}" in refused.value.message
    assert world.snapshot() == before


def test_verify_running_names_an_adopted_worker_whose_ray_node_sets_a_switch_the_head_does_not(world):
    ray_cluster(world, [])
    adopt(world.fleet, "ray cluster", False)
    restart_ray_node(world, "b", ["LANG=C", "S=3", "VLLM_U=1"])
    with pytest.raises(IntegrityError) as failed:
        verify_running(world.fleet, None)
    assert "b: the Ray node runs VLLM_U=1, the release sets (unset)" in failed.value.message
    assert "a:" not in failed.value.message.partition("problem(s): ")[2]
