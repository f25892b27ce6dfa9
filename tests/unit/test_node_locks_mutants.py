"""A held node lock's renewal: what proves it is still this host's, where its stamp lands, and that a loss sticks; and a
lock whose release could not remove it, which this process holds no longer."""

from __future__ import annotations

from dataclasses import replace

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from kvbake.errors import EngineError, LockLost, RolloutError
from kvbake.ship.adapters import node_locks
from kvbake.ship.adapters.node_locks import HELD_HERE, LOCK_NAME, HeldLocks, NodeLock, holder_gone
from kvbake.ship.core.lock_claims import RENEWAL_DIR, RENEWAL_FILE, LockClaim, broken_name, claim_from_labels, renewed_at

from fake_engine import FakeEngine
from message_words import says
from test_node_locks import STALE, lock_of, no_note, world  # noqa: F401  (world is a fixture)

RENEWAL_PATH = f"/{RENEWAL_DIR}/{RENEWAL_FILE}"
NO_SUCH_PID = 2**22 + 12345  # above Linux's highest PID


class DockerLikeEngine(FakeEngine):
    """A fake node that answers like Docker: inspect names a container with a leading slash, and `docker cp` puts the
    copied folder under the target folder it is given."""

    def container_inspect(self, name: str):
        found = super().container_inspect(name)
        return None if found is None else {**found, "Name": "/" + found["Name"]}

    def copy_in(self, source: Path, container: str, path: str) -> None:
        name = self._name_of(container)
        folder = self.files.setdefault(name, {})
        for item in source.iterdir():
            folder[f"{path.rstrip('/')}/{source.name}/{item.name}"] = item.read_bytes()


def held_lock(engine: FakeEngine) -> NodeLock:
    engine.images.setdefault("base:1", {"Id": "base:1"})  # the lock is created from an image the node holds
    lock = NodeLock("a", engine, STALE, lambda engine, image, line: None)
    lock.acquire("base:1", "deploy-1", False, no_note)
    return lock


def renewal_of(engine: FakeEngine, name: str = LOCK_NAME) -> float:
    return renewed_at(claim_from_labels(engine.containers[name]["Config"]["Labels"]), engine.files[name].get(RENEWAL_PATH))


def test_a_lock_named_the_docker_way_with_a_slash_is_still_held_and_its_renewal_lands_at_the_root():
    engine = DockerLikeEngine("a")
    lock = held_lock(engine)
    engine.clock += 40
    lock.renew()
    assert sorted(engine.files[LOCK_NAME]) == [RENEWAL_PATH]
    assert renewal_of(engine) == engine.clock


def test_a_lock_a_breaker_renamed_away_but_not_yet_removed_is_lost(world):
    lock = lock_of(world)
    lock.acquire("base:1", "deploy-1", False, no_note)
    engine = world.engines["a"]
    engine.rename_container(lock.container_id, broken_name(LOCK_NAME, lock.container_id))
    with pytest.raises(LockLost) as lost:
        lock.renew()
    assert says(lost.value.fix, "status shows it")
    assert lock.token not in HELD_HERE, "this process no longer counts the lock as its own"


def test_a_lock_container_whose_token_was_rewritten_is_lost(world):
    lock = lock_of(world)
    lock.acquire("base:1", "deploy-1", False, no_note)
    world.engines["a"].containers[LOCK_NAME]["Config"]["Labels"]["kvbake.lock.token"] = "other"
    with pytest.raises(LockLost):
        lock.renew()


def test_a_container_whose_name_only_ends_in_the_lock_name_is_not_the_lock(world):
    lock = lock_of(world)
    lock.acquire("base:1", "deploy-1", False, no_note)
    world.engines["a"].rename_container(lock.container_id, "XX" + LOCK_NAME)
    with pytest.raises(LockLost):
        lock.renew()


def test_a_lock_never_taken_is_lost_without_asking_the_node(world):
    lock = lock_of(world)
    world.engines["a"].down = True
    with pytest.raises(LockLost):
        lock.renew()


def test_a_lost_lock_stays_lost_even_when_its_container_comes_back(world):
    lock = lock_of(world)
    lock.acquire("base:1", "deploy-1", False, no_note)
    engine = world.engines["a"]
    held = HeldLocks([lock], 3600)
    try:
        engine.rename_container(lock.container_id, broken_name(LOCK_NAME, lock.container_id))
        with pytest.raises(LockLost):
            held.check()
        engine.rename_container(lock.container_id, LOCK_NAME)
        with pytest.raises(LockLost):
            held.check()
    finally:
        held.release()


# ---- whose holder is gone ----

def claim_here(pid: int, token: str = "t") -> LockClaim:
    """A claim by a process of this machine, in this boot and PID namespace, with that process's own start time."""
    here = node_locks.this_host()
    return LockClaim(token, f"ops@host:{pid}", here.machine, "deploy-1", 0.0, here.boot, here.host, node_locks.process_start(pid) or "",
                     here.pid_namespace)


