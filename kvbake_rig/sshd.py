"""A private sshd on loopback that makes a node engine reachable as ssh://root@127.0.0.1:PORT."""

# OpenSSH reads the user's config from the passwd home directory and ignores $HOME, and the docker
# CLI runs plain `ssh`. So the client side is a folder with its own key, known_hosts and config, plus
# a `bin/ssh` that runs the real ssh with `-F` that config; put that folder first on PATH (see
# `SshClientFiles.env`). Host keys stay checked: each server's key is written to known_hosts.
# On the server side `SetEnv DOCKER_HOST=...` points `docker system dial-stdio` at the node's socket.

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from python_on_whales import DockerClient

from kvbake.errors import EngineError
from kvbake_rig.ports import LOOPBACK, accepts_connections, free_port
from kvbake_rig.processes import Daemon, ProcessRef, log_tail, spawn, wait_until

SSHD_BINARY = "/usr/sbin/sshd"
SFTP_SERVER = "/usr/lib/openssh/sftp-server"
PRIVSEP_DIR = Path("/run/sshd")
READY_SECONDS = 10.0
CONTROL_DIR = "/tmp"


def _keygen(key: Path, comment: str) -> None:
    if not key.exists():
        argv = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(key)]
        subprocess.run(argv, check=True, capture_output=True)


def _real_ssh(excluded: Path) -> str:
    search = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if Path(p) != excluded)
    found = shutil.which("ssh", path=search)
    if found is None:
        raise EngineError("no ssh client on PATH", fix="install openssh-client")
    return found


@dataclass(frozen=True)
class SshClientFiles:
    """The client side: key, known_hosts, config and the `ssh` wrapper folder to put first on PATH."""

    root: Path

    @property
    def key(self) -> Path:
        return self.root / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.root / "known_hosts"

    @property
    def config(self) -> Path:
        return self.root / "ssh_config"

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    def env(self) -> dict[str, str]:
        """Environment entries that make `docker -H ssh://...` use this client side."""
        return {"PATH": f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}

    def docker_client(self, host: str, config_dir: Path | None = None) -> DockerClient:
        """A python-on-whales client for an ssh:// host that uses this client side."""
        call = ["env", f"PATH={self.env()['PATH']}", "docker"]
        return DockerClient(host=host, config=str(config_dir) if config_dir else None, client_call=call)

    def close_shared_connection(self, user: str, port: int) -> None:
        """Ask the connection all ssh calls to 127.0.0.1:`port` share to end now (none open: nothing to do)."""
        argv = [str(self.bin_dir / "ssh"), "-O", "exit", "-p", str(port), f"{user}@{LOOPBACK}"]
        subprocess.run(argv, capture_output=True, check=False, timeout=10)

    def add_known_host(self, port: int, host_public_key: Path) -> None:
        """Trust `host_public_key` for 127.0.0.1:`port`."""
        key_type, key_body = host_public_key.read_text().split()[:2]
        with self.known_hosts.open("a") as known:
            known.write(f"[{LOOPBACK}]:{port} {key_type} {key_body}\n")

    def forget_known_host(self, port: int) -> None:
        """Drop the entry `add_known_host` wrote for `port`."""
        if self.known_hosts.exists():
            lines = self.known_hosts.read_text().splitlines(keepends=True)
            keep = [line for line in lines if not line.startswith(f"[{LOOPBACK}]:{port} ")]
            self.known_hosts.write_text("".join(keep))


def prepare_ssh_client(root: Path) -> SshClientFiles:
    """Create (once) the client key, an empty known_hosts, the ssh config and the wrapper."""
    files = SshClientFiles(root)
    files.bin_dir.mkdir(parents=True, exist_ok=True)
    _keygen(files.key, "kvbake-rig-client")
    files.known_hosts.touch()
    files.config.write_text(
        f"Host {LOOPBACK} localhost\n"
        f"  IdentityFile {files.key}\n"
        "  IdentitiesOnly yes\n  IdentityAgent none\n"
        f"  UserKnownHostsFile {files.known_hosts}\n"
        "  GlobalKnownHostsFile /dev/null\n"
        "  StrictHostKeyChecking yes\n  UpdateHostKeys no\n  BatchMode yes\n  LogLevel ERROR\n"
        # Every docker call over ssh opens a connection; sharing one per node saves the handshake each time. The
        # socket path must stay under 108 bytes: a hash in the temporary folder, not below the client folder.
        f"  ControlMaster auto\n  ControlPath {CONTROL_DIR}/kvbake-ssh-%C\n  ControlPersist 30\n"
    )
    wrapper = files.bin_dir / "ssh"
    wrapper.write_text(
        "#!/bin/sh\n# ssh with the rig's private client config\n"
        f"exec {shlex.quote(_real_ssh(files.bin_dir))} -F {shlex.quote(str(files.config))} \"$@\"\n"
    )
    wrapper.chmod(0o755)
    return files


