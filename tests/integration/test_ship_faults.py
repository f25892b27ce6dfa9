"""Faults of deploy on real node engines; each test snapshots every node's whole state (tags, records, the journal
and diverged mark the nodes keep, the lock, what serves) before the fault and compares it after."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from typing import Iterator

import pytest

from kvbake.cli import main
from kvbake.engines.adapters.client import Engine
from kvbake.ship.adapters.node_locks import LOCK_NAME, pid_namespace, process_start
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.core.lock_claims import claim_from_labels

from faultscenarios import (JOURNAL_WRITES, failed_first_deploy, failed_second_deploy, kill_then_resume_and_again_then_revert, killed_deploy,
                            operator_host)
from shiprig import (BASE, PACKING_ENV, REPO_ROOT, STANDIN_LAUNCHER, assert_invariant, deploy_control, fleet_snapshot, reset_nodes, ship,
                     ship_with)

RESET_TAGS = "python build.py deploy --reset-tags"

# The subject is kvbake's journal, node locks and fences, which no image store changes: with Docker 26.1 on both stores
# the module runs on the classic store (the kills across a classic and a containerd node: test_mixed_fleet.py).
pytestmark = [pytest.mark.docker, pytest.mark.once_on_containerd]  # the classic pass runs the real-Ray walks


def test_a_failed_first_deploy_leaves_new_nodes_new_and_the_next_deploy_works(capsys, shipped, rig, tmp_path):
    failed_first_deploy(capsys, shipped, rig, tmp_path, failing="spark-b")


def test_a_failed_second_deploy_leaves_previous_as_it_was(capsys, shipped, rig, tmp_path):
    failed_second_deploy(capsys, shipped, rig, tmp_path, failing="spark-b")


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
    import kvbake.ship.adapters.rollout as rollout

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


# The journal is this host's; every engine profile runs a kill at the first and the last step, the default engine all.
KILL_STEPS = [at if at in (1, JOURNAL_WRITES) else pytest.param(at, marks=pytest.mark.default_engine_only)
              for at in range(1, JOURNAL_WRITES + 1)]


@pytest.mark.parametrize("at", KILL_STEPS)
def test_a_kill_at_every_journal_step_then_resume_and_again_then_revert(capsys, shipped, rig, tmp_path, at):
    kill_then_resume_and_again_then_revert(capsys, shipped, rig, tmp_path, at)


def test_a_host_that_died_mid_deploy_stops_other_hosts_which_can_revert_it(capsys, shipped, rig, tmp_path):
    deploy_control(capsys, shipped, "baseline")
    before = fleet_snapshot(rig, shipped)
    killed_deploy(tmp_path, shipped, shipped["deploy"], 3)
    other = operator_host(tmp_path, rig, "host2")
    code, _, err = ship_with(capsys, shipped, other, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "host 2")
    assert code == 12 and "holds a stale lock" in err and "its process is gone" in err and "--break-lock" in err, err
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
    code, _, err = ship(capsys, shipped, "deploy", "--revert", "--break-lock")
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


def gated_launcher(folder, gate) -> list[str]:
    """The stand-in launcher, once the file `gate` exists: a deploy that holds its locks until the test lets it go on."""
    script = folder / "gated-launcher"
    script.write_text(f"#!/bin/sh\nwhile [ ! -e {gate} ]; do sleep 0.1; done\nexec {' '.join(STANDIN_LAUNCHER)}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return [str(script)]


def gated_operator_host(tmp_path, rig, name: str, gate, **settings):
    """Another operator host whose launcher is held back until the file `gate` exists, with `settings` in its
    deployment file and its launcher given time to wait."""
    path = operator_host(tmp_path, rig, name, gated_launcher(tmp_path, gate))
    document = json.loads(path.read_text()) | settings
    document["launcher"]["timeout_s"] = 900  # the launcher waits for the other host's attempts, however loaded the machine
    path.write_text(json.dumps(document))
    return path


@contextlib.contextmanager
def deploy_held_back(shipped, rig, host, gate, prefix: tuple[str, ...] = ()) -> Iterator[subprocess.Popen]:
    """`host`'s deploy of packing (run under `prefix`, when given), given to the body once it has journalled on node a:
    it holds every lock, and its launcher waits for the file `gate`. After the body the gate opens, and the deploy must
    end well."""
    shutil.copytree(shipped["deploy"].parent / ".kvbake", host.parent / ".kvbake")
    argv = [*prefix, sys.executable, "build.py", "deploy", "--preset", "packing-327680", "--image", shipped["digest"], "--reason",
            "host 1", "--manifest", str(shipped["manifest"]), "--deploy", str(host)]
    deploying = subprocess.Popen(argv, cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
    try:
        while not NodeState("spark-a", Engine(rig["a"].host)).read().transition:
            assert deploying.poll() is None, deploying.communicate()
            time.sleep(0.2)
        yield deploying
        gate.touch()
        _, err = deploying.communicate(timeout=600)
    finally:
        if deploying.poll() is None:
            deploying.kill()
            deploying.communicate()
    assert deploying.returncode == 0, err


def test_recovery_from_another_host_never_takes_the_lock_of_a_live_deploy(capsys, shipped, rig, tmp_path):
    """Host 1 deploys with a launcher held back until host 2 is done, while its locks go stale after 1.5 s without
    renewal; host 2 tries --revert, --resume and a deploy, each with --break-lock, 2 s apart, when a lock measured from
    its start would be stale. The heartbeat keeps it live: each is refused naming the holder, and host 1's deploy then
    ends as if it had been alone."""
    deploy_control(capsys, shipped, "baseline")
    before = fleet_snapshot(rig, shipped)
    gate = tmp_path / "go-on"
    host1, host2 = (gated_operator_host(tmp_path, rig, name, gate, lock_stale_after_s=1.5) for name in ("host1", "host2"))
    with deploy_held_back(shipped, rig, host1, gate) as deploying:
        for attempt in (["deploy", "--revert"], ["deploy", "--resume"], ["deploy", "--preset", "control", "--image", shipped["digest"],
                                                                         "--reason", "host 2"]):
            time.sleep(2)
            code, _, err = ship_with(capsys, shipped, host2, *attempt, "--break-lock")
            assert code == 12 and "is locked by" in err and "for deploy-" in err and "last renewed" in err, (attempt, err)
            assert deploying.poll() is None, "host 1 is still deploying"
    after = fleet_snapshot(rig, shipped)
    for node in ("a", "b"):
        assert after[node]["records"] == (after["a"]["records"][0], before[node]["records"][0]) and not after[node]["lock"]
        assert after[node]["transition"] is None and after[node]["diverged"] is None
    assert not (host2.parent / ".kvbake" / "deploy" / "journal.json").exists()
    assert_invariant(capsys, shipped, rig, PACKING_ENV)


def test_a_live_deploy_in_another_pid_namespace_of_this_machine_keeps_its_lock_against_break_lock(capsys, shipped, rig, tmp_path):
    """Host 1 deploys as PID 1 of a PID namespace of its own, as in a container of this machine: the same machine id,
    boot id and host name, while PID 1 here is another process. `deploy --revert --break-lock` run here is refused naming
    the live holder, and host 1's deploy then ends as if it had been alone."""
    deploy_control(capsys, shipped, "baseline")
    gate = tmp_path / "go-on"
    host1 = gated_operator_host(tmp_path, rig, "host1", gate)
    with deploy_held_back(shipped, rig, host1, gate, ("unshare", "--pid", "--fork", "--mount-proc", "--kill-child")) as deploying:
        claim = claim_from_labels(Engine(rig["a"].host).container_inspect(LOCK_NAME)["Config"]["Labels"])
        assert claim.pid == 1 and process_start(1) != claim.started, f"PID 1 here is not the holder: {claim}"
        code, _, err = ship(capsys, shipped, "deploy", "--revert", "--break-lock")
        assert code == 12 and f"node spark-a is locked by {claim.owner} for {claim.deploy} (last renewed" in err, err
        assert claim.pid_namespace.startswith("pid:[") and claim.pid_namespace != pid_namespace()
        assert deploying.poll() is None, "host 1 is still deploying"
    assert_invariant(capsys, shipped, rig, PACKING_ENV)


