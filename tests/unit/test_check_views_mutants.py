"""Before anything changes, the ranks must agree on their current release, a recorded current must have its image, and
a serve kvbake did not deploy must be adopted first; a node being reseated is left out of the agreement."""

from __future__ import annotations

import pytest

from kvbake.errors import DivergedError, RolloutError
from kvbake.ship.adapters.rollout import NodeView, check_views
from kvbake.ship.core.noderecords import NodeRecords

from fake_fleet import CONTROL, PACKING


def node(name: str, current=None, serving: str | None = None) -> NodeView:
    return NodeView(name, NodeRecords(current=current), current.config_digest if current else None, None, serving)


@pytest.mark.parametrize("b_runs", [PACKING, None])
def test_ranks_on_different_releases_are_refused_as_diverged_naming_each(b_runs):
    with pytest.raises(DivergedError) as refused:
        check_views([node("a", CONTROL), node("b", b_runs)])
    assert f"a={CONTROL.id}, b={b_runs.id if b_runs else None}" in refused.value.message
    assert "deploy --preset" in refused.value.fix


def test_a_node_being_reseated_is_left_out_of_the_agreement_and_the_others_still_must_agree():
    check_views([node("a", CONTROL), node("b", PACKING)], frozenset({"b"}))
    with pytest.raises(DivergedError):
        check_views([node("a", CONTROL), node("b", PACKING), node("c", CONTROL)], frozenset({"c"}))


def test_a_recorded_current_without_its_image_names_the_node_and_its_reseat():
    missing = NodeView("b", NodeRecords(current=CONTROL), None, None)
    with pytest.raises(RolloutError) as refused:
        check_views([node("a", CONTROL), missing])
    assert f"node b records release {CONTROL.id}" in refused.value.message
    assert refused.value.fix.endswith("deploy --preset NAME --reseat b")


def test_a_serve_kvbake_did_not_deploy_is_named_by_its_short_container_id():
    with pytest.raises(RolloutError) as refused:
        check_views([node("a", serving="0123456789abcdef" * 4)])
    assert "node a runs a serve kvbake did not deploy (container 0123456789ab)" in refused.value.message
