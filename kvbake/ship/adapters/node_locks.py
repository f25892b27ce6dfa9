"""Adapter: each node's owned lock, a marker container holding an owner token, renewed by a heartbeat while held."""

# Why two hosts never both hold a node's lock: ARCHITECTURE.md, "Node locks".

from __future__ import annotations

import contextlib
import getpass
import logging
import os
import secrets
import socket
import tempfile
import threading
from pathlib import Path
from typing import Callable

from kvbake.engines.adapters.client import Engine
from kvbake.errors import EngineError, KvbakeError, LockLost, RolloutError
from kvbake.ship.adapters.node_fence import FencedEngine, NodeFence
from kvbake.ship.core.lock_claims import (RENEWAL_DIR, RENEWAL_FILE, HostIdentity, LockClaim, broken_name, claim_from_labels, holder_is_gone,
                                          is_stale, node_epoch, renewal_bytes, renewed_at, start_time)

log = logging.getLogger(__name__)
LOCK_NAME = "kvbake-lock"
MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")
BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
PROC = "/proc"
HELD_HERE: set[str] = set()  # the tokens of the locks this process holds now


def who() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}:{os.getpid()}"


def machine_id() -> str:
    """This machine's id (systemd's machine-id), else its host name: a lock whose holder ran here can be judged by PID."""
    for path in MACHINE_ID_FILES:
        with contextlib.suppress(OSError):
            text = Path(path).read_text().strip()
            if text:
                return text
    return socket.gethostname()


def boot_id() -> str:
    """This boot's id (the kernel's), or "" where there is none."""
    with contextlib.suppress(OSError):
        return Path(BOOT_ID_FILE).read_text().strip()
    return ""


def pid_namespace() -> str:
    """This process's PID namespace (`pid:[inode]`), or "" where it cannot be read or where /proc shows another
    namespace's processes (its `self` is not this process's PID): PIDs are looked up in /proc, so only a /proc of this
    namespace can judge them."""
    with contextlib.suppress(OSError):
        if os.readlink(f"{PROC}/self") == str(os.getpid()):
            return os.readlink(f"{PROC}/self/ns/pid")
    return ""


def this_host() -> HostIdentity:
    return HostIdentity(machine_id(), boot_id(), socket.gethostname(), pid_namespace())


def process_start(pid: int) -> str | None:
    """When a process of this machine started (clock ticks since boot), or None when there is no such process."""
    try:
        return start_time(Path(f"{PROC}/{pid}/stat").read_text())
    except OSError:
        return None


def holder_gone(claim: LockClaim) -> bool:
    """True only when the holder is known gone: a process of this machine, boot and PID namespace that no longer exists
    (or whose PID another process has now), or an earlier command of this very process (one that embeds kvbake and runs
    commands one after another) that no longer holds it."""
    return holder_is_gone(claim, this_host(), os.getpid(), claim.token in HELD_HERE, process_start)


