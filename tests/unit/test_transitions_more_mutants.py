"""Dropping a journal from a node whose plan names no image yet: its state container is seeded from the staged tag."""

from __future__ import annotations

from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.adapters.transitions import publish, unpublish
from kvbake.ship.core.journal import Journal, NodePlan

from test_transitions_publish import world  # noqa: F401  (a fixture)


def test_a_node_whose_plan_names_no_image_drops_the_journal_it_took(world):
    engine = world.engines["a"]
    engine.tag(engine.image_id_of("base:1"), world.fleet.tag("staged"))  # a deploy stages its image before any plan
    plan = NodePlan("a", None, None, "", None, {}, {})
    journal = Journal("deploy-1", "deploy", "release-1", (plan,))
    publish(world.fleet, journal, world.fleet.deployment.state_dir)
    assert NodeState("a", world.engines["a"]).read().transition is not None
    assert unpublish(world.fleet, journal, [plan]) == []
    assert NodeState("a", world.engines["a"]).read().transition is None
