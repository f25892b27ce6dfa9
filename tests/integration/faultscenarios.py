"""Deploy fault scenarios shared by the uniform rig (test_ship, test_ship_faults) and the mixed-store fleet
(test_mixed_fleet): each snapshots every node's whole state before the fault and compares it after."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kvbake.ship.core.journal import DIVERGED

from shiprig import (PACKING_ENV, REPO_ROOT, STANDIN_LAUNCHER, assert_invariant, deploy_control, fleet_snapshot, node_snapshot, reset_nodes,
                     ship, ship_with, write_deploy)

NODE_NAMES = {"a": "spark-a", "b": "spark-b"}


def failing_launcher(folder: Path, node: str, when_switches: bool) -> list[str]:
    """The stand-in launcher, except on `node` (only when a switch is set, if `when_switches`), where it exits 1."""
    script = folder / f"failing-launcher-{node}"
    condition = f'[ "$KVBAKE_NODE" = {node} ]' + (' && grep -q KV_PAIR "$KVBAKE_ENV_FILE"' if when_switches else "")
    script.write_text(f"#!/bin/sh\n{condition} && {{ echo 'launcher: GPU busy' >&2; exit 1; }}\nexec {' '.join(STANDIN_LAUNCHER)}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return [str(script)]


def operator_host(tmp_path: Path, rig: dict, name: str, launcher: list[str] = STANDIN_LAUNCHER) -> Path:
    """Another operator host: its own deployment file and state folder, the same nodes."""
    folder = tmp_path / name
    folder.mkdir()
    return write_deploy(folder, rig, launcher)


def without_running_flags(snapshot: dict[str, Any]) -> dict[str, Any]:
    """The snapshot with each serving container's running flag left out (an engine restart brings it back later)."""
    nodes = {key: {**value, "serving": value["serving"][:2] if value["serving"] else None} for key, value in snapshot.items()
             if isinstance(value, dict)}
    return {**snapshot, **nodes}


def failed_first_deploy(capsys, shipped: dict, rig: dict, tmp_path: Path, failing: str) -> None:
    """A first deploy whose launcher fails on one node leaves every node new, and the next deploy works."""
    reset_nodes(rig, shipped["repository"])
    host = operator_host(tmp_path, rig, "first", failing_launcher(tmp_path, failing, when_switches=False))
    before = fleet_snapshot(rig, shipped, host)
    code, _, err = ship_with(capsys, shipped, host, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "first")
    assert code == 12 and f"launcher on {failing} exited 1 (launcher: GPU busy)" in err, err
    assert fleet_snapshot(rig, shipped, host) == before
    code, out, err = ship_with(capsys, shipped, host, "status", "--json")
    assert code == 0 and [n["current"] for n in json.loads(out)["nodes"]] == [None, None], out + err
    code, _, err = ship_with(capsys, shipped, host, "deploy", "--revert")
    assert code == 12 and "there is no interrupted deploy" in err
    deploy_control(capsys, shipped, "first, for real")
    assert_invariant(capsys, shipped, rig, set())


def failed_second_deploy(capsys, shipped: dict, rig: dict, tmp_path: Path, failing: str) -> None:
    """A second deploy whose launcher fails on one node leaves `current` and `previous` as they were, everywhere."""
    reset_nodes(rig, shipped["repository"])
    deploy_control(capsys, shipped, "first")
    host = operator_host(tmp_path, rig, "second", failing_launcher(tmp_path, failing, when_switches=True))
    shutil.copytree(shipped["deploy"].parent / ".kvbake", host.parent / ".kvbake")
    before = fleet_snapshot(rig, shipped, host)
    assert before["a"]["previous"] is None and before["a"]["records"][1] is None
    code, _, err = ship_with(capsys, shipped, host, "deploy", "--preset", "packing-327680", "--image", shipped["digest"], "--reason", "second")
    assert code == 12 and f"launcher on {failing} exited 1" in err, err
    assert fleet_snapshot(rig, shipped, host) == before
    code, _, err = ship(capsys, shipped, "rollback")
    assert code == 12 and "no previous release on spark-a, spark-b" in err, err


def node_down_after_phase_one(capsys, shipped: dict, rig: dict, monkeypatch: pytest.MonkeyPatch, down: str) -> None:
    """A node that dies between phase 1 and the locks: nothing changes on any node. Its engine comes back without the
    serve (tensor-parallel ranks restart only as a gang: restart policy no); redeploying the release restarts the gang."""
    import kvbake.ship.adapters.rollout as rollout

    deploy_control(capsys, shipped, "baseline")
    before = fleet_snapshot(rig, shipped)
    original = rollout.stage_release

    def stage_then_stop(*args, **kwargs):
        staged = original(*args, **kwargs)
        rig[down].stop()
        return staged

    monkeypatch.setattr(rollout, "stage_release", stage_then_stop)
    try:
        code, _, err = ship(capsys, shipped, "deploy", "--preset", "packing-327680", "--image", shipped["digest"], "--reason", "dies")
        assert code == 12 and f"node {NODE_NAMES[down]}: staging failed" in err and "nothing serving was changed" in err, err
    finally:
        rig[down].start()
    monkeypatch.undo()
    assert without_running_flags(fleet_snapshot(rig, shipped)) == without_running_flags(before)
    assert not fleet_snapshot(rig, shipped)[down]["serving"][2], "the rebooted rank does not start on its own"
    deploy_control(capsys, shipped, "restart the gang")
    assert_invariant(capsys, shipped, rig, set())


