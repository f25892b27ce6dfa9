"""What one rank's check reports beyond its failures: a stopped rank still shows its image's layers to the agreement
check and runs no switch set; an adopted serve is held to its recorded length but keeps its own overrides; a file the
serving container changed under the source root is named with its node."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kvbake.engines.core.procfs import Process, environment
from kvbake.ship.adapters.serve_reader import read_rank
from kvbake.serve.core.serve_reading import RAY_WORKER

from fake_fleet import CONTAINER, CONTROL, PACKING, SOURCE_ROOT, World, deploy, make_world
from test_fleet_ray_worker_mutants import with_shape

ADOPTED = replace(CONTROL, adopted={"container_id": "c", "kept_as": "k", "shape": "main"})


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    world = make_world(tmp_path, monkeypatch)
    world.offer(CONTROL)
    deploy(world, CONTROL)
    return world


def serving(world: World, env: list[str], args: tuple[str, ...] = ("--max-model-len", "4096")):
    """Rank a's serve (re)started with `env` and `args`: its container, image and what its processes show."""
    engine = world.engines["a"]
    engine.run_serving(CONTAINER, engine.containers[CONTAINER]["Image"], env, args)
    container, image = world.fleet.observe("a", CONTROL)
    return read_rank(engine, container), image


def test_a_stopped_rank_shows_its_images_layers_and_runs_no_switch_set(world):
    world.engines["a"].containers[CONTAINER]["State"] = {"Running": False}
    check = world.fleet.check_rank("a", CONTROL)
    assert check.failures  # a stopped serve always fails
    assert check.signature == (CONTROL.layers, ())
    assert check.switches == {}


def test_an_adopted_serve_is_held_to_its_recorded_length(world):
    serve, image = serving(world, [], ("--max-model-len", "2048"))
    failures = world.fleet.process_failures("a", serve, ADOPTED, {}, image, world.engines["a"].containers[CONTAINER])
    assert len(failures) == 1 and "--max-model-len" in failures[0] and "2048" in failures[0]
    serve, image = serving(world, [], ("--max-model-len", "4096"))
    assert world.fleet.process_failures("a", serve, ADOPTED, {}, image, world.engines["a"].containers[CONTAINER]) == []


def test_an_adopted_serve_keeps_the_code_overrides_it_ran_with(world):
    serve, image = serving(world, ["PYTHONPATH=/opt/shadow"])
    assert world.fleet.process_failures("a", serve, ADOPTED, {}, image, world.engines["a"].containers[CONTAINER]) == []
    # the same serve under a baked release is refused for it, so the adopted pass is not a blind spot of the check
    assert any("PYTHONPATH" in f for f in world.fleet.process_failures("a", serve, CONTROL, {}, image, world.engines["a"].containers[CONTAINER]))


def test_a_file_changed_under_the_source_root_is_named_with_its_node(world):
    serve, image = serving(world, [])
    world.engines["a"].containers[CONTAINER]["Changes"] = {f"{SOURCE_ROOT}/vllm/x.py": "C"}
    serve, image = read_rank(world.engines["a"], world.engines["a"].containers[CONTAINER]), image
    failures = world.fleet.process_failures("a", serve, CONTROL, {}, image, world.engines["a"].containers[CONTAINER])
    assert len(failures) == 1 and failures[0].startswith("a: ") and "vllm/x.py" in failures[0]


def run_ray_node(world: World, node: str, env: list[str]) -> None:
    """Node `node`'s serving container runs a Ray node as its main process and no vLLM serve."""
    engine = world.engines[node]
    container = engine.containers[CONTAINER]
    ray = Process(1, 0, ("ray", "start", "--block", "--address=127.0.0.1:6380"), environment(env), "/", "/usr/bin/ray")
    container.update({"Processes": (ray,), "Main": ray})


def test_a_rank_running_no_vllm_serve_is_a_failure_not_a_crash(world):
    run_ray_node(world, "a", [])  # not a Ray worker rank: the head must serve
    check = world.fleet.check_rank("a", CONTROL)
    assert len(check.failures) == 1 and "no vLLM serve" in check.failures[0]
    assert check.switches == {}


def test_a_rank_whose_image_is_gone_fails_on_its_layers(world):
    engine = world.engines["a"]
    engine.images.pop(engine.containers[CONTAINER]["Image"])
    check = world.fleet.check_rank("a", CONTROL)
    assert any("layers differ" in failure for failure in check.failures)
    assert check.signature[0] == ()


def test_a_ray_worker_rank_is_checked_as_a_ray_node_with_the_releases_switch_set(world):
    fleet = with_shape(world, "ray")
    run_ray_node(world, "b", ["S=3"])
    check = fleet.check_rank("b", PACKING)
    assert check.signature[1] == RAY_WORKER
    assert check.switches == {"S": "3"}
    assert not any("Ray node runs" in failure for failure in check.failures)
    run_ray_node(world, "b", ["S=1"])
    assert any("S=1" in failure for failure in fleet.check_rank("b", PACKING).failures)


def test_a_ray_worker_ranks_container_is_still_checked(world):
    fleet = with_shape(world, "ray")
    run_ray_node(world, "b", [])
    assert fleet.check_rank("b", CONTROL).failures == ()
    world.engines["b"].containers[CONTAINER]["Mounts"] = [{"Type": "bind", "Source": "/host/x.py", "Destination": f"{SOURCE_ROOT}/x.py"}]
    assert any("x.py" in failure for failure in fleet.check_rank("b", CONTROL).failures)


def test_an_adopted_ray_worker_is_held_to_the_switch_set_recorded_for_its_own_node(world):
    run_ray_node(world, "b", ["S=1"])
    container = world.engines["b"].containers[CONTAINER]
    adopted = replace(CONTROL, switches={"S": "1"}, adopted={"container_id": container["Id"], "kept_as": "k", "shape": RAY_WORKER})
    assert not any("Ray node runs" in failure for failure in world.fleet.check_rank("b", adopted).failures)
    run_ray_node(world, "b", ["S=2"])
    assert "b: the Ray node runs S=2, the release sets 1" in world.fleet.check_rank("b", adopted).failures


def adopted_of(world: World, node: str, **info) -> "Release":
    container = world.engines[node].containers[CONTAINER]
    return replace(CONTROL, adopted={"container_id": container["Id"], "kept_as": "kept", "shape": "main", **info})


def test_an_adopted_serve_set_aside_is_observed_under_its_kept_name_not_the_serve_that_took_its_place(world):
    engine = world.engines["a"]
    adopted = adopted_of(world, "a")
    engine.rename_container(CONTAINER, "kept")
    engine.run_serving(CONTAINER, engine.containers["kept"]["Image"], [])  # kvbake's serve under the launcher's name
    assert world.fleet.observe("a", adopted)[0]["Id"] == adopted.adopted["container_id"]


def test_a_stranger_under_an_adopted_serves_own_name_is_what_is_observed_there(world):
    engine = world.engines["a"]
    adopted = adopted_of(world, "a", name="eugr-serve")
    image = engine.containers[CONTAINER]["Image"]
    engine.containers.pop(CONTAINER)  # the adopted serve is gone; another container took its name
    engine.run_serving("eugr-serve", image, [])
    container = world.fleet.observe("a", adopted)[0]
    assert container is not None and container["Name"] == "eugr-serve"
    assert any("not the adopted" in failure for failure in world.fleet.check_rank("a", adopted).failures)
