"""A real distribution registry on a loopback port, optionally with TLS and htpasswd auth."""

from __future__ import annotations

import json
import secrets
import shutil
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from kvbake.errors import RegistryError
from kvbake_rig.certs import ENGINE_CERTS_ROOT, TlsFiles, install_engine_trust, make_server_tls, remove_engine_trust
from kvbake_rig.ports import LOOPBACK, free_port
from kvbake_rig.processes import Daemon, ProcessRef, log_tail, spawn, wait_until

REGISTRY_BINARY = "docker-registry"
READY_SECONDS = 15.0
START_ATTEMPTS = 3


@dataclass(frozen=True)
class RegistryEndpoint:
    """How clients reach a running registry: address, scheme, the CA to trust and the user, if any."""

    address: str
    scheme: str
    ca_path: Path | None = None
    username: str | None = None

    @property
    def url(self) -> str:
        """Base URL, for example http://127.0.0.1:5000."""
        return f"{self.scheme}://{self.address}"

    def http_client(self) -> httpx.Client:
        """An httpx client that trusts exactly this registry's CA and ignores proxy settings."""
        verify: ssl.SSLContext | bool = True
        if self.ca_path is not None:
            verify = ssl.create_default_context(cafile=str(self.ca_path))
        return httpx.Client(base_url=self.url, verify=verify, trust_env=False, timeout=5.0)


def _config_text(root: Path, port: int, tls: TlsFiles | None, htpasswd: Path | None, storage: Path | None = None,
                 read_only: bool = False) -> str:
    http: dict[str, Any] = {"addr": f"{LOOPBACK}:{port}", "secret": secrets.token_hex(16)}
    if tls is not None:
        http["tls"] = {"certificate": str(tls.server_cert), "key": str(tls.server_key)}
    config: dict[str, Any] = {
        "version": 0.1,
        "log": {"level": "info", "formatter": "text"},
        "storage": {"filesystem": {"rootdirectory": str(storage or root / "storage")}, "delete": {"enabled": True},
                    **({"maintenance": {"readonly": {"enabled": True}}} if read_only else {})},
        "http": http,
    }
    if htpasswd is not None:
        config["auth"] = {"htpasswd": {"realm": "kvbake-rig", "path": str(htpasswd)}}
    return json.dumps(config, indent=2) + "\n"  # JSON is valid YAML


def _answers(endpoint: RegistryEndpoint) -> bool:
    try:
        with endpoint.http_client() as client:
            return client.get("/v2/").status_code in (200, 401)
    except httpx.HTTPError:
        return False


class LocalRegistry:
    """Runs `docker-registry serve` with filesystem storage under `root`; a context manager."""

    def __init__(
        self,
        root: Path,
        *,
        tls: bool = False,
        htpasswd: Path | None = None,
        username: str | None = None,
        certs_root: Path = ENGINE_CERTS_ROOT,
        storage: Path | None = None,
        read_only: bool = False,
    ) -> None:
        self.root = root
        self.storage = storage  # another registry's storage folder to serve (default: root/storage)
        self.read_only = read_only  # refuse every upload, as a registry in maintenance does
        self.tls = tls
        self.htpasswd = htpasswd
        self.username = username
        self.certs_root = certs_root
        self.endpoint: RegistryEndpoint | None = None
        self.daemon: Daemon | None = None
        self.trust_dir: Path | None = None

    @property
    def address(self) -> str:
        """host:port of the running registry."""
        return self._running().address

    @property
    def url(self) -> str:
        """Base URL of the running registry."""
        return self._running().url

    def _running(self) -> RegistryEndpoint:
        if self.endpoint is None:
            raise RegistryError("the rig registry is not running", fix="start it first")
        return self.endpoint

    def start(self) -> RegistryEndpoint:
        """Start the registry, install its CA for the engines when TLS is on, and wait for /v2/."""
        self.root.mkdir(parents=True, exist_ok=True)
        tls_files = make_server_tls(self.root / "tls", [LOOPBACK], ["localhost"]) if self.tls else None
        for _ in range(START_ATTEMPTS):
            port = free_port()
            endpoint = RegistryEndpoint(
                address=f"{LOOPBACK}:{port}",
                scheme="https" if tls_files else "http",
                ca_path=tls_files.ca_cert if tls_files else None,
                username=self.username,
            )
            config = self.root / "config.yml"
            config.write_text(_config_text(self.root, port, tls_files, self.htpasswd, self.storage, self.read_only))
            daemon = spawn([REGISTRY_BINARY, "serve", str(config)], self.root / "registry.log")
            if wait_until(lambda: daemon.exited() or _answers(endpoint), READY_SECONDS) and not daemon.exited():
                self.daemon, self.endpoint = daemon, endpoint
                if tls_files is not None:
                    self.trust_dir = install_engine_trust(endpoint.address, tls_files.ca_cert, self.certs_root)
                return endpoint
            daemon.stop()
        raise RegistryError(
            f"registry did not answer GET /v2/: {log_tail(self.root / 'registry.log')}",
            fix=f"check that {REGISTRY_BINARY} is installed and loopback ports are free",
        )

    def stop(self) -> None:
        """Stop the registry and remove the engine trust entry; the stored blobs stay under root."""
        if self.daemon is not None:
            self.daemon.stop()
            self.daemon = None
        if self.trust_dir is not None:
            remove_engine_trust(self.trust_dir.name, self.certs_root)
            self.trust_dir = None
        self.endpoint = None

    def __enter__(self) -> LocalRegistry:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def to_state(self) -> dict[str, Any]:
        """Plain form for the rig's state file (never a password)."""
        endpoint, daemon = self._running(), self.daemon
        assert daemon is not None
        return {
            "address": endpoint.address,
            "scheme": endpoint.scheme,
            "url": endpoint.url,
            "ca_path": str(endpoint.ca_path) if endpoint.ca_path else None,
            "engine_trust_dir": str(self.trust_dir) if self.trust_dir else None,
            "username": endpoint.username,
            "root": str(self.root),
            "process": daemon.ref.to_json(),
        }


def stop_from_state(state: dict[str, Any], remove_storage: bool = True) -> None:
    """Stop a registry that another process started, from its `to_state` record."""
    Daemon(ref=ProcessRef.from_json(state["process"])).stop()
    if state.get("engine_trust_dir"):
        trust_dir = Path(state["engine_trust_dir"])
        remove_engine_trust(trust_dir.name, trust_dir.parent)
    if remove_storage:
        shutil.rmtree(state["root"], ignore_errors=True)
