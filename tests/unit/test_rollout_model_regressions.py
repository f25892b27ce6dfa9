"""Counterexamples the rollout model found, replayed step by step on its world of two nodes and two operator hosts."""

from __future__ import annotations

import pytest

import model_commands as commands
from kvbake.errors import DivergedError, RolloutError
from model_oracle import unsettled
from model_world import STALE, Fault, World, acting_on, patched


@pytest.fixture
def world(tmp_path):
    with patched(), acting_on(World(tmp_path, "in-order")) as chosen:
        yield chosen


def nodes_back_and_locks_stale(world: World) -> None:
    for fake in world.fakes.values():
        fake.down, fake.clock = False, fake.clock + STALE + 1


def test_a_revert_from_the_other_host_lets_the_first_host_drop_its_diverged_mark(world):
    """h0's deploy loses node a half-way and its revert fails (diverged); h1 reverts it. h0's named repair then finds no
    node keeping that journal: it drops its own copy and its own diverged mark, and h0 deploys again."""
    assert isinstance(world.run("h0", commands.deploy("control"), Fault("a.tag", 2, "lost")), DivergedError)
    nodes_back_and_locks_stale(world)
    assert world.run("h1", commands.recover("revert", "deploy", True)) is None
    refused = world.run("h0", commands.recover("revert", "deploy", True))
    assert isinstance(refused, RolloutError) and refused.exit_code != 0
    assert not unsettled(world)
    assert world.run("h0", commands.deploy("packing")) is None
