"""verify-running on a node without a release record and on ranks that disagree, and status: signed releases, node marks, absent containers, switches."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fake_fleet import CONTAINER, CONTROL, PACKING, REPO, SOURCE_ROOT, SWITCH, World, deploy, make_world, start_serves
from kvbake.errors import IntegrityError, RolloutError
from kvbake.ship.adapters.adoption import adopt
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.adapters.status import status, status_table, verify_running
from message_words import says


@pytest.fixture()
def world(tmp_path, monkeypatch) -> World:
    return make_world(tmp_path, monkeypatch)


def forget_b(world: World) -> None:
    """Node b's records no longer name a current release."""
    NodeState("b", world.engines["b"]).update("base:1", "forgotten", current=None)


def refusal(world: World) -> IntegrityError:
    with pytest.raises(IntegrityError) as failure:
        verify_running(world.fleet, None)
    return failure.value


def test_a_rank_without_a_record_is_still_checked_against_what_its_container_runs(world):
    deploy(world, CONTROL)
    forget_b(world)
    message = refusal(world).message
    assert says(message, "b: no release recorded; b: the running image's layers differ from the release")
    assert says(message, "b: label k differs")


def test_a_rank_without_a_record_has_its_mounts_and_code_overrides_checked(world):
    deploy(world, CONTROL)
    forget_b(world)
    engine = world.engines["b"]
    engine.run_serving(CONTAINER, f"{REPO}:current", ["PYTHONPATH=/opt/shadow"])
    engine.containers[CONTAINER]["Mounts"] = [{"Type": "bind", "Source": "/home/ops", "Destination": SOURCE_ROOT}]
    message = refusal(world).message
    assert says(message, f"b: a bind mount at {SOURCE_ROOT} covers baked file {SOURCE_ROOT}/x.py")
    assert says(message, "b: PYTHONPATH is set to '/opt/shadow' in the container")
    assert not says(message, "the container runs image")


def test_a_rank_without_a_record_or_a_container_is_refused_as_such(world):
    deploy(world, CONTROL)
    forget_b(world)
    del world.engines["b"].containers[CONTAINER]
    failure = refusal(world)
    assert says(failure.message, "b: the serving container is not there")
    assert says(failure.message, "node b: tag current points at")  # the tag its records no longer name
    assert failure.message.startswith("verify-running: 3 problem(s)")


@pytest.mark.parametrize("read", [lambda fleet: verify_running(fleet, None), status], ids=["verify-running", "status"])
def test_damaged_records_name_the_node_they_belong_to(world, read):
    deploy(world, CONTROL)
    world.engines["b"].files["kvbake-state"] = {"/kvbake/state-a.json": b"{", "/kvbake/state-b.json": b""}
    with pytest.raises(RolloutError) as failure:
        read(world.fleet)
    assert says(failure.value.message, "node b")


def test_the_table_lists_several_switches_comma_separated_in_name_order():
    row = {"node": "a", "role": "head", "current": None, "previous": None, "running": True, "running_matches_current": False,
           "switches": {"Z": "2", "A": "1"}}
    table = status_table({"nodes": [row], "diverged": False, "marked_diverged": None, "pending_journal": None, "stray_tags": []})
    assert table.splitlines()[1].split()[-1] == "A=1,Z=2"


def test_a_signed_release_shows_who_signed_it(world):
    signer = {"key": "alice.pub", "fingerprint": "sha256:ab"}
    deploy(world, replace(CONTROL, signed_by=signer))
    assert [row["current"]["signed_by"] for row in status(world.fleet)["nodes"]] == [signer, signer]


def test_a_mark_only_a_node_keeps_makes_the_deployment_marked_diverged(world):
    deploy(world, CONTROL)
    mark = {"by": "ops@h1", "repair": "python build.py deploy --revert"}
    NodeState("b", world.engines["b"]).update("base:1", "diverged", diverged=mark)
    data = status(world.fleet)
    assert data["marked_diverged"] == mark and data["pending_journal"] is None
    assert says(status_table(data).splitlines()[-1], "repair: python build.py deploy --revert")


def test_a_node_without_its_serving_container_runs_nothing_and_has_no_switches(world):
    deploy(world, PACKING)
    del world.engines["b"].containers[CONTAINER]
    row = status(world.fleet)["nodes"][1]
    assert (row["running"], row["running_layers"], row["switches"], row["running_matches_current"]) == (False, 0, {}, False)
    assert row["current"]["id"] == PACKING.id and row["recorded_current_missing"] is False


def test_ranks_that_each_run_their_own_but_different_current_release_are_diverged(world):
    deploy(world, CONTROL)
    deploy(world, PACKING)
    NodeState("b", world.engines["b"]).update("base:1", "back", current=CONTROL)
    world.engines["b"].run_serving(CONTAINER, f"{REPO}:previous", [f"{SWITCH}=3"])
    data = status(world.fleet)
    assert [row["running_matches_current"] for row in data["nodes"]] == [True, True]
    assert [row["current"]["id"] for row in data["nodes"]] == [PACKING.id, CONTROL.id]
    assert data["diverged"] is True


def test_an_adopted_serve_is_observed_in_its_own_container(world):
    names = {"a": "vllm_node", "b": "node"}
    world.fleet.deployment.__dict__["nodes"] = tuple(replace(n, container=names[n.name]) for n in world.fleet.deployment.nodes)
    start_serves(world, names=names)
    adopt(world.fleet, "seed serve", False)
    rows = status(world.fleet)["nodes"]
    assert [(row["running"], row["switches"]) for row in rows] == [(True, {SWITCH: "3"}), (True, {SWITCH: "3"})]


def test_a_node_without_a_recorded_release_shows_none_though_it_holds_the_current_tag(world):
    deploy(world, CONTROL)
    forget_b(world)
    row = status(world.fleet)["nodes"][1]
    assert (row["current"], row["recorded_current_missing"], row["running_matches_current"], row["running"]) == (None, False, False, True)


@pytest.mark.parametrize("forgotten, failing", [("a", "b"), ("b", "a")])
def test_a_rank_without_a_record_keeps_every_other_ranks_failures_in_order(world, forgotten, failing):
    deploy(world, CONTROL)
    NodeState(forgotten, world.engines[forgotten]).update("base:1", "forgotten", current=None)
    del world.engines[failing].containers[CONTAINER]
    message = refusal(world).message
    assert says(message, f"{forgotten}: no release recorded") and says(message, f"{failing}: the serving container is not there")


def test_ranks_that_each_run_their_own_record_but_different_releases_fail_verify_running_naming_both(world):
    """Each rank matches the release its own node records; verify-running still holds them to each other."""
    deploy(world, CONTROL)
    deploy(world, PACKING)
    NodeState("b", world.engines["b"]).update("base:1", "back", current=CONTROL)
    world.engines["b"].tag(world.engines["b"].image_id_of(f"{REPO}:previous"), f"{REPO}:current")  # its tag as its record says
    world.engines["b"].run_serving(CONTAINER, f"{REPO}:current", [])  # control: no switches
    failure = refusal(world)
    assert failure.message.startswith("verify-running: 1 problem(s): the ranks disagree: ")
    assert says(failure.message, f"a runs 2 layers with {{'{SWITCH}': '3'}}") and says(failure.message, "b runs 2 layers with no switches")