def test_the_machine_id_is_the_first_non_empty_id_file_stripped(tmp_path, monkeypatch):
    (tmp_path / "empty").write_text("  \n")
    (tmp_path / "id").write_text(" abc123 \n")
    (tmp_path / "later").write_text("later\n")
    monkeypatch.setattr(node_locks, "MACHINE_ID_FILES", tuple(str(tmp_path / n) for n in ("missing", "empty", "id", "later")))
    assert node_locks.machine_id() == "abc123"


def test_without_an_id_file_the_machine_is_known_by_its_host_name(tmp_path, monkeypatch):
    monkeypatch.setattr(node_locks, "MACHINE_ID_FILES", (str(tmp_path / "missing"), str(tmp_path / "empty")))
    (tmp_path / "empty").write_text("")
    assert node_locks.machine_id() == socket.gethostname()


def test_the_pid_namespace_is_the_one_this_process_sees_its_pids_in():
    assert node_locks.pid_namespace() == os.readlink("/proc/self/ns/pid") and node_locks.pid_namespace().startswith("pid:[")


def fake_proc(root: Path, self_pid: int) -> Path:
    """A /proc whose `self` is process `self_pid`, in namespace pid:[9]."""
    (root / str(self_pid) / "ns").mkdir(parents=True)
    (root / str(self_pid) / "ns" / "pid").symlink_to("pid:[9]")
    (root / "self").symlink_to(str(self_pid))
    return root


def test_a_proc_of_another_pid_namespace_or_none_gives_no_namespace(tmp_path, monkeypatch):
    monkeypatch.setattr(node_locks, "PROC", str(fake_proc(tmp_path / "mine", os.getpid())))
    assert node_locks.pid_namespace() == "pid:[9]"
    monkeypatch.setattr(node_locks, "PROC", str(fake_proc(tmp_path / "theirs", os.getpid() + 1)))
    assert node_locks.pid_namespace() == "", "its PIDs are another namespace's"
    monkeypatch.setattr(node_locks, "PROC", str(tmp_path / "missing"))
    assert node_locks.pid_namespace() == ""
    assert node_locks.this_host().pid_namespace == ""


def test_a_holder_of_this_very_process_is_gone_only_once_it_no_longer_holds_the_lock():
    HELD_HERE.add("held-now")
    try:
        assert not node_locks.holder_gone(claim_here(os.getpid(), "held-now"))
    finally:
        HELD_HERE.discard("held-now")
    assert node_locks.holder_gone(claim_here(os.getpid(), "held-now"))


