"""`status` over fake nodes, data and table: each node's current and previous release in brief, what runs and its
switches, and the lines that say the deployment diverged or a transition was interrupted; verify-running's refusal."""

from __future__ import annotations

import pytest

from fake_fleet import CONTAINER, CONTROL, PACKING, REPO, SWITCH, World, deploy, interrupted_deploy, make_world
from kvbake.errors import IntegrityError
from kvbake.ship.adapters.status import status, status_table, verify_running


@pytest.fixture()
def world(tmp_path, monkeypatch) -> World:
    return make_world(tmp_path, monkeypatch)


def test_after_two_deploys_each_row_has_both_releases_in_brief_and_what_runs(world):
    deploy(world, CONTROL)
    deploy(world, PACKING)
    data = status(world.fleet)
    row = data["nodes"][0]
    assert (row["node"], row["role"]) == ("a", "head") and data["nodes"][1]["role"] == "worker"
    assert row["current"] == {"id": PACKING.id, "preset": "packing", "image": PACKING.image, "max_model_len": PACKING.max_model_len,
                              "deployed_at": PACKING.deployed_at, "deployed_by": PACKING.deployed_by, "reason": PACKING.reason, "signed_by": None}
    assert row["previous"]["id"] == CONTROL.id and row["previous"]["preset"] == "control"
    assert row["running"] is True and row["running_layers"] == len(PACKING.layers) and row["running_matches_current"] is True
    assert row["switches"] == {SWITCH: "3"} and row["recorded_current_missing"] is False
    assert (data["diverged"], data["marked_diverged"], data["pending_journal"]) == (False, None, None)
    lines = status_table(data).splitlines()
    assert lines[0].split() == ["node", "role", "current", "previous", "running", "switches"]
    cells = lines[1].split()
    assert cells[:2] == ["a", "head"] and f"{PACKING.id} (packing)" in lines[1] and f"{CONTROL.id} (control)" in lines[1]
    assert cells[-2:] == ["yes", f"{SWITCH}=3"] and len(lines) == 3


def test_a_first_deploy_has_no_previous_and_a_stopped_serve_shows_as_not_running(world):
    deploy(world, CONTROL)
    world.engines["b"].stop(CONTAINER)
    data = status(world.fleet)
    assert data["nodes"][0]["previous"] is None and data["nodes"][1]["running"] is False
    line_b = status_table(data).splitlines()[2].split()
    assert line_b[4] == "-" and line_b[-2:] == ["no", "(none)"]


def test_a_rank_running_another_image_is_marked_in_the_table_and_the_deployment_diverged(world):
    deploy(world, CONTROL)
    world.engines["b"].run_serving(CONTAINER, "base:1", [], ("--max-model-len", "4096"))
    data = status(world.fleet)
    assert data["diverged"] is True and data["nodes"][1]["running_matches_current"] is False
    lines = status_table(data).splitlines()
    assert lines[2].split()[-2] == "yes!" and lines[1].split()[-2] == "yes"
    assert lines[-1] == "DIVERGED: the ranks do not agree"


def test_ranks_with_different_switch_sets_are_diverged(world):
    deploy(world, CONTROL)
    world.engines["b"].run_serving(CONTAINER, f"{REPO}:current", [f"{SWITCH}=3"], ("--max-model-len", "4096"))
    assert status(world.fleet)["diverged"] is True


def test_an_interrupted_deploy_is_named_with_how_to_recover_and_its_mark_once_diverged(world):
    deploy(world, CONTROL)
    interrupted_deploy(world, PACKING)
    data = status(world.fleet)
    assert data["pending_journal"] is not None
    assert status_table(data).splitlines()[-1] == f"interrupted: {data['pending_journal']}; run deploy --resume or deploy --revert"
    marked = {**data, "diverged": False, "marked_diverged": {"repair": "python build.py deploy --revert"}, "pending_journal": None}
    assert status_table(marked).splitlines()[-1] == "DIVERGED: the ranks do not agree; repair: python build.py deploy --revert"


def test_verify_running_counts_every_problem_and_says_how_to_repair(world):
    deploy(world, CONTROL)
    for engine in world.engines.values():
        engine.run_serving(CONTAINER, f"{REPO}:current", [f"{SWITCH}=3"], ("--max-model-len", "4096"))
    with pytest.raises(IntegrityError) as failure:
        verify_running(world.fleet, None)
    assert failure.value.message.startswith("verify-running: 2 problem(s): ") and "rollback" in failure.value.fix
    reports = verify_running(world.fleet, {SWITCH: "3"})
    assert [(r.node, r.failures, r.switches) for r in reports] == [("a", (), {SWITCH: "3"}), ("b", (), {SWITCH: "3"})]
