"""An independent dockerd with its own image store and socket, standing in for one serving node."""

from __future__ import annotations

import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from python_on_whales import DockerClient
from python_on_whales.exceptions import DockerException

from kvbake.errors import EngineError, KvbakeError
from kvbake_rig.mounts import unmount_below
from kvbake_rig.processes import Daemon, ProcessRef, log_tail, spawn, wait_until
from kvbake_rig.recipes import EngineRecipe, selected_profile

READY_SECONDS = 30.0
STOP_GRACE_SECONDS = 30.0
SOCKET_PATH_LIMIT = 100  # sun_path holds 108 bytes; containerd adds its own names below the exec root
# A node of its own shared memory: dockerd in a new IPC and mount namespace whose /dev/shm is a tmpfs of its own, so
# that a container of this node started with `--ipc=host` shares memory with the node's other containers only, as on
# a machine of its own. Every engine here shares one kernel: without it, two nodes' `--ipc=host` containers share the
# machine's /dev/shm, and vLLM, which takes ranks that can open each other's segments for ranks of one node, never
# forms a group across them.
OWN_SHM_SCRIPT = 'mount -t tmpfs -o size={size},mode=1777 kvbake-node-shm /dev/shm && exec "$@"'
OWN_SHM_SIZE = "4g"


def _ping(socket_path: Path) -> bool:
    """True when the engine answers GET /_ping on its unix socket."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(1.0)
            conn.connect(str(socket_path))
            conn.sendall(b"GET /_ping HTTP/1.0\r\nHost: engine\r\n\r\n")
            return conn.recv(64).split(b"\r\n", 1)[0].endswith(b" 200 OK")
    except OSError:
        return False


class NodeEngine:
    """Runs `dockerd` on `root/data` with a short runtime folder for its sockets; a context manager.

    `stop()` and `start()` keep the data, so a test can take the node down and bring it back;
    leaving the block (or `close()`) stops the engine and removes every folder it used.
    """

    def __init__(self, root: Path, name: str = "node", recipe: EngineRecipe | None = None, own_shm: bool = False) -> None:
        self.root = root
        self.name = name
        self.own_shm = own_shm
        self.recipe = recipe if recipe is not None else selected_profile()
        self.runtime: Path | None = None
        self.daemon: Daemon | None = None
        self.last_start_seconds: float | None = None
        self.last_stop_seconds: float | None = None

    @property
    def socket_path(self) -> Path:
        """The engine's unix socket."""
        return self._runtime() / "docker.sock"

    @property
    def host(self) -> str:
        """The value for DOCKER_HOST or `DockerClient(host=...)`."""
        return f"unix://{self.socket_path}"

    def client(self, config_dir: Path | None = None) -> DockerClient:
        """A python-on-whales client for this node, optionally with a private login store."""
        return DockerClient(host=self.host, config=str(config_dir) if config_dir else None)

    def _runtime(self) -> Path:
        if self.runtime is None:
            self.runtime = Path(tempfile.mkdtemp(prefix=f"kvbake-{self.name}-"))
            if len(str(self.runtime / "exec" / "containerd" / "containerd.sock.ttrpc")) > SOCKET_PATH_LIMIT:
                raise EngineError(
                    f"runtime folder {self.runtime} is too long for unix sockets", fix="set TMPDIR to a short path"
                )
        return self.runtime

    def _argv(self) -> list[str]:
        runtime = self._runtime()
        config = self.root / "daemon.json"
        if not config.exists():
            config.write_text(self.recipe.daemon_json() if self.recipe else "{}\n")
        own_shm = ["unshare", "--ipc", "--mount", "--propagation", "private", "--", "sh", "-c",
                   OWN_SHM_SCRIPT.format(size=OWN_SHM_SIZE), "sh"] if self.own_shm else []
        return [
            *own_shm,
            self.recipe.dockerd if self.recipe else "dockerd",
            "--config-file", str(config),
            "--data-root", str(self.root / "data"),
            "--exec-root", str(runtime / "exec"),
            "--pidfile", str(runtime / "docker.pid"),
            "--host", self.host,
            "--bridge=none",
            "--iptables=false",
            "--ip-forward=false",
        ]

    def start(self) -> float:
        """Start the engine (again, on the same data) and wait until `docker info` answers."""
        if self.daemon is not None and not self.daemon.exited():
            raise EngineError(f"{self.name} is already running", fix="stop it before starting it again")
        self.root.mkdir(parents=True, exist_ok=True)
        began = time.monotonic()
        daemon = spawn(self._argv(), self.root / "dockerd.log", env=self.recipe.env() if self.recipe else None)
        self.daemon = daemon
        ready = wait_until(lambda: daemon.exited() or _ping(self.socket_path), READY_SECONDS)
        if not ready or daemon.exited():
            raise EngineError(
                f"{self.name} engine did not come up: {log_tail(self.root / 'dockerd.log')}",
                fix="read the dockerd log next to the node's data folder",
            )
        try:
            self.client().info()
        except DockerException as err:
            raise EngineError(
                f"{self.name} engine answers ping but not `docker info`", fix="read the dockerd log"
            ) from err
        self.last_start_seconds = time.monotonic() - began
        return self.last_start_seconds

    def stop(self) -> float:
        """Stop the engine (SIGTERM, wait, SIGKILL) and release anything it left mounted; data stays."""
        began = time.monotonic()
        if self.daemon is not None:
            self.daemon.stop(STOP_GRACE_SECONDS)
            self.daemon = None
        if self.runtime is not None:
            _stop_orphaned_containerd(self.runtime)
            unmount_below(self.runtime)
        unmount_below(self.root)
        self.last_stop_seconds = time.monotonic() - began
        return self.last_stop_seconds

    def close(self) -> None:
        """Stop the engine and remove its data and runtime folders."""
        self.stop()
        if self.runtime is not None:
            shutil.rmtree(self.runtime, ignore_errors=True)
            self.runtime = None
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> NodeEngine:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def to_state(self) -> dict[str, Any]:
        """Plain form for the rig's state file."""
        assert self.daemon is not None and self.runtime is not None
        return {
            "name": self.name,
            "host": self.host,
            "profile": self.recipe.name if self.recipe else None,
            "root": str(self.root),
            "runtime": str(self.runtime),
            "process": self.daemon.ref.to_json(),
        }


def _stop_orphaned_containerd(runtime: Path) -> None:
    """End the engine's own containerd if a killed dockerd left it behind."""
    pid_file = runtime / "exec" / "containerd" / "containerd.pid"
    try:
        pid = int(pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except (FileNotFoundError, ValueError):
        return
    if str(runtime) in cmdline:
        try:
            Daemon(ref=ProcessRef.of(pid)).stop()
        except KvbakeError:
            return  # it ended on its own meanwhile


def close_from_state(state: dict[str, Any]) -> None:
    """Stop and remove a node engine that another process started, from its `to_state` record."""
    node = NodeEngine(Path(state["root"]), name=state["name"])
    node.runtime = Path(state["runtime"])
    node.daemon = Daemon(ref=ProcessRef.from_json(state["process"]))
    node.close()
