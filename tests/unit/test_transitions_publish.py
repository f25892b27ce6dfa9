"""A transition that cannot begin because a node refuses the journal: the nodes that took it drop it again; one that
cannot drop it is named (it still keeps the journal) and this host keeps its journal too, so a revert can finish."""

from __future__ import annotations

import pytest

from fake_fleet import CONTROL, PACKING, World, deploy, make_world
from kvbake.errors import RolloutError
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.core.journal import read_journal


@pytest.fixture()
def world(tmp_path, monkeypatch) -> World:
    return make_world(tmp_path, monkeypatch)


def refusing(takes: set[str], drops: set[str]):
    """NodeState.update where only the nodes in `takes` take the journal and only those in `drops` drop it."""
    original = NodeState.update

    def update(self, image, line, **fields):
        if "transition" in fields and fields["transition"] is not None and self.node not in takes:
            raise RolloutError(f"node {self.node}: state write failed", "retry")
        if "transition" in fields and fields["transition"] is None and self.node not in drops:
            raise RolloutError(f"node {self.node}: state write failed", "retry")
        return original(self, image, line, **fields)
    return update


def journal_kept_by(world: World) -> dict[str, str | None]:
    return {name: (NodeState(name, engine).read().transition or {}).get("id") for name, engine in world.engines.items()}


def test_a_node_that_cannot_drop_the_journal_is_named_and_both_journals_stay(world):
    deploy(world, CONTROL)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(NodeState, "update", refusing(takes={"a"}, drops={"b"}))
        with pytest.raises(RolloutError) as refused:
            deploy(world, PACKING)
    assert "could not begin" in refused.value.message and "node b: state write failed" in refused.value.message
    assert "a still keep the journal" in refused.value.fix and "deploy --revert" in refused.value.fix
    journal = read_journal(world.fleet.deployment.state_dir)
    assert journal is not None and journal_kept_by(world) == {"a": journal.id, "b": None}
    assert world.launches == ["a:control", "b:control"], "no node was restarted"


def test_when_every_node_drops_the_journal_this_hosts_journal_goes_too(world):
    deploy(world, CONTROL)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(NodeState, "update", refusing(takes={"a"}, drops={"a", "b"}))
        with pytest.raises(RolloutError) as refused:
            deploy(world, PACKING)
    assert "still keep" not in refused.value.fix and refused.value.fix.endswith("nothing was changed on any node")
    assert read_journal(world.fleet.deployment.state_dir) is None and journal_kept_by(world) == {"a": None, "b": None}