class LoopbackSshd:
    """One sshd on a loopback port whose sessions talk to one engine; a context manager."""

    def __init__(self, root: Path, client: SshClientFiles, engine_host: str, user: str = "root",
                 session_path: str | None = None, sftp: bool = False) -> None:
        self.root = root
        self.client = client
        self.engine_host = engine_host
        self.user = user
        self.session_path = session_path  # PATH of a session (a `docker` wrapper first), or sshd's own
        self.sftp = sftp  # scp's default protocol since OpenSSH 9.0
        self.port: int | None = None
        self.daemon: Daemon | None = None
        self.last_start_seconds: float | None = None

    def ssh_host(self) -> str:
        """The DOCKER_HOST value for this node."""
        if self.port is None:
            raise EngineError("the rig sshd is not running", fix="start it first")
        return f"ssh://{self.user}@{LOOPBACK}:{self.port}"

    def _write_config(self, port: int) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        host_key = self.root / "host_ed25519"
        _keygen(host_key, "kvbake-rig-host")
        shutil.copyfile(self.client.key.with_suffix(".pub"), self.root / "authorized_keys")
        config = self.root / "sshd_config"
        config.write_text(
            f"Port {port}\nListenAddress {LOOPBACK}\nHostKey {host_key}\nPidFile {self.root / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {self.root / 'authorized_keys'}\nAllowUsers {self.user}\n"
            "PermitRootLogin prohibit-password\nPubkeyAuthentication yes\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPrintMotd no\n"
            "X11Forwarding no\nAllowTcpForwarding no\nAllowAgentForwarding no\nPermitTTY no\n"
            f"SetEnv DOCKER_HOST={self.engine_host}{f' PATH={self.session_path}' if self.session_path else ''}\n"
            + (f"Subsystem sftp {SFTP_SERVER}\n" if self.sftp else "")
        )
        return config

    def start(self) -> str:
        """Start sshd on a free port, trust its host key on the client side, return the ssh host."""
        began = time.monotonic()
        PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
        port = free_port()
        config = self._write_config(port)
        log = self.root / "sshd.log"
        argv = [SSHD_BINARY, "-D", "-e", "-f", str(config), "-p", str(port), "-o", f"ListenAddress={LOOPBACK}"]
        self.daemon = spawn(argv, log)
        self.port = port
        daemon = self.daemon
        if not wait_until(lambda: daemon.exited() or accepts_connections(port), READY_SECONDS) or daemon.exited():
            raise EngineError(f"sshd did not listen on {LOOPBACK}:{port}: {log_tail(log)}", fix="check openssh-server")
        self.client.add_known_host(port, (self.root / "host_ed25519.pub"))
        self.last_start_seconds = time.monotonic() - began
        return self.ssh_host()

    def stop(self) -> None:
        """End the client's shared connection, stop sshd and forget its host key."""
        if self.port is not None:
            self.client.close_shared_connection(self.user, self.port)
        if self.daemon is not None:
            self.daemon.stop()
            self.daemon = None
        if self.port is not None:
            self.client.forget_known_host(self.port)
            self.port = None

    def __enter__(self) -> LoopbackSshd:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def to_state(self) -> dict[str, Any]:
        """Plain form for the rig's state file."""
        assert self.daemon is not None
        return {
            "host": self.ssh_host(),
            "port": self.port,
            "root": str(self.root),
            "process": self.daemon.ref.to_json(),
        }


def stop_from_state(state: dict[str, Any]) -> None:
    """Stop an sshd that another process started, from its `to_state` record."""
    Daemon(ref=ProcessRef.from_json(state["process"])).stop()
