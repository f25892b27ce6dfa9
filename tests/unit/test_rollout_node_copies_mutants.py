"""What a recovery reads from the nodes: their copy of a journal (each forward step taken as one that may have run), a
corrupt copy or record named by node, and a diverged mark refusing a resume with who set it and why."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbake.errors import DivergedError, RolloutError
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.adapters.rollout import journal_on_nodes, recover, refuse_node_marks
from kvbake.ship.core.journal import Journal, NodePlan, from_node_copy, mark_diverged, read_journal, undo_scope
from message_words import says

from fake_fleet import CONTROL, PACKING, World, deploy, interrupted_deploy, killed_adopt, make_world, start_serves


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


def plan(node: str) -> NodePlan:
    return NodePlan(node, None, None, "sha256:new", None, {}, {})


def test_the_nodes_copy_of_a_planned_journal_takes_every_forward_step_as_run():
    copy = from_node_copy(Journal("deploy-1", "deploy", "r1", (plan("a"), plan("b"))))
    assert copy.done == ("after:retag:a", "after:restart:a", "after:retag:b", "after:restart:b")
    assert copy.phase == "forward"


def test_a_journal_with_progress_of_its_own_is_taken_as_it_is():
    journal = Journal("deploy-1", "deploy", "r1", (plan("a"),), done=("after:retag:a",), phase="reverting")
    assert from_node_copy(journal) == journal


def corrupt_records(world: World, node: str) -> None:
    world.engines[node].files["kvbake-state"] = {"/kvbake/state-a.json": b"{", "/kvbake/state-b.json": b""}


@pytest.mark.parametrize("read", [journal_on_nodes, refuse_node_marks], ids=["journal", "marks"])
def test_a_node_whose_records_are_corrupt_is_named(world, read):
    deploy(world, CONTROL)
    corrupt_records(world, "a")
    with pytest.raises(RolloutError) as refused:
        read(world.fleet)
    assert says(refused.value.message, "node a: every copy of its state record is corrupt")


def test_a_corrupt_journal_copy_is_refused_naming_the_node_and_its_reseat(world):
    deploy(world, CONTROL)
    NodeState("b", world.engines["b"]).update("base:1", "test: a torn journal", transition={"id": "deploy-9"})
    with pytest.raises(RolloutError) as refused:
        journal_on_nodes(world.fleet)
    assert says(refused.value.message, "node b: the journal it keeps is corrupt")
    assert says(refused.value.fix, "python build.py deploy --preset NAME --reseat b")


def test_a_diverged_mark_without_an_author_refuses_a_resume_naming_another_host_and_the_revert_error(world):
    deploy(world, CONTROL)
    NodeState("b", world.engines["b"]).update("base:1", "test: mark", diverged={"revert_error": "node a: engine lost", "repair": "deploy --revert"})
    with pytest.raises(DivergedError) as refused:
        refuse_node_marks(world.fleet)
    assert says(refused.value.message, "node b is marked diverged by another host (node a: engine lost)")
    assert says(refused.value.fix, "repair first: deploy --revert")


def test_a_diverged_mark_with_no_journal_anywhere_is_refused_naming_the_mark_to_move_aside(world):
    deploy(world, CONTROL)
    folder = world.fleet.deployment.state_dir
    mark_diverged(folder, {"by": "ops@h1", "journal": "deploy-9"})
    with pytest.raises(RolloutError) as refused:
        recover(world.fleet, "revert", False)
    assert says(refused.value.message, "neither this host nor any node keeps its journal")
    assert says(refused.value.fix, f"move {folder / 'DIVERGED.json'} aside")


def test_recovering_an_interrupted_deploy_with_adopt_is_refused_naming_the_deploy_and_its_own_commands(world):
    deploy(world, CONTROL)
    interrupted_deploy(world, PACKING)
    journal = read_journal(world.fleet.deployment.state_dir)
    with pytest.raises(RolloutError) as refused:
        recover(world.fleet, "revert", False, command="adopt")
    assert refused.value.message.endswith(f"the interrupted transition is deploy {journal.id}, not an adopt")
    assert says(refused.value.fix, "finish or undo it with python build.py deploy --resume or deploy --revert")


def test_recovering_an_interrupted_adopt_with_deploy_is_refused_naming_the_adopt(world):
    start_serves(world)
    killed_adopt(world, 2)
    journal = read_journal(world.fleet.deployment.state_dir)
    with pytest.raises(RolloutError) as refused:
        recover(world.fleet, "revert", True)
    assert refused.value.message.endswith(f"the interrupted transition is adopt {journal.id}")
    assert says(refused.value.fix, "finish or undo it with python build.py adopt --resume or adopt --revert")


def test_a_revert_walks_back_every_node_a_journalled_forward_step_names_and_no_other():
    journal = Journal("deploy-1", "deploy", "r1", (plan("a"), plan("b"), plan("c")), phase="reverting",
                      done=("before:retag:c", "after:retag:a+b", "after:restart:a"))
    scope = undo_scope(journal)
    assert (scope.retagged, scope.restarted) == (frozenset({"a", "b"}), frozenset({"a"}))