def node_down_after_the_other_was_retagged(capsys, shipped: dict, rig: dict, monkeypatch: pytest.MonkeyPatch, down: str) -> None:
    """The other node is retagged, then `down` dies: DIVERGED, every further deploy refused, and `deploy --revert`
    brings back exactly the state before."""
    import kvbake.ship.adapters.transitions as transitions

    deploy_control(capsys, shipped, "baseline")
    before = fleet_snapshot(rig, shipped)
    other = NODE_NAMES["a" if down == "b" else "b"]  # retagged first, then `down` dies
    original = transitions.retag

    def retag_then_stop(fleet, name, current, previous):
        original(fleet, name, current, previous)
        if name == other and rig[down].socket_path.exists():
            rig[down].stop()

    monkeypatch.setattr(transitions, "retag", retag_then_stop)
    code, _, err = ship(capsys, shipped, "deploy", "--preset", "packing-327680", "--image", shipped["digest"], "--reason", "dies mid-way")
    monkeypatch.undo()
    assert code == 13 and "DIVERGED" in err and "deploy --revert" in err, err
    up = "a" if down == "b" else "b"
    assert (shipped["deploy"].parent / ".kvbake" / "deploy" / DIVERGED).exists()
    assert node_snapshot(rig[up], NODE_NAMES[up], shipped["repository"])["diverged"], "the reachable node keeps the diverged mark"
    code, _, err = ship(capsys, shipped, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "refused")
    assert code == 13 and "repair first" in err
    rig[down].start()
    code, _, err = ship(capsys, shipped, "deploy", "--revert")
    assert code == 12 and f"node {NODE_NAMES[down]} holds a stale lock" in err and "--break-lock" in err, err
    code, out, err = ship(capsys, shipped, "deploy", "--revert", "--break-lock")
    assert code == 0, err
    assert without_running_flags(fleet_snapshot(rig, shipped)) == without_running_flags(before)
    assert_invariant(capsys, shipped, rig, set())


KILLER = """
import os, signal, sys
import kvbake.ship.adapters.transitions as transitions
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


def killed_run(tmp_path: Path, argv: list[str], at: int) -> None:
    """A kvbake command in another process, killed with SIGKILL right after its `at`-th journal write."""
    runner = tmp_path / "killer.py"
    runner.write_text(KILLER)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "KVBAKE_KILL_AT_JOURNAL_WRITE": str(at)}
    done = subprocess.run([sys.executable, str(runner), *argv], cwd=REPO_ROOT, capture_output=True, text=True, env=env)
    assert done.returncode == -9, done.stderr


def killed_deploy(tmp_path: Path, shipped: dict, deploy_file: Path, at: int) -> None:
    """A deploy in another process, killed with SIGKILL right after its `at`-th journal write."""
    killed_run(tmp_path, ["deploy", "--preset", "packing-327680", "--image", shipped["digest"], "--reason", "killed",
                          "--manifest", str(shipped["manifest"]), "--deploy", str(deploy_file)], at)


def kill_then_resume_and_again_then_revert(capsys, shipped: dict, rig: dict, tmp_path: Path, at: int) -> None:
    """Killed at journal write `at`: every deploy is refused until `--resume` (with --break-lock: the killed process
    held the locks) finishes it; killed again, `--revert` brings back every node's whole state. Killed at the first write,
    this host's own journal, nothing began: resume refuses and drops it, with every node as it was."""
    deploy_control(capsys, shipped, "baseline")
    before = fleet_snapshot(rig, shipped)
    killed_deploy(tmp_path, shipped, shipped["deploy"], at)
    code, _, err = ship(capsys, shipped, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "blocked")
    assert code == 12 and "deploy --resume" in err, err
    code, _, err = ship(capsys, shipped, "deploy", "--resume")
    assert code == 12 and "holds a stale lock" in err and "its process is gone" in err, err
    code, _, err = ship(capsys, shipped, "deploy", "--resume", "--break-lock")
    if at == 1:  # killed right after its own journal, before any node learnt of it: nothing to finish, nothing changed
        assert code == 12 and "never began" in err and "nothing to resume" in err, err
        assert fleet_snapshot(rig, shipped) == before
        return
    assert code == 0, err
    assert_invariant(capsys, shipped, rig, PACKING_ENV)
    resumed = fleet_snapshot(rig, shipped)
    assert resumed["a"]["previous"] == before["a"]["current"] and not resumed["journal"] and not resumed["a"]["lock"]
    deploy_control(capsys, shipped, "baseline again")
    before = fleet_snapshot(rig, shipped)
    killed_deploy(tmp_path, shipped, shipped["deploy"], at)
    code, _, err = ship(capsys, shipped, "deploy", "--revert", "--break-lock")
    assert code == 0, err
    reverted = fleet_snapshot(rig, shipped)
    assert {k: reverted[k] for k in ("journal", "diverged")} == {"journal": False, "diverged": False}
    for node in ("a", "b"):
        assert {k: v for k, v in reverted[node].items() if k != "serving"} == {k: v for k, v in before[node].items() if k != "serving"}
        assert reverted[node]["serving"][:2] == before[node]["serving"][:2]
