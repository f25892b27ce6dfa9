"""Faults of deploy on real node engines; each test snapshots every node's whole state (tags, records, the journal
and diverged mark the nodes keep, the lock, what serves) before the fault and compares it after."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from kvbake.cli import main
from kvbake.engine import Engine
from kvbake.nodestate import NodeState

from shiprig import (PACKING_ENV, REPO_ROOT, STANDIN_LAUNCHER, assert_invariant, deploy_control, fleet_snapshot, reset_nodes, ship,
                     ship_with, write_deploy)

pytestmark = pytest.mark.docker


def failing_launcher(folder: Path, node: str, when_switches: bool) -> list[str]:
    """The stand-in launcher, except on `node` (only when a switch is set, if `when_switches`), where it exits 1."""
    script = folder / "failing-launcher"
    condition = f'[ "$KVBAKE_NODE" = {node} ]' + (' && grep -q KV_PAIR "$KVBAKE_ENV_FILE"' if when_switches else "")
    script.write_text(f"#!/bin/sh\n{condition} && {{ echo 'launcher: GPU busy' >&2; exit 1; }}\nexec {' '.join(STANDIN_LAUNCHER)}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return [str(script)]


def operator_host(tmp_path: Path, rig: dict, name: str, launcher: list[str] = STANDIN_LAUNCHER) -> Path:
    """Another operator host: its own deployment file and state folder, the same nodes."""
    folder = tmp_path / name
    folder.mkdir()
    return write_deploy(folder, rig, launcher)


def test_a_failed_first_deploy_leaves_new_nodes_new_and_the_next_deploy_works(capsys, shipped, rig, tmp_path):
    reset_nodes(rig, shipped["repository"])
    host = operator_host(tmp_path, rig, "first", failing_launcher(tmp_path, "spark-b", when_switches=False))
    before = fleet_snapshot(rig, shipped, host)
    code, _, err = ship_with(capsys, shipped, host, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "first")
    assert code == 12 and "launcher on spark-b exited 1 (launcher: GPU busy)" in err, err
    assert fleet_snapshot(rig, shipped, host) == before
    code, out, err = ship_with(capsys, shipped, host, "status", "--json")
    assert code == 0 and [n["current"] for n in json.loads(out)["nodes"]] == [None, None], out + err
    code, _, err = ship_with(capsys, shipped, host, "deploy", "--revert")
    assert code == 12 and "there is no interrupted deploy" in err
    deploy_control(capsys, shipped, "first, for real")
    assert_invariant(capsys, shipped, rig, set())


def test_a_failed_second_deploy_leaves_previous_as_it_was(capsys, shipped, rig, tmp_path):
    reset_nodes(rig, shipped["repository"])
    deploy_control(capsys, shipped, "first")
    host = operator_host(tmp_path, rig, "second", failing_launcher(tmp_path, "spark-b", when_switches=True))
    shutil.copytree(shipped["deploy"].parent / ".kvbake", host.parent / ".kvbake")
    before = fleet_snapshot(rig, shipped, host)
    assert before["a"]["previous"] is None and before["a"]["records"][1] is None
    code, _, err = ship_with(capsys, shipped, host, "deploy", "--preset", "packing-327680", "--image", shipped["digest"], "--reason", "second")
    assert code == 12 and "launcher on spark-b exited 1" in err, err
    assert fleet_snapshot(rig, shipped, host) == before
    code, _, err = ship(capsys, shipped, "rollback")
    assert code == 12 and "no previous release on spark-a, spark-b" in err, err


def test_redeploying_the_current_release_keeps_the_rollback_target(capsys, shipped, rig):
    deploy_control(capsys, shipped, "baseline")
    for reason in ("packing", "packing again"):
        code, _, err = ship(capsys, shipped, "deploy", "--preset", "packing-327680", "--image", shipped["digest"], "--reason", reason)
        assert code == 0, err
    after = fleet_snapshot(rig, shipped)
    assert after["a"]["records"][1] == after["b"]["records"][1] != after["a"]["records"][0]
    assert ship(capsys, shipped, "rollback")[0] == 0
    assert_invariant(capsys, shipped, rig, set())


def test_two_operator_hosts_racing_keep_every_release_in_the_rollback_chain(capsys, shipped, rig, tmp_path, monkeypatch):
    """Host 2 completes a deploy between host 1's phase 1 and its locks; host 1 plans under its locks and so keeps
    host 2's release as `previous`."""
    import kvbake.rollout as rollout

    deploy_control(capsys, shipped, "baseline")
    other = operator_host(tmp_path, rig, "host2")
    original = rollout.locked

    def host2_deploys_first(*args, **kwargs):
        monkeypatch.setattr(rollout, "locked", original)
        assert main(["deploy", "--preset", "packing-327680", "--image", shipped["digest"], "--reason", "host 2",
                     "--manifest", str(shipped["manifest"]), "--deploy", str(other)]) == 0
        return original(*args, **kwargs)

    monkeypatch.setattr(rollout, "locked", host2_deploys_first)
    code, _, err = ship(capsys, shipped, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "host 1")
    assert code == 0, err
    previous = NodeState("spark-a", Engine(rig["a"].host)).read().previous
    assert previous is not None and previous.reason == "host 2"


KILLER = """
import os, signal, sys
import kvbake.transitions as transitions
from kvbake.cli import main
original, count, stop_at = transitions.write_journal, [0], int(os.environ["KVBAKE_KILL_AT_JOURNAL_WRITE"])
def write_then_die(folder, journal):
    original(folder, journal)
    count[0] += 1
    if count[0] == stop_at:
        os.kill(os.getpid(), signal.SIGKILL)
transitions.write_journal = write_then_die
sys.exit(main(sys.argv[1:]))
"""
JOURNAL_WRITES = 5  # forward, then retag a, retag b, restart a, restart b


