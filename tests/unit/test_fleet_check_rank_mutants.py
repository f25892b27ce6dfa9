"""What one rank's check reports beyond its failures: a stopped rank still shows its image's layers to the agreement
check and runs no switch set; an adopted serve is held to its recorded length but keeps its own overrides; a file the
serving container changed under the source root is named with its node."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kvbake.ship.adapters.serve_reader import read_rank

from fake_fleet import CONTAINER, CONTROL, SOURCE_ROOT, World, deploy, make_world

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
    failures = world.fleet.process_failures("a", serve, ADOPTED, {}, image)
    assert len(failures) == 1 and "--max-model-len" in failures[0] and "2048" in failures[0]
    serve, image = serving(world, [], ("--max-model-len", "4096"))
    assert world.fleet.process_failures("a", serve, ADOPTED, {}, image) == []


def test_an_adopted_serve_keeps_the_code_overrides_it_ran_with(world):
    serve, image = serving(world, ["PYTHONPATH=/opt/shadow"])
    assert world.fleet.process_failures("a", serve, ADOPTED, {}, image) == []
    # the same serve under a baked release is refused for it, so the adopted pass is not a blind spot of the check
    assert any("PYTHONPATH" in f for f in world.fleet.process_failures("a", serve, CONTROL, {}, image))


def test_a_file_changed_under_the_source_root_is_named_with_its_node(world):
    serve, image = serving(world, [])
    world.engines["a"].containers[CONTAINER]["Changes"] = {f"{SOURCE_ROOT}/vllm/x.py": "C"}
    serve, image = read_rank(world.engines["a"], world.engines["a"].containers[CONTAINER]), image
    failures = world.fleet.process_failures("a", serve, CONTROL, {}, image)
    assert len(failures) == 1 and failures[0].startswith("a: ") and "vllm/x.py" in failures[0]
