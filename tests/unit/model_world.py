"""The world of the rollout model: two fake nodes seen from two operator hosts, one fault at a chosen call of a step."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

import kvbake.ship.adapters.transitions as transitions
from kvbake.deployfile import Deployment, Launcher, Node, Readiness
from kvbake.errors import EngineError, KvbakeError, RolloutError
from kvbake.ship.adapters import adoption, basesync, node_locks, nodestate, rollout
from kvbake.ship.adapters.fleet import Fleet
from kvbake.ship.adapters.node_locks import HELD_HERE, HeldLocks, NodeLock
from kvbake.ship.core.fencing import FENCE_PREFIX

from engine_state_changes import STATE_CHANGING_CALLS
from fake_engine import FakeEngine
from fake_fleet import BASE, CONTAINER, CONTROL, OTHER, PACKING, REPO

HOSTS = ("h0", "h1")
NODES = ("a", "b")
STALE = 900.0
RELEASES = (CONTROL, PACKING, OTHER)
BASE_NAME = "base:1"
BASE_PINNED = f"{REPO}@sha256:{'b' * 64}"
READINESS = Readiness("http://10.0.0.1:8000/health", 200, 600, 5)
# The engine calls kvbake makes on a node that a fault may hit (run_serving is the launcher's own `docker run`).
FAULT_METHODS = ("tag", "untag", "pull", "image_id_of", "inspect_image", "create_marker", "rename_container", "container_inspect",
                 "remove_container", "copy_in", "copy_out", "start", "stop", "recreate", "set_restart_policy", "exec_detached",
                 "system_time", "processes", "run_serving")
# The modules that read the operator host's wall clock (journal names, audit stamps, release records): a jump moves it.
HOST_CLOCK_READERS = (adoption, nodestate, rollout)
ACTIVE: list["World"] = []  # the world the patched launcher, readiness probe and lock spies act on (a copy while a repair is tried)


class Killed(BaseException):
    """The operator host's process dies at this call: no cleanup of it runs and its node locks stay held."""


@dataclass(frozen=True)
class Fault:
    """One fault of a step: where (`a.copy_in`, `a.*` for any call to node a, `a.tag:current` for its calls that move
    its `current` tag, `journal`, `ready`, `guard`, or `b:packing` for a launcher that fails on that node for that preset), at which call of it, and what happens (kill, error, lost,
    timeout, launcher, pause-revert, pause-resume, pause-deploy, late-revert, late-resume, late-deploy, meanwhile-revert,
    meanwhile-resume, meanwhile-deploy)."""

    where: str
    nth: int
    kind: str


class NodeProxy:
    """A node's engine as kvbake sees it: every call named in FAULT_METHODS first passes the world's fault point."""

    def __init__(self, world: "World", node: str, fake: FakeEngine) -> None:
        self._world, self._node, self._fake = world, node, fake

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._fake, name)
        if name not in FAULT_METHODS:
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            # which calls are writes comes from the tests' own list: kvbake's (fencing.WRITES) is what the model checks
            self._world.at(f"{self._node}.{name}", between_writes=name not in STATE_CHANGING_CALLS or fence_rename(name, args),
                           also=current_tag_call(self._node, name, args))
            return attr(*args, **kwargs)

        return call


def current_tag_call(node: str, method: str, args: tuple) -> str | None:
    """`a.tag:current` for a call that points node a's `current` tag at an image: a fault may pick that call alone."""
    return f"{node}.tag:current" if method == "tag" and len(args) > 1 and str(args[1]).endswith(":current") else None


def fires_here(kind: str, between_writes: bool) -> bool:
    """Whether a fault of `kind` may fire at a call that is (or is not) between two writes."""
    if kind.startswith("pause-"):
        return between_writes
    if kind.startswith("late-"):
        return not between_writes
    return True


def fence_rename(method: str, args: tuple) -> bool:
    """Whether a call advances a node's fence: a pause before it is a pause between two writes."""
    return method == "rename_container" and len(args) > 1 and str(args[1]).startswith(FENCE_PREFIX)


def fresh_node(name: str) -> FakeEngine:
    """A node holding the base (as base sync leaves it) whose registry serves the three releases and the base."""
    engine = FakeEngine(name)
    base = {"Id": "sha256:base", "RootFS": {"Layers": list(BASE)}, "Config": {"Labels": {}, "Env": []}}
    engine.images["sha256:base"], engine.tags[BASE_NAME], engine.registry[BASE_PINNED] = base, "sha256:base", base
    for r in RELEASES:
        engine.registry[r.image] = {"Id": r.config_digest, "RootFS": {"Layers": list(r.layers)}, "Config": {"Labels": dict(r.labels), "Env": []}}
    return engine


