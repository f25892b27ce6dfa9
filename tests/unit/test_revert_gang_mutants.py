"""A revert restarts the ranks as a gang only when one must: nothing restarts when a deploy stopped after a retag and
every serve it would walk back to still runs (no serve at all for a first deploy, the adopted serve under its own name);
and every node it walked back, retagged only, is verified."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbake.errors import DivergedError
from kvbake.ship.adapters import rollout, transitions
from kvbake.ship.adapters.adoption import adopt
from kvbake.ship.core.journal import read_diverged

from fake_fleet import CONTROL, PACKING, World, deploy, interrupted_deploy, make_world, start_serves


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


def revert_steps(world: World, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The steps each journal write of the revert names, as it is written (the deploy's own first)."""
    written: list[str] = []
    original = transitions.write_journal

    def recording(folder, journal):
        written.extend(step for step in journal.done if step not in written)
        original(folder, journal)

    monkeypatch.setattr(transitions, "write_journal", recording)
    world.advance(world.fleet.deployment.lock_stale_after_s + 1)
    rollout.recover(world.fleet, "revert", True)
    return written


def test_reverting_a_first_deploy_stopped_at_its_first_retag_restarts_nothing(world, monkeypatch):
    interrupted_deploy(world, PACKING)
    steps = revert_steps(world, monkeypatch)
    assert "before:retag:a" in steps and not [step for step in steps if ":restart:" in step]
    assert world.launches == []


def test_reverting_a_deploy_over_an_adopted_serve_that_still_runs_under_its_own_name_restarts_nothing(world, monkeypatch):
    ids = start_serves(world, names={"a": "eugr-serve", "b": "eugr-serve"})
    adopt(world.fleet, "their serve", False, "eugr-serve")
    interrupted_deploy(world, PACKING)
    steps = revert_steps(world, monkeypatch)
    assert "before:retag:a" in steps and not [step for step in steps if ":restart:" in step]
    for node, engine in world.engines.items():
        serve = engine.containers["eugr-serve"]
        assert (serve["Id"], serve["State"]["Running"]) == (ids[node], True)


def test_a_node_walked_back_by_its_tags_alone_is_verified(world, monkeypatch):
    deploy(world, CONTROL)
    interrupted_deploy(world, PACKING)
    world.engines["a"].images[world.fleet.expected_id("a", CONTROL)[0]]["RootFS"]["Layers"] = ["sha256:other"]
    world.advance(world.fleet.deployment.lock_stale_after_s + 1)
    with pytest.raises(DivergedError) as diverged:
        rollout.recover(world.fleet, "revert", True)
    assert "a:" in diverged.value.message and read_diverged(world.fleet.deployment.state_dir) is not None
