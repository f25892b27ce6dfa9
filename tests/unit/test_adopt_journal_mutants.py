"""adopt's journal and locks: each node's lock is held under the adopt's journal id, the journal names the release it
records (the one `adopt --resume` then makes current), and a host that loses its locks mid-adopt stops at once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvbake.errors import LockLost
from kvbake.ship.adapters import rollout
from kvbake.ship.adapters.adoption import adopt
from kvbake.ship.adapters.node_locks import LOCK_NAME, HeldLocks
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.core.journal import read_journal
from kvbake.ship.core.lock_claims import claim_from_labels

from fake_fleet import World, killed_adopt, locks_taken_after_each_retag, make_world, start_serves


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    w = make_world(tmp_path, monkeypatch)
    start_serves(w)
    return w


def test_each_nodes_lock_is_held_under_the_adopts_journal_id(world):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(HeldLocks, "release", lambda self: None)  # the locks stay as they were held
        adopt(world.fleet, "their serve", False)
    holders = {claim_from_labels(engine.containers[LOCK_NAME]["Config"]["Labels"]).deploy for engine in world.engines.values()}
    assert len(holders) == 1 and re.fullmatch(r"adopt-\d{8}T\d{6}Z-[0-9a-f]{6}", holders.pop())


def test_the_journal_of_a_killed_adopt_names_the_release_its_resume_makes_current(world):
    killed_adopt(world, 3)
    journal = read_journal(world.fleet.deployment.state_dir)
    world.advance(world.fleet.deployment.lock_stale_after_s + 1)
    rollout.recover(world.fleet, "resume", True, command="adopt")
    assert {NodeState(name, engine).read().current.id for name, engine in world.engines.items()} == {journal.release_id}


def test_an_adopt_whose_locks_are_taken_stops_at_once(world):
    with locks_taken_after_each_retag(world), pytest.raises(LockLost):
        adopt(world.fleet, "their serve", False)
    assert read_journal(world.fleet.deployment.state_dir) is None, "the host that broke the lock owns the transition now"
    assert NodeState("b", world.engines["b"]).read().current is None, "node b was never retagged"