class World:
    """Both nodes (fakes, and the proxies kvbake is given), each host's fleet and state folder, and the armed fault."""

    def __init__(self, folder: Path, start: str, fakes: dict[str, FakeEngine] | None = None) -> None:
        self.folder, self.start = folder, start
        self.fakes = fakes or {name: fresh_node(name) for name in NODES}
        self.engines = {name: NodeProxy(self, name, fake) for name, fake in self.fakes.items()}
        nodes = (Node("a", "unix:///a", "head", "10.0.0.1"), Node("b", "unix:///b", "worker", "10.0.0.2"))
        self.fleets = {host: Fleet(Deployment(folder / host / "deploy.yaml", nodes, Launcher(("launch",), CONTAINER, 10), STALE, start,
                                              READINESS), self.engines, REPO, ("S",), ("/src/x.py",), "/src") for host in HOSTS}
        self.fault: Fault | None = None
        self.calls: Counter[str] = Counter()
        self.acting: str | None = None
        self.dying = False
        self.locks: dict[str, list[NodeLock]] = {host: [] for host in HOSTS}
        self.failing_launch: set[str] = set()
        self.violations: list[str] = []
        self.unadopted: dict[str, str] = {}  # node -> the ID of the serve it ran before kvbake, if any
        self.release_interrupted: set[str] = set()  # nodes where an `adopt --release` may have stopped half-way
        self.settled: set[str] = set()  # the journals whose transition was finished or undone on every node
        self.rewalked: list[str] = []  # journals walked again once settled
        self.host_clock = 0.0  # how far the acting host's own clock (the heartbeat's) jumped, in seconds
        self.audit_marks: list[dict] = []  # each node's audit lines as the other host left them, mid-step

    def state_dir(self, host: str) -> Path:
        return self.fleets[host].deployment.state_dir

    def serve_unadopted(self, shape: str, auto_remove: bool) -> None:
        """Each node runs a serve kvbake did not deploy: the base image, S=3 by hand, vLLM as its main process or by
        `docker exec` beside `sleep infinity`, kept or --rm."""
        host = {"AutoRemove": True} if auto_remove else {"RestartPolicy": {"Name": "unless-stopped", "MaximumRetryCount": 0}}
        for name, engine in self.fakes.items():
            if shape == "exec":
                engine.run_serving(CONTAINER, BASE_NAME, ["LANG=C"], main=("sleep", "infinity"), host=host)
                engine.exec_detached(CONTAINER, ["python3", "/usr/local/bin/vllm", "serve", "/models/m", "--max-model-len", "4096"],
                                     {"S": "3"}, "/srv", "1000")
                processes = engine.containers[CONTAINER]["Processes"]
                engine.containers[CONTAINER]["Processes"] = (processes[0], *processes[2:])
            else:
                engine.run_serving(CONTAINER, BASE_NAME, ["S=3"], host=host)
            self.unadopted[name] = engine.containers[CONTAINER]["Id"]

    # ---- one operator command, with at most one fault ----

    def run(self, host: str, command: Callable[[Fleet], object], fault: Fault | None = None) -> KvbakeError | str | None:
        """Run one command from `host`: None when it succeeded, its error, or "killed". Any other exception is a bug, and so
        is a kvbake error that exits 1 (the code kvbake keeps for unexpected failures)."""
        self.fault, self.calls, self.acting, self.dying = fault, Counter(), host, False
        self.failing_launch = {fault.where} if fault and fault.kind == "launcher" else set()
        try:
            command(self.fleets[host])
            return None
        except Killed:
            HELD_HERE.difference_update(lock.token for lock in self.locks[host])  # its process is gone
            return "killed"
        except KvbakeError as err:
            assert err.exit_code > 1, f"{type(err).__name__} exits {err.exit_code}: {err}"
            return err
        finally:
            self.fault, self.failing_launch, self.locks[host], self.acting, self.dying = None, set(), [], None, False

    def at(self, where: str, held: HeldLocks | None = None, between_writes: bool = True, also: str | None = None) -> None:
        """A fault point: fire the armed fault at its chosen call. A pause (`pause-*`) fires only between two writes
        (before a read, or before the fence's advance that opens a write); a late write (`late-*`) only inside one,
        after its fence advanced: the write the host had begun lands once it goes on. `also` is a narrower name of the
        same call (`a.tag:current`), which a fault may pick instead."""
        if self.locks[HOSTS[0]] and self.locks[HOSTS[1]]:
            self.violations += lock_violations(self)
        fault = self.fault
        node, _, method = where.partition(".")
        if fault is None or fault.where not in (where, f"{node}.*", also) or not fires_here(fault.kind, between_writes):
            return
        self.calls[fault.where] += 1
        if self.calls[fault.where] != fault.nth:
            return
        self.fault = None
        if fault.kind == "kill":
            self.dying = True
            raise Killed(where)
        if fault.kind == "lost":
            self.fakes[node].down = True  # the call itself fails like every later one, until the node is brought back
        elif fault.kind == "error":
            raise EngineError(f"{node}: the engine refused {method} (injected)", "retry")
        elif fault.kind == "timeout":
            raise RolloutError(f"the serve never became ready: GET {READINESS.url} answered 503, not 200, within 600 s",
                               "check the launcher and the readiness URL in the deployment file; every node was reverted")
        elif fault.kind.startswith(("pause-", "late-")):
            self.pause(fault.kind.partition("-")[2], fault.nth)
        elif fault.kind.startswith("meanwhile-"):
            self.meanwhile(fault.kind.removeprefix("meanwhile-"))

    def pause(self, what: str, nth: int) -> None:
        """The acting host stops here (suspended, or stopped by a signal) for longer than the locks' staleness by the
        nodes' clocks; meanwhile the other host runs `what` with --break-lock. Then the acting host goes on, its own clock
        having jumped ahead, not moved, or jumped back (by the fault's call count): only the nodes' fences stop it."""
        for fake in self.fakes.values():
            fake.clock += STALE + 1
        self.host_clock += (2 * STALE, 0.0, -2 * STALE)[nth % 3]
        self.meanwhile(what)

    def meanwhile(self, what: str) -> None:
        """The other host runs `what` (revert, resume, or a deploy of OTHER) with --break-lock to its end, between two
        calls of the acting host; a live lock refuses it. Then the acting host goes on."""
        from model_commands import deploy, recover  # the commands import this module

        acting, other = self.acting, next(h for h in HOSTS if h != self.acting)
        kind = next((str(t.get("kind")) for t in (node_transition(self, n) for n in NODES) if t), "deploy")
        command = deploy(OTHER, True) if what == "deploy" else recover(what, "adopt" if kind == "adopt" else "deploy", True)
        try:
            self.acting = other
            command(self.fleets[other])
        except KvbakeError as err:
            assert err.exit_code > 1, f"{type(err).__name__} exits {err.exit_code}: {err}"
        finally:
            self.locks[other], self.acting = [], acting
            self.audit_marks.append(audit_mark(self))

    # ---- copies, for trying a repair without touching this world ----

    def copy(self) -> "World":
        folder = Path(tempfile.mkdtemp(prefix="kvbake-model-"))
        shutil.copytree(self.folder, folder, dirs_exist_ok=True)
        twin = World(folder, self.start, copy.deepcopy(self.fakes))
        twin.unadopted, twin.release_interrupted, twin.settled = dict(self.unadopted), set(self.release_interrupted), set(self.settled)
        return twin


