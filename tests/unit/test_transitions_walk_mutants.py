"""A walk scoped to a later node walks that node; an adoption's walk retags and records but starts nothing; a
transition that cannot write its journal leaves none; a transition that cannot begin names, in its fix, every node
that still keeps the journal."""

from __future__ import annotations

from dataclasses import replace

import pytest

import kvbake.ship.adapters.transitions as transitions
from kvbake.deployfile import Node
from kvbake.errors import LockLost, RolloutError
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.core.journal import Scope, read_journal
from message_words import says

from fake_engine import FakeEngine
from fake_fleet import BASE, CONTROL, PACKING, World, deploy
from test_mutants_transitions import CONTROL as CONTROL_OF_SCENE, PACKING as SCENE_PACKING, Scene, scene  # noqa: F401  (scene is a fixture)
from test_transitions_publish import refusing, world  # noqa: F401  (world is a fixture)


def test_a_walk_scoped_to_a_later_node_walks_that_node(scene: Scene) -> None:
    only_b = Scope(frozenset({"b"}), frozenset({"b"}))
    transitions.apply_side(scene.fleet, scene.journal(None, SCENE_PACKING), scene.folder, "after", scope=only_b)
    assert scene.journals[-1] == ("planned", ("after:retag:b", "after:restart:b"))
    assert scene.launches == [("b", "packing", None)]


def test_an_adoptions_walk_records_every_node_and_starts_nothing(scene: Scene) -> None:
    adoption = replace(scene.journal(None, SCENE_PACKING), kind="adopt")
    walked = transitions.apply_side(scene.fleet, adoption, scene.folder, "after")
    assert walked.done == ("after:retag:a", "after:retag:b")
    assert scene.launches == []
    assert all(NodeState(name, engine).read().current == SCENE_PACKING for name, engine in scene.fleet.engines.items())


def test_a_transition_whose_first_lock_check_fails_leaves_no_journal(scene: Scene) -> None:
    def guard() -> None:
        raise RolloutError("node a: cannot read the lock", "retry")

    with pytest.raises(RolloutError):
        transitions.run_transition(scene.fleet, scene.journal(None, SCENE_PACKING), scene.folder, guard)
    assert read_journal(scene.folder) is None and scene.launches == []


def with_node_c(world: World) -> None:
    """A third node, holding what the other two hold."""
    world.engines["c"] = FakeEngine("c")
    d = world.fleet.deployment
    world.fleet = replace(world.fleet, deployment=replace(d, nodes=(*d.nodes, Node("c", "unix:///c", "worker"))))
    world.hold_base("base:1", BASE)
    for r in (CONTROL, PACKING):
        world.offer(r, {"Env": []})


def test_a_transition_that_cannot_begin_names_every_node_that_still_keeps_the_journal(world):
    with_node_c(world)
    deploy(world, CONTROL)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(NodeState, "update", refusing(takes={"a", "b"}, drops=set()))
        with pytest.raises(RolloutError) as refused:
            deploy(world, PACKING)
    assert says(refused.value.fix, "a, b still keep the journal")


def test_a_host_that_loses_its_locks_after_a_failed_step_reverts_nothing(scene: Scene) -> None:
    transitions.run_transition(scene.fleet, scene.journal(None, CONTROL_OF_SCENE), scene.folder)
    scene.failing.add("b:packing")

    def guard() -> None:  # another host broke the locks while b's launcher failed
        if ("b", "packing", "control") in scene.launches:
            raise LockLost("node a: the lock is held by another host now", "leave the transition to that host")

    with pytest.raises(LockLost):
        transitions.run_transition(scene.fleet, scene.journal(CONTROL_OF_SCENE, SCENE_PACKING), scene.folder, guard)
    assert scene.launches[-1] == ("b", "packing", "control"), "no node was walked back"


def test_verify_failures_after_a_transition_are_listed_one_by_one(scene: Scene, monkeypatch: pytest.MonkeyPatch) -> None:
    launched = transitions.restart

    def launch_with_a_mount(fleet, name, rel, replacing=None) -> None:  # every rank comes up with a baked file covered
        launched(fleet, name, rel, replacing)
        if rel is not None and rel.preset == "packing":
            fleet.engines[name].containers["serve"]["Mounts"] = [{"Type": "bind", "Destination": "/src/x.py"}]

    monkeypatch.setattr(transitions, "restart", launch_with_a_mount)
    transitions.run_transition(scene.fleet, scene.journal(None, CONTROL_OF_SCENE), scene.folder)
    with pytest.raises(RolloutError) as refused:
        transitions.run_transition(scene.fleet, scene.journal(CONTROL_OF_SCENE, SCENE_PACKING), scene.folder)
    listed = refused.value.message.split("failed after deploy: ", 1)[1].split("; ")
    assert len(listed) >= 2 and all(item.startswith(("a: ", "b: ", "the ranks disagree")) for item in listed)
    assert any(item.startswith("a: ") for item in listed) and any(item.startswith("b: ") for item in listed)