RUNNER = """
import os, signal, sys
from kvbake.engines.adapters.client import Engine
from kvbake.cli import main
original, stopped = Engine.tag, []
def tag_and_stop(self, image_id, reference):
    original(self, image_id, reference)
    if reference.endswith(WHEN) and not stopped:
        stopped.append(reference)
        os.kill(os.getpid(), signal.SIGSTOP)
Engine.tag = tag_and_stop
sys.exit(main(sys.argv[1:]))
"""


def stopped_state(pid: int) -> bool:
    """Whether a process of this machine is stopped by a signal (state T in /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as stat_file:
        return stat_file.read().rpartition(")")[2].split()[0] == "T"


def deploy_stopped_in_a_retag_then_reverted_by_another_host(capsys, shipped, rig, tmp_path, when: str, late: bool, baseline: bool = True):
    """Host 1's deploy of packing over control is stopped by SIGSTOP at its tag of node a's `when` tag (after the tag,
    or, `late`, with the call begun but not yet on the node) for longer than its locks' staleness; host 2 breaks the
    locks and reverts. Host 1 is woken by SIGCONT. Returns the fleet before, as host 2's revert left it, host 1's exit
    code and error, the nodes' audit logs after the revert, and host 2's deployment file. The nodes start new to
    kvbake, so that the baseline deploy records no previous release (without `baseline`, host 1's deploy is the first)."""
    runner = late_runner("Engine", "tag", f"args[2].endswith({when!r})") if late else RUNNER.replace("WHEN", repr(when))
    return deploy_stopped_then_reverted_by_another_host(capsys, shipped, rig, tmp_path, runner, baseline)


def deploy_stopped_then_reverted_by_another_host(capsys, shipped, rig, tmp_path, runner_text: str, baseline: bool = True):
    """As above, with host 1 stopped wherever `runner_text` (a runner that stops itself with SIGSTOP) stops it."""
    reset_nodes(rig, shipped["repository"])
    if baseline:
        deploy_control(capsys, shipped, "baseline")
    before = fleet_snapshot(rig, shipped)
    host1, host2 = (operator_host(tmp_path, rig, name) for name in ("host1", "host2"))
    for path in (host1, host2):
        path.write_text(json.dumps(json.loads(path.read_text()) | {"lock_stale_after_s": 2}))
    shutil.copytree(shipped["deploy"].parent / ".kvbake", host1.parent / ".kvbake")
    runner = tmp_path / "stopper.py"
    runner.write_text(runner_text)
    argv = [sys.executable, str(runner), "deploy", "--preset", "packing-327680", "--image", shipped["digest"], "--reason", "host 1",
            "--manifest", str(shipped["manifest"]), "--deploy", str(host1)]
    (reverted, audits), woken = stopped_while_another_host_reverts(capsys, shipped, rig, argv, host2)
    return before, reverted, woken, audits, host2


def stopped_while_another_host_reverts(capsys, shipped, rig, argv: list[str], host2) -> tuple:
    """Run `argv` (a runner that stops itself with SIGSTOP); once it is stopped and its locks are stale by every node's
    clock, host 2 breaks them and reverts. Then SIGCONT. Returns the fleet and the nodes' audit logs as host 2's revert
    left them, and the woken process's exit code and error."""
    stopped = subprocess.Popen(argv, cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not stopped_state(stopped.pid):
            assert stopped.poll() is None and time.monotonic() < deadline, stopped.communicate()
            time.sleep(0.1)
        time.sleep(3)  # past the stale threshold, by every node's clock
        code, _, err = ship_with(capsys, shipped, host2, "deploy", "--revert", "--break-lock")
        assert code == 0, err
        reverted = fleet_snapshot(rig, shipped, host2)
        audits = node_audits(rig)
        stopped.send_signal(signal.SIGCONT)
        _, err = stopped.communicate(timeout=300)
    finally:
        if stopped.poll() is None:
            stopped.kill()
    return (reverted, audits), (stopped.returncode, err)


def node_audits(rig) -> dict:
    return {key: NodeState(name, Engine(rig[key].host)).read().audit for key, name in (("a", "spark-a"), ("b", "spark-b"))}


def test_a_host_stopped_inside_a_retag_whose_lock_was_broken_writes_nothing_once_woken(capsys, shipped, rig, tmp_path):
    """Stopped between node a's two tags (current moved, previous not yet): woken, host 1 stops at its next write,
    naming the breaker; every node stays exactly as host 2's revert left it, one release on every rank."""
    before, reverted, (code, err), audits, host2 = deploy_stopped_in_a_retag_then_reverted_by_another_host(
        capsys, shipped, rig, tmp_path, ":current", late=False)
    assert code == 12 and "this host no longer holds its lock" in err and "broke it as stale" in err, err
    assert fleet_snapshot(rig, shipped, host2) == reverted
    assert node_audits(rig) == audits
    for node in ("a", "b"):
        assert reverted[node]["records"] == before[node]["records"] and reverted[node]["current"] == before[node]["current"]
        assert not reverted[node]["lock"] and reverted[node]["transition"] is None
    assert_invariant(capsys, shipped, rig, set())


def test_the_one_call_a_stopped_host_had_begun_lands_late_and_the_documented_repair_mends_it(capsys, shipped, rig, tmp_path):
    """Stopped with its tag of node a's `previous` begun but not yet on the node: woken, that one call lands (as
    documented), and the next write stops host 1. What the late tag changed is found and mended by the documented
    command."""
    before, reverted, (code, err), audits, host2 = deploy_stopped_in_a_retag_then_reverted_by_another_host(
        capsys, shipped, rig, tmp_path, ":previous", late=True)
    assert code == 12 and "this host no longer holds its lock" in err and "broke it as stale" in err, err
    after = fleet_snapshot(rig, shipped, host2)
    late = {**reverted, "a": {**reverted["a"], "previous": reverted["a"]["current"]}}
    assert reverted["a"]["previous"] is None and after == late, "the late call moved node a's `previous` tag, and nothing else"
    assert node_audits(rig) == audits
    named = "node spark-a: tag previous points at"
    code, _, err = ship_with(capsys, shipped, host2, "verify-running")
    assert code == 7 and f"{named} {after['a']['previous'][:19]}, but its records name no previous release" in err, err
    code, _, err = ship_with(capsys, shipped, host2, "rollback")
    assert code == 12 and named in err and RESET_TAGS in err, "the stray tag is no rollback target, and the refusal names the repair"
    assert fleet_snapshot(rig, shipped, host2) == late
    code, _, err = ship_with(capsys, shipped, host2, "deploy", "--reset-tags")  # the documented repair
    assert code == 0, err
    assert fleet_snapshot(rig, shipped, host2) == reverted
    assert_invariant(capsys, shipped, rig, set())


def test_a_current_tag_a_stopped_host_had_begun_lands_late_and_the_printed_repair_mends_it(capsys, shipped, rig, tmp_path):
    """Host 1's first deploy to new nodes, stopped with its tag of node a's `current` begun but not yet on the node:
    host 2 breaks its locks and reverts (the nodes new again); woken, that one call lands, so node a holds a `current`
    tag that no record names. verify-running, status and the next deploy name it; the repair the refusal prints removes
    it, a second run changes nothing, and a deploy then works. (A late `current` over a settled release of the same
    image, as a second deploy of one build under another preset, would change no tag.)"""
    before, reverted, (code, err), audits, host2 = deploy_stopped_in_a_retag_then_reverted_by_another_host(
        capsys, shipped, rig, tmp_path, ":current", late=True, baseline=False)
    assert code == 12 and "this host no longer holds its lock" in err and "broke it as stale" in err, err
    after = fleet_snapshot(rig, shipped, host2)
    assert reverted["a"]["current"] is None and after["a"]["current"] is not None, "the late call tagged node a's `current`"
    assert {**after, "a": {**after["a"], "current": None}} == reverted, "and changed nothing else"
    assert node_audits(rig) == audits
    named = f"node spark-a: tag current points at {after['a']['current'][:19]}, but its records name no current release"
    code, _, err = ship_with(capsys, shipped, host2, "verify-running")
    assert code != 0 and named in err, err
    code, out, _ = ship_with(capsys, shipped, host2, "status")
    assert f"STRAY TAG: {named}" in out, out
    code, _, err = ship_with(capsys, shipped, host2, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "after")
    assert code == 12 and named in err and RESET_TAGS in err, err
    assert fleet_snapshot(rig, shipped, host2) == after, "the refused deploy changed nothing"
    repair = re.search(r"python build\.py deploy --reset-tags", err)
    assert repair, err
    code, out, err = ship_with(capsys, shipped, host2, *repair.group(0).split()[2:])
    assert code == 0 and "node spark-a: tag current" in out, out + err
    assert fleet_snapshot(rig, shipped, host2) == reverted
    code, out, err = ship_with(capsys, shipped, host2, "deploy", "--reset-tags")
    assert code == 0 and "nothing changed" in out, out + err
    assert fleet_snapshot(rig, shipped, host2) == reverted == before
    code, _, err = ship_with(capsys, shipped, host2, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "after")
    assert code == 0, err
    assert_invariant(capsys, shipped, rig, set())


def test_a_late_current_tag_is_named_refused_and_reset_from_the_records(capsys, shipped, rig):
    """A `current` tag that lands after the nodes settled (as the late `docker tag` of a stopped host whose lock was
    broken would: here node a's `current` names the base image): status and the next deploy name it, the repair the
    refusal prints puts it back once (a second run changes nothing), and deploy then works."""
    reset_nodes(rig, shipped["repository"])
    deploy_control(capsys, shipped, "baseline")
    settled = fleet_snapshot(rig, shipped)
    node_a = Engine(rig["a"].host)
    stray = node_a.image_id_of(BASE)
    node_a.tag(stray, f"{shipped['repository']}:current")
    named = f"node spark-a: tag current points at {stray[:19]}, but its current record names sha256:"
    code, out, err = ship(capsys, shipped, "status", "--json")
    assert code == 0, err
    assert [line.startswith(named) for line in json.loads(out)["stray_tags"]] == [True], out
    code, out, _ = ship(capsys, shipped, "status")
    assert f"STRAY TAG: {named}" in out and RESET_TAGS in out
    stray_fleet = fleet_snapshot(rig, shipped)
    code, _, err = ship(capsys, shipped, "deploy", "--preset", "packing-327680", "--image", shipped["digest"], "--reason", "after")
    assert code == 12 and named in err, err
    repair = re.search(r"python build\.py deploy --reset-tags", err)
    assert repair, err
    assert fleet_snapshot(rig, shipped) == stray_fleet, "nothing was changed"
    code, out, err = ship(capsys, shipped, *repair.group(0).split()[2:])
    assert code == 0 and f"node spark-a: tag current back at {settled['a']['current'][:19]}, was {stray[:19]}" in out, out + err
    assert fleet_snapshot(rig, shipped) == settled
    code, out, err = ship(capsys, shipped, "deploy", "--reset-tags")
    assert code == 0 and "nothing changed" in out, out + err
    assert fleet_snapshot(rig, shipped) == settled
    code, _, err = ship(capsys, shipped, "deploy", "--preset", "packing-327680", "--image", shipped["digest"], "--reason", "after")
    assert code == 0, err
    assert_invariant(capsys, shipped, rig, PACKING_ENV)


AUDIT_RUNNER = """
import os, signal, sys
from kvbake.ship.adapters.node_locks import LOCK_NAME, pid_namespace, process_start
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.core.lock_claims import claim_from_labels
from kvbake.cli import main
original, stopped = NodeState.write, []
def read_stop_write(self, image, line):
    records = self.read()
    if self.node == "spark-b" and not stopped:  # the break's audit line: the records read, not yet written back
        stopped.append(line)
        os.kill(os.getpid(), signal.SIGSTOP)
    return original(self, image, records, line)
NodeState.append_audit = read_stop_write
sys.exit(main(sys.argv[1:]))
"""


def test_a_host_stopped_while_it_records_a_lock_break_writes_no_old_records_back_once_woken(capsys, shipped, rig, tmp_path):
    """A killed deploy leaves stale locks; host 1's deploy --revert --break-lock is stopped between reading node b's
    records and writing them back with the audit line of its break. Host 2 breaks the locks in turn and reverts. Woken,
    host 1 stops at that write, naming the breaker: node b keeps host 2's records, no journal comes back, and the fleet
    serves the baseline on one release."""
    reset_nodes(rig, shipped["repository"])
    deploy_control(capsys, shipped, "baseline")
    before = fleet_snapshot(rig, shipped)
    host1, host2 = (operator_host(tmp_path, rig, name) for name in ("host1", "host2"))
    for path in (host1, host2):
        path.write_text(json.dumps(json.loads(path.read_text()) | {"lock_stale_after_s": 2}))
    killed_deploy(tmp_path, shipped, host1, 3)  # on host 1, whose journal host 2's revert leaves behind (the fixture's stays clean)
    runner = tmp_path / "audit_stopper.py"
    runner.write_text(AUDIT_RUNNER)
    argv = [sys.executable, str(runner), "deploy", "--revert", "--break-lock", "--manifest", str(shipped["manifest"]), "--deploy", str(host1)]
    (reverted, audits), (code, err) = stopped_while_another_host_reverts(capsys, shipped, rig, argv, host2)
    assert fleet_snapshot(rig, shipped, host2) == reverted, "node b keeps the records host 2 wrote"
    assert node_audits(rig) == audits
    assert code == 12 and "node spark-b: this host no longer holds its lock" in err and "broke it as stale" in err, err
    for node in ("a", "b"):
        assert reverted[node]["records"] == before[node]["records"] and reverted[node]["current"] == before[node]["current"]
        assert reverted[node]["transition"] is None and not reverted[node]["lock"]
    assert_invariant(capsys, shipped, rig, set())


# Host 1 stopped with one write begun: its fence advanced, the call not yet on the node (it lands once woken). OWNER.NAME
# is the call, WHEN (over the call's arguments) picks the one to stop in.
LATE_RUNNER = """
import os, signal, subprocess, sys
from pathlib import Path
from kvbake.engines.adapters.client import Engine
from kvbake.cli import main
owner, name, stopped = OWNER, NAME, []
original = getattr(owner, name)
def stopped_before(*args, **kwargs):
    if not stopped and (WHEN):
        stopped.append(name)
        os.kill(os.getpid(), signal.SIGSTOP)
    return original(*args, **kwargs)
setattr(owner, name, stopped_before)
sys.exit(main(sys.argv[1:]))
"""


def late_runner(owner: str, name: str, when: str) -> str:
    return LATE_RUNNER.replace("OWNER", owner).replace("NAME", repr(name)).replace("WHEN", when)


def test_a_record_write_a_stopped_host_had_begun_lands_late_and_the_documented_repair_mends_it(capsys, shipped, rig, tmp_path):
    """Stopped inside its last write to node a (the record that settles the deploy, the fence advanced), host 1 wakes
    after host 2 broke the locks and reverted: that write lands over the slot of host 2's newest record, so node a
    shows host 1's deploy as interrupted, and `status` names the repair. Every audit line host 2 wrote stays (each
    line is a file of its own), and the repair brings the fleet back to what host 2's revert left."""
    settle_on_a = (f"args[0].label == {rig['a'].host!r} and args[2] == 'kvbake-state' and any("
                   "p.read_text().rstrip().endswith(' done') for p in Path(args[1]).glob('audit.log.*'))")
    before, reverted, (code, err), audits, host2 = deploy_stopped_then_reverted_by_another_host(
        capsys, shipped, rig, tmp_path, late_runner("Engine", "copy_in", settle_on_a))
    assert code == 12 and "node spark-b: this host no longer holds its lock" in err and "broke it as stale" in err, err
    after, audits_after = fleet_snapshot(rig, shipped, host2), node_audits(rig)
    assert after["a"]["transition"] is not None and after["b"] == reverted["b"], "the late record names host 1's deploy"
    assert all(line in audits_after["a"].splitlines() for line in audits["a"].splitlines()), "no line of host 2's is lost"
    assert audits_after["a"].splitlines()[-1].endswith(" reverted"), "the late line sorts by the record it followed"
    assert "broke stale lock" in audits_after["a"] and audits_after["b"] == audits["b"]
    code, out, _ = ship_with(capsys, shipped, host2, "status")
    assert code == 0 and "run deploy --resume or deploy --revert" in out, out
    code, _, err = ship_with(capsys, shipped, host2, "deploy", "--revert")
    assert code == 0, err
    assert fleet_snapshot(rig, shipped, host2) == reverted
    assert_invariant(capsys, shipped, rig, set())


def test_a_launcher_run_a_stopped_host_had_begun_lands_late_and_the_documented_repair_mends_it(capsys, shipped, rig, tmp_path):
    """Stopped just before it runs the launcher for node a (the fence advanced), host 1 wakes after host 2 broke the
    locks and reverted: the launcher recreates node a's serving container with packing's switches over the release the
    records name, and host 1 stops at its next write. verify-running finds the rank that differs and names the repair;
    the redeploy it names mends the fleet. Host 1 names the first broken lock it notices: its next check renews node a's
    lock first, but its heartbeat, stopped between its renewals of a and b, may notice node b's first."""
    launcher_for_a = "(kwargs.get('env') or {}).get('KVBAKE_NODE') == 'spark-a'"
    before, reverted, (code, err), audits, host2 = deploy_stopped_then_reverted_by_another_host(
        capsys, shipped, rig, tmp_path, late_runner("subprocess", "run", launcher_for_a))
    assert code == 12 and re.search(r"node spark-[ab]: this host no longer holds its lock", err) and "broke it as stale" in err, err
    after = fleet_snapshot(rig, shipped, host2)
    assert after["b"] == reverted["b"] and {**after["a"], "serving": None} == {**reverted["a"], "serving": None}, "records and tags stay"
    assert set(after["a"]["serving"][1]) == PACKING_ENV, "the late launcher started packing's switches on node a"
    assert node_audits(rig) == audits
    code, _, err = ship_with(capsys, shipped, host2, "verify-running")
    assert code == 7 and "spark-a: pid 1: switch VLLM_DSV41_KV_PAIR is 3, expected unset" in err and "or redeploy" in err, err
    code, _, err = ship_with(capsys, shipped, host2, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "mend")
    assert code == 0, err
    mended = fleet_snapshot(rig, shipped, host2)
    assert [mended[key]["records"] for key in "ab"] == [reverted[key]["records"] for key in "ab"]
    assert_invariant(capsys, shipped, rig, set())
