"""What the refusals before a transition tell: a diverged mark names the host that wrote it, its revert error and its
repair; an unfinished transition names the command that finishes or undoes it; a node whose lock cannot be taken is
named with a fix. A journal's ID carries the UTC time in any local zone."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kvbake.errors import DivergedError, EngineError, RolloutError
from kvbake.ship.adapters.node_locks import LOCK_NAME
from kvbake.ship.adapters.rollout import NodeView, locked, new_journal_id, refuse_marks
from kvbake.ship.core.noderecords import NodeRecords
from message_words import says

from fake_fleet import CONTROL, World, deploy, make_world
from test_rollout_node_copies_mutants import corrupt_records

MARK = {"by": "ops@host-b", "revert_error": "node b unreachable", "repair": "python build.py deploy --reseat b"}


def marked(mark: dict) -> list[NodeView]:
    return [NodeView("a", NodeRecords(), None, None), NodeView("b", NodeRecords(diverged=mark), None, None)]


def test_a_diverged_mark_names_its_node_its_host_its_revert_error_and_its_repair():
    with pytest.raises(DivergedError) as refused:
        refuse_marks(marked(MARK))
    assert says(refused.value.message, "node b") and says(refused.value.message, "ops@host-b")
    assert says(refused.value.message, "node b unreachable")
    assert refused.value.fix is not None and says(refused.value.fix, "python build.py deploy --reseat b")


def test_a_mark_that_names_no_host_is_said_to_be_another_hosts():
    with pytest.raises(DivergedError) as refused:
        refuse_marks(marked({"repair": "x"}))
    assert says(refused.value.message, "marked diverged by another host")


@pytest.mark.parametrize("kind, command", [("adopt", "adopt"), ("deploy", "deploy"), ("rollback", "deploy")])
def test_an_unfinished_transition_names_the_command_that_finishes_or_undoes_it(kind, command):
    views = [NodeView("a", NodeRecords(transition={"kind": kind, "id": f"{kind}-1", "release_id": "r"}), None, None)]
    with pytest.raises(RolloutError) as refused:
        refuse_marks(views)
    assert says(refused.value.fix, f"python build.py {command} --resume") and says(refused.value.fix, f"{command} --revert")


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


def test_a_node_whose_lock_cannot_be_taken_is_named_with_a_fix_and_no_lock_is_left(world, monkeypatch):
    def engine_fails(*args, **kwargs):
        raise EngineError("b is unreachable", "check it")

    monkeypatch.setattr(world.engines["b"], "create_marker", engine_fails)
    with pytest.raises(RolloutError) as refused:
        locked(world.fleet, "deploy-1", False, "base:1")
    assert says(refused.value.message, "node b") and says(refused.value.message, "b is unreachable")
    assert refused.value.fix and says(refused.value.fix, "nothing was changed")
    assert all(LOCK_NAME not in engine.containers for engine in world.engines.values())


def test_breaking_a_stale_lock_on_a_node_with_corrupt_records_names_that_node(world):
    deploy(world, CONTROL)
    locked(world.fleet, "deploy-1", False, "base:1")  # taken, then left to go stale
    world.advance(world.fleet.deployment.lock_stale_after_s + 1)
    corrupt_records(world, "b")
    with pytest.raises(RolloutError) as refused:
        locked(world.fleet, "deploy-2", True, "base:1")
    assert says(refused.value.message, "node b")


def test_a_journal_id_carries_the_utc_time_in_any_local_zone(monkeypatch):
    monkeypatch.setenv("TZ", "Pacific/Kiritimati")  # UTC+14: its date is never UTC's at the same instant's hour
    time.tzset()
    try:
        before = time.strftime("%Y%m%dT%H", time.gmtime())
        journal_id = new_journal_id("deploy")
        after = time.strftime("%Y%m%dT%H", time.gmtime())  # the hour may turn in between
    finally:
        monkeypatch.undo()
        time.tzset()
    assert journal_id.startswith((f"deploy-{before}", f"deploy-{after}"))