class NodeLock:
    """One node's lock: taken by an atomic create, renewed by its owner only, released by its container ID."""

    def __init__(self, node: str, engine: Engine, stale_after_s: float, audit: Callable[[Engine, str, str], None]) -> None:
        self.node = node
        self.engine = engine
        self.stale_after_s = stale_after_s
        self.audit = audit  # (engine, image, line): one line in the node's audit log, written through `engine`
        self.token = secrets.token_hex(16)
        self.container_id: str | None = None
        self.fence = NodeFence(node, engine, self.prove_held)

    def now(self) -> float:
        return node_epoch(self.engine.system_time())

    def acquire(self, image: str, deploy_id: str, break_stale: bool, describe_holder: Callable[[LockClaim], str]) -> None:
        """Take the lock, or break a stale one when asked (a compare-and-swap on the node) and take it then. A live lock
        is refused, naming its holder and its last renewal; `describe_holder` adds what the node knows of that deploy.
        Once taken, the node's write fence is claimed: a host that held the lock before writes nothing more."""
        if self._create(image, deploy_id):
            self.fence.claim()
            return
        found = self._read()
        if found is None:
            if self._create(image, deploy_id):
                self.fence.claim()
                return
            raise RolloutError(f"node {self.node}: another deploy took the lock", "retry later")
        container_id, claim, renewed = found
        now = self.now()
        age = now - renewed
        gone = holder_gone(claim)
        if not is_stale(renewed, now, self.stale_after_s, gone):
            raise RolloutError(f"node {self.node} is locked by {claim.owner} for {claim.deploy or 'a deploy'} (last renewed {int(age)} s ago, "
                               f"stale after {self.stale_after_s:g} s without renewal){describe_holder(claim)}",
                               "wait for that deploy to finish; two deploys never run at once")
        why = "its process is gone" if gone else f"not renewed for {int(age)} s"
        if not break_stale:
            raise RolloutError(f"node {self.node} holds a stale lock from {claim.owner} ({claim.deploy}, {why})",
                               "check that no deploy is running, then pass --break-lock (it is recorded in the audit log)")
        self._break(image, deploy_id, container_id, claim, why)

    def _break(self, image: str, deploy_id: str, container_id: str, claim: LockClaim, why: str) -> None:
        """Rename the stale lock away, take the lock, and only then record the break, through the node's fence: the
        node's records are read and written whole, so a write without its lock (or one made after a pause in which
        another host broke this lock in turn) could put back what another holder changed since."""
        if not self.engine.rename_container(container_id, broken_name(LOCK_NAME, container_id)):
            raise RolloutError(f"node {self.node}: another host broke the stale lock of {claim.owner} first", "retry later")
        taken = self._create(image, deploy_id)
        self.engine.remove_container(container_id)
        if not taken:
            raise RolloutError(f"node {self.node}: another deploy took the lock", "retry later")
        self.fence.claim()
        self.audit(FencedEngine(self.engine, self.fence), image, f"broke stale lock of {claim.owner} (deploy {claim.deploy}, {why})")

    def _create(self, image: str, deploy_id: str) -> bool:
        here = this_host()
        claim = LockClaim(self.token, who(), here.machine, deploy_id, self.now(), here.boot, here.host, process_start(os.getpid()) or "",
                          here.pid_namespace)
        created = self.engine.create_marker(image, LOCK_NAME, claim.labels())
        if created is None:
            return False
        self.container_id = created
        HELD_HERE.add(self.token)
        return True

    def _read(self) -> tuple[str, LockClaim, float] | None:
        """The lock container's ID, claim and last renewal (node clock), or None when there is no lock."""
        inspect = self.engine.container_inspect(LOCK_NAME)
        if inspect is None:
            return None
        claim = claim_from_labels((inspect.get("Config") or {}).get("Labels"))
        return str(inspect["Id"]), claim, renewed_at(claim, self._renewal(str(inspect["Id"])))

    def _renewal(self, container_id: str) -> bytes | None:
        with tempfile.TemporaryDirectory(prefix="kvbake-lock-") as tmp:
            target = Path(tmp) / "r"
            if not self.engine.copy_out(container_id, f"/{RENEWAL_DIR}/{RENEWAL_FILE}", target):
                return None
            return target.read_bytes() if target.is_file() else None

    def prove_held(self) -> None:
        """LockLost, naming the host that holds the lock now, unless the lock is still this host's (its container still
        carries the lock's name and this token)."""
        if self.container_id is None:
            raise LockLost(f"node {self.node}: this host no longer holds its lock (it released it, or never took it)", "take it first; nothing was written")
        inspect = self.engine.container_inspect(self.container_id)
        labels = ((inspect or {}).get("Config") or {}).get("Labels")
        if inspect is None or str(inspect.get("Name", "")).lstrip("/") != LOCK_NAME or claim_from_labels(labels).token != self.token:
            HELD_HERE.discard(self.token)
            raise LockLost(f"node {self.node}: this host no longer holds its lock: {self.holder_now()}",
                           "this host wrote nothing more; the host that holds the lock now finishes or undoes the transition "
                           "(python build.py status shows it)")

    def holder_now(self) -> str:
        """Who holds the node's lock now, as a lost holder is told."""
        found = self.engine.container_inspect(LOCK_NAME)
        if found is None:
            return "another host broke it as stale, and no host holds it now"
        claim = claim_from_labels((found.get("Config") or {}).get("Labels"))
        return f"{claim.owner} broke it as stale and holds it for {claim.deploy or 'a deploy'}"

    def renew(self) -> None:
        """Prove the lock is still this host's, then stamp the renewal with the node's clock. A lock another host broke
        is LockLost."""
        self.prove_held()
        with tempfile.TemporaryDirectory(prefix="kvbake-lock-") as tmp:
            folder = Path(tmp) / RENEWAL_DIR
            folder.mkdir()
            (folder / RENEWAL_FILE).write_bytes(renewal_bytes(self.token, self.now()))
            try:
                self.engine.copy_in(folder, self.container_id, "/")
            except EngineError:
                self.prove_held()  # a lock broken meanwhile is LockLost; else the node did fail
                raise

    def release(self) -> None:
        """Remove this host's lock container by its ID: a lock another host holds now has another ID and stays."""
        HELD_HERE.discard(self.token)
        if self.container_id:
            self.engine.remove_container(self.container_id)
            self.container_id = None


class HeldLocks:
    """Every node's lock while a transition runs: a heartbeat renews them; `check` proves they are still held."""

    def __init__(self, locks: list[NodeLock], stale_after_s: float) -> None:
        self.locks = locks
        self.interval = max(0.2, stale_after_s / 3)
        self._lost: LockLost | None = None
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="kvbake-lock-heartbeat", daemon=True)
        self._thread.start()

    def _renew_all(self) -> None:
        with self._mutex:
            if self._lost is not None:
                raise self._lost
            try:
                for lock in self.locks:
                    lock.renew()
            except LockLost as err:
                self._lost = err
                raise

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._renew_all()
            except LockLost:
                return
            except KvbakeError as err:  # a node briefly unreachable: the next beat tries again; check() decides
                log.warning("lock heartbeat: %s", err.one_line())

    def check(self) -> None:
        """Raise LockLost when any lock was broken: every lock is renewed now, so what decides is the node's own record
        of its lock, never this host's clock (which a pause, a suspend or a clock jump may have left behind)."""
        if self._lost is not None:
            raise self._lost
        self._renew_all()

    def fenced(self, engines: dict[str, Engine]) -> dict[str, Engine]:
        """The nodes' engines with every write fenced by this host's claim on each node."""
        fences = {lock.node: lock.fence for lock in self.locks}
        return {name: FencedEngine(engine, fences[name]) if name in fences else engine for name, engine in engines.items()}  # type: ignore[misc]

    def release(self) -> None:
        """Stop the heartbeat, then release every lock this host still holds; best effort: a lock left on an
        unreachable node goes stale and is broken with --break-lock."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
        for lock in self.locks:
            try:
                lock.release()
            except (KvbakeError, EngineError):
                pass
