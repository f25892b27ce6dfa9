"""Which rank serves through its Ray node alone: a worker node of a deployment whose launcher starts the ray shape
(SHAPE=ray), or an adopted Ray worker; never the head, and never a worker of another shape."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kvbake.serve.core.serve_reading import RAY_WORKER

from fake_fleet import CONTROL, World, make_world


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


def with_shape(world: World, shape: str):
    d = world.fleet.deployment
    return replace(world.fleet, deployment=replace(d, launcher=replace(d.launcher, env={"SHAPE": shape})))


def test_only_a_worker_node_of_the_ray_shape_serves_through_its_ray_node(world):
    ray, main = with_shape(world, "ray"), with_shape(world, "main")
    assert (ray.runs_as_ray_worker("b", CONTROL), ray.runs_as_ray_worker("a", CONTROL)) == (True, False)
    assert (main.runs_as_ray_worker("b", CONTROL), world.fleet.runs_as_ray_worker("b", CONTROL)) == (False, False)


def test_an_adopted_rank_is_a_ray_worker_by_its_recorded_shape_alone(world):
    worker = replace(CONTROL, adopted={"container_id": "c", "kept_as": "k", "shape": RAY_WORKER})
    head = replace(CONTROL, adopted={"container_id": "c", "kept_as": "k", "shape": "main"})
    assert (world.fleet.runs_as_ray_worker("a", worker), with_shape(world, "ray").runs_as_ray_worker("b", head)) == (True, False)