def audit_mark(world: World) -> dict:
    from model_oracle import audit_lines  # the oracle reads the fakes' state files

    return {node: audit_lines(world, node) for node in NODES}


def node_transition(world: World, node: str) -> dict | None:
    from model_oracle import records  # the oracle reads the fakes' state files

    return dict(records(world, node).transition or {}) or None


def lock_violations(world: World) -> list[str]:
    """Every node whose `kvbake-lock` container more than one live lock object (of any host) owns by ID and token."""
    found = []
    for node, fake in world.fakes.items():
        container = fake.containers.get(node_locks.LOCK_NAME) or {}
        token = ((container.get("Config") or {}).get("Labels") or {}).get("kvbake.lock.token")
        owners = [host for host in HOSTS for lock in world.locks[host]
                  if lock.node == node and lock.container_id == container.get("Id") and lock.token == token]
        if len(owners) > 1:
            found.append(f"node {node}: the lock is held by {', '.join(owners)} at once")
    return found


def active() -> World:
    return ACTIVE[-1]


@contextmanager
def acting_on(world: World) -> Iterator[World]:
    ACTIVE.append(world)
    try:
        yield world
    finally:
        ACTIVE.pop()


class LauncherProcess:
    """Stands in for `subprocess` in transitions: the operator's launcher, which (re)creates the node's serving
    container from the files and variables kvbake gives it, or exits 1 when the step's fault makes it fail."""

    TimeoutExpired = subprocess.TimeoutExpired

    @staticmethod
    def run(argv: list[str], env: dict[str, str], **_: Any) -> subprocess.CompletedProcess:
        world, node = active(), env["KVBAKE_NODE"]
        if f"{node}:{env['KVBAKE_PRESET']}" in world.failing_launch:
            return subprocess.CompletedProcess(argv, 1, "", "GPU busy")
        switches = [line for line in Path(env["KVBAKE_ENV_FILE"]).read_text().splitlines() if line and not line.startswith("#")]
        try:
            world.engines[node].run_serving(env["KVBAKE_CONTAINER"], env["KVBAKE_IMAGE"], switches,
                                            tuple(json.loads(env["KVBAKE_LAUNCHER_ARGS_JSON"])))
        except EngineError as err:
            return subprocess.CompletedProcess(argv, 125, "", err.message)
        return subprocess.CompletedProcess(argv, 0, "", "")