def killed_deploy(tmp_path: Path, shipped: dict, deploy_file: Path, at: int) -> None:
    runner = tmp_path / "killer.py"
    runner.write_text(KILLER)
    argv = [sys.executable, str(runner), "deploy", "--preset", "packing-327680", "--image", shipped["digest"], "--reason", "killed",
            "--manifest", str(shipped["manifest"]), "--deploy", str(deploy_file)]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "KVBAKE_KILL_AT_JOURNAL_WRITE": str(at)}
    assert subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, env=env).returncode == -9


@pytest.mark.parametrize("at", range(1, JOURNAL_WRITES + 1))
def test_a_kill_at_every_journal_step_then_resume_and_again_then_revert(capsys, shipped, rig, tmp_path, at):
    deploy_control(capsys, shipped, "baseline")
    before = fleet_snapshot(rig, shipped)
    killed_deploy(tmp_path, shipped, shipped["deploy"], at)
    code, _, err = ship(capsys, shipped, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "blocked")
    assert code == 12 and "deploy --resume" in err, err
    code, _, err = ship(capsys, shipped, "deploy", "--resume")
    assert code == 0, err
    assert_invariant(capsys, shipped, rig, PACKING_ENV)
    resumed = fleet_snapshot(rig, shipped)
    assert resumed["a"]["previous"] == before["a"]["current"] and not resumed["journal"] and not resumed["a"]["lock"]
    deploy_control(capsys, shipped, "baseline again")
    before = fleet_snapshot(rig, shipped)
    killed_deploy(tmp_path, shipped, shipped["deploy"], at)
    code, _, err = ship(capsys, shipped, "deploy", "--revert")
    assert code == 0, err
    reverted = fleet_snapshot(rig, shipped)
    assert {k: reverted[k] for k in ("journal", "diverged")} == {"journal": False, "diverged": False}
    for node in ("a", "b"):
        assert {k: v for k, v in reverted[node].items() if k != "serving"} == {k: v for k, v in before[node].items() if k != "serving"}
        assert reverted[node]["serving"][:2] == before[node]["serving"][:2]


def test_a_host_that_died_mid_deploy_stops_other_hosts_which_can_revert_it(capsys, shipped, rig, tmp_path):
    deploy_control(capsys, shipped, "baseline")
    before = fleet_snapshot(rig, shipped)
    killed_deploy(tmp_path, shipped, shipped["deploy"], 3)
    other = operator_host(tmp_path, rig, "host2")
    code, _, err = ship_with(capsys, shipped, other, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "host 2")
    assert code == 12 and "is locked by" in err, err
    code, _, err = ship_with(capsys, shipped, other, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "host 2",
                             "--break-lock")
    assert code == 12 and "holds the journal of an interrupted deploy" in err and "from any operator host" in err, err
    code, _, err = ship_with(capsys, shipped, other, "deploy", "--revert")
    assert code == 0, err
    after = fleet_snapshot(rig, shipped, other)
    assert (after["a"]["records"], after["b"]["records"]) == (before["a"]["records"], before["b"]["records"])
    code, _, err = ship(capsys, shipped, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "host 1 again")
    assert code == 12 and "run deploy --resume to finish it or deploy --revert" in err, err
    code, _, err = ship(capsys, shipped, "deploy", "--revert")
    assert code == 12 and "was already finished or undone from another operator host" in err, err
    deploy_control(capsys, shipped, "host 1 goes on")
    assert_invariant(capsys, shipped, rig, set())


def test_a_corrupt_journal_is_a_typed_error_and_the_nodes_copy_repairs(capsys, shipped, rig, tmp_path):
    deploy_control(capsys, shipped, "baseline")
    before = fleet_snapshot(rig, shipped)
    killed_deploy(tmp_path, shipped, shipped["deploy"], 2)
    journal = shipped["deploy"].parent / ".kvbake" / "deploy" / "journal.json"
    journal.write_bytes(journal.read_bytes()[:40])
    code, _, err = ship(capsys, shipped, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "x")
    assert code == 12 and f"the deploy journal {journal} is corrupt" in err and "reads the copy every node keeps" in err, err
    assert len(err.strip().splitlines()) == 1
    journal.rename(journal.with_suffix(".broken"))
    code, _, err = ship(capsys, shipped, "deploy", "--revert")
    assert code == 0, err
    after = fleet_snapshot(rig, shipped)
    assert (after["a"]["records"], after["b"]["records"], after["a"]["current"]) == (before["a"]["records"], before["b"]["records"], before["a"]["current"])


def test_a_corrupt_node_record_is_a_typed_error_and_reseat_rewrites_it(capsys, shipped, rig, tmp_path):
    deploy_control(capsys, shipped, "baseline")
    garbage = tmp_path / "kvbake"
    garbage.mkdir()
    for slot in ("state-a.json", "state-b.json"):
        (garbage / slot).write_bytes(b'{"format": 2, "seq": 9, "current": {"truncated')
    Engine(rig["b"].host).copy_in(garbage, "kvbake-state", "/")
    code, _, err = ship(capsys, shipped, "status")
    assert code == 12 and "node spark-b: every copy of its state record is corrupt" in err and "--reseat spark-b" in err, err
    code, _, err = ship(capsys, shipped, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "x")
    assert code == 12 and "node spark-b: every copy of its state record is corrupt" in err, err
    code, _, err = ship(capsys, shipped, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "reseat", "--reseat", "spark-b")
    assert code == 0, err
    assert_invariant(capsys, shipped, rig, set())