def test_judging_a_live_holder_of_this_machine_finds_it_alive_and_leaves_it_running():
    echo = subprocess.Popen([sys.executable, "-c", "import sys; print(sys.stdin.readline().strip(), flush=True)"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert not node_locks.holder_gone(claim_here(echo.pid))
        echo.stdin.write(b"still here\n")
        echo.stdin.flush()
        assert echo.stdout.readline() == b"still here\n", "the holder was not signalled to stop"
    finally:
        echo.kill()
        echo.wait()
        echo.stdin.close()
        echo.stdout.close()


def test_a_holder_whose_process_no_longer_exists_on_this_machine_is_gone():
    assert node_locks.holder_gone(claim_here(NO_SUCH_PID))


def test_a_holder_that_cannot_be_judged_from_here_is_not_gone():
    here = node_locks.this_host()
    assert not node_locks.holder_gone(LockClaim("t", f"ops@host:{NO_SUCH_PID}", "", "d", 0.0)), "no machine recorded"
    assert not node_locks.holder_gone(LockClaim("t", "ops@host", here.machine, "d", 0.0, here.boot, here.host)), "no pid recorded"
    assert not node_locks.holder_gone(LockClaim("t", f"ops@host:{NO_SUCH_PID}", here.machine, "d", 0.0)), "an earlier kvbake's claim"
    for other in ({"machine": "another-machine"}, {"boot": "another-boot"}, {"host": "another-host"}, {"pid_namespace": "pid:[1]"}):
        theirs = replace(claim_here(NO_SUCH_PID), **other)
        assert not node_locks.holder_gone(theirs), f"{other}: a process of another machine (boot or PID namespace) is never judged here"


def test_two_hosts_sharing_a_machine_id_never_judge_each_others_live_lock_gone():
    """Cloned VMs: the same /etc/machine-id, another host name and boot; the holder's PID does not exist here."""
    theirs = replace(claim_here(NO_SUCH_PID), host="the-clone", boot="its-own-boot")
    assert theirs.machine == node_locks.machine_id() and not node_locks.holder_gone(theirs)


def test_a_holder_whose_pid_another_process_has_now_is_gone():
    holder = subprocess.Popen(["sleep", "30"])
    try:
        assert not node_locks.holder_gone(claim_here(holder.pid))
        reused = replace(claim_here(holder.pid), started="1")  # the PID's start time is not the holder's
        assert node_locks.holder_gone(reused)
    finally:
        holder.kill()
        holder.wait()


# ---- the heartbeat's pace and its end ----

def test_the_heartbeat_beats_three_times_per_stale_period_but_never_faster_than_five_a_second():
    for stale, interval in ((30.0, 10.0), (0.3, 0.2), (0.9, 0.3)):
        held = HeldLocks([], stale)
        held.release()
        assert held.interval == pytest.approx(interval)


def test_every_check_renews_by_the_nodes_clock_however_little_time_this_host_saw_pass(world):
    """A host stopped or suspended, or whose clock jumped back, sees no time pass: the node's clock still counts."""
    lock = lock_of(world)
    lock.acquire("base:1", "deploy-1", False, no_note)
    held = HeldLocks([lock], 3600)
    try:
        world.advance(100)
        held.check()
        assert renewal_of(world.engines["a"]) == world.engines["a"].clock
        world.advance(0.5)
        held.check()
        assert renewal_of(world.engines["a"]) == world.engines["a"].clock
    finally:
        held.release()


def test_releasing_the_held_locks_survives_an_unreachable_node_and_frees_the_others(world):
    locks = [lock_of(world, name) for name in ("a", "b")]
    for lock in locks:
        lock.acquire("base:1", "deploy-1", False, no_note)
    held = HeldLocks(locks, 3600)
    world.engines["a"].down = True
    held.release()
    world.engines["a"].down = False
    assert LOCK_NAME in world.engines["a"].containers and LOCK_NAME not in world.engines["b"].containers


class ScriptedStop:
    """The heartbeat's stop event, answering its waits from a script (False: beat now; True: stop); once the script
    is used up, a wait blocks until `set`, as a real one would."""

    def __init__(self, answers: list[bool]) -> None:
        self.answers = list(answers)
        self.timeouts: list[float | None] = []
        self._set = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.timeouts.append(timeout)
        if self.answers:
            return self.answers.pop(0)
        self._set.wait()
        return True

    def set(self) -> None:
        self._set.set()


class ScriptedLock:
    """A held lock whose renewals answer from a script of errors (None: renewed)."""

    def __init__(self, errors: list[Exception | None]) -> None:
        self.errors = list(errors)
        self.renewals = 0

    def renew(self) -> None:
        self.renewals += 1
        error = self.errors.pop(0) if self.errors else None
        if error is not None:
            raise error

    def release(self) -> None:
        pass


def scripted_stop(monkeypatch, answers: list[bool]) -> ScriptedStop:
    stop = ScriptedStop(answers)
    monkeypatch.setattr(node_locks, "threading", SimpleNamespace(Lock=threading.Lock, Event=lambda: stop, Thread=threading.Thread,
                                                                 current_thread=threading.current_thread))
    return stop


def test_each_beat_renews_every_lock_then_waits_one_interval(monkeypatch):
    stop = scripted_stop(monkeypatch, [False])
    locks = [ScriptedLock([]), ScriptedLock([])]
    held = HeldLocks(locks, 30)
    held.release()
    assert [lock.renewals for lock in locks] == [1, 1]
    assert stop.timeouts[:2] == [10.0, 10.0]


def test_a_beat_that_cannot_reach_a_node_is_logged_and_retried_but_a_lost_lock_ends_the_heartbeat(monkeypatch, caplog):
    stop = scripted_stop(monkeypatch, [False, False, False])
    lock = ScriptedLock([RolloutError("node a: the engine is unreachable", "start it"), LockLost("node a: lost", "status")])
    with caplog.at_level("WARNING", logger=node_locks.__name__):
        held = HeldLocks([lock], 30)
        held.release()
    assert lock.renewals == 2 and len(stop.timeouts) == 2, "no beat after the lock was lost"
    warnings = [record.getMessage() for record in caplog.records if record.name == node_locks.__name__]
    assert len(warnings) == 1 and says(warnings[0], "lock heartbeat") and says(warnings[0], "the engine is unreachable")
    with pytest.raises(LockLost):
        held.check()


def test_the_heartbeat_is_a_named_daemon_thread_that_ends_on_release(monkeypatch):
    scripted_stop(monkeypatch, [])
    held = HeldLocks([], 30)
    beating = held._thread
    held.release()
    assert beating.name == "kvbake-lock-heartbeat" and beating.daemon and not beating.is_alive()


def test_a_lock_this_process_released_but_could_not_remove_has_a_gone_holder(world):
    lock = lock_of(world)
    lock.acquire("base:1", "deploy-1", False, no_note)
    engine = world.engines["a"]
    engine.down = True
    with pytest.raises(EngineError):
        lock.release()
    engine.down = False
    assert holder_gone(claim_from_labels(engine.containers[LOCK_NAME]["Config"]["Labels"]))