def ready(readiness: Readiness, dead_rank: Callable[[], str | None], **_: Any) -> float:
    """The readiness probe: ready at once unless a rank died, or the step's fault makes it time out."""
    active().at("ready")
    dead = dead_rank()
    if dead:
        raise RolloutError(f"the serve died before it was ready: {dead}", "read the container's log on that node; every node was reverted")
    return 0.0


class JumpedClock:
    """The `time` module as the acting host sees it: its wall clock moved by how far it jumped (a monotonic clock never
    jumps, and stands still while the host is stopped)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def time(self) -> float:
        return time.time() + active().host_clock

    def gmtime(self, seconds: float | None = None) -> time.struct_time:
        return time.gmtime(self.time() if seconds is None else seconds)


@contextmanager
def patched() -> Iterator[None]:
    """The launcher, the readiness probe, the registry side of base sync and each host's identity (machine id, user@host) are faked; the
    journal writes and the node locks are watched (a fault point, and who holds what). Nothing else is replaced."""
    write_journal, settle, lock_init = transitions.write_journal, transitions.settle, NodeLock.__init__
    check, release = HeldLocks.check, HeldLocks.release

    def journal_then_fault(folder: Path, journal: Any) -> None:
        if journal.id in active().settled:
            active().rewalked.append(f"{active().acting} walks {journal.kind} {journal.id} ({journal.phase}) again, once settled")
        write_journal(folder, journal)
        active().at("journal")

    def settled_then_noted(fleet: Fleet, journal: Any, folder: Path, outcome: str) -> None:
        settle(fleet, journal, folder, outcome)
        active().settled.add(journal.id)

    def watched_lock(self: NodeLock, *args: Any, **kwargs: Any) -> None:
        lock_init(self, *args, **kwargs)
        active().locks[str(active().acting)].append(self)

    def checked(self: HeldLocks) -> None:
        active().at("guard", self)
        check(self)

    def released(self: HeldLocks) -> None:
        if not active().dying:
            return release(self)
        self._stop.set()  # the process died: its heartbeat stopped with it, and no lock was released
        self._thread.join()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transitions, "subprocess", LauncherProcess)
        patch.setattr(transitions, "wait_until_ready", ready)
        patch.setattr(transitions, "write_journal", journal_then_fault)
        patch.setattr(transitions, "settle", settled_then_noted)
        patch.setattr(node_locks, "machine_id", lambda: f"machine-{active().acting}")
        for module in HOST_CLOCK_READERS:
            patch.setattr(module, "time", JumpedClock())
        patch.setattr(node_locks, "who", lambda: f"ops@{active().acting}:{os.getpid()}")
        patch.setattr(transitions, "who", lambda: f"ops@{active().acting}:{os.getpid()}")
        patch.setattr(NodeLock, "__init__", watched_lock)
        patch.setattr(HeldLocks, "check", checked)
        patch.setattr(HeldLocks, "release", released)
        patch.setattr(basesync, "connect", lambda deployment: dict(active().engines))
        patch.setattr(basesync, "registry_copy", lambda *args: (BASE_PINNED, False))
        yield
