"""A throwaway certificate authority and loopback server certificate, made with the openssl CLI."""

# Engines read a registry's CA from /etc/docker/certs.d/HOST:PORT/ca.crt; dockerd has no flag to move
# that folder for one engine, so the rig writes its entry there and removes it again. Note that Engine
# 20.10 always counts 127.0.0.0/8 as an insecure registry range and then skips certificate checks, so
# on loopback the engines accept the registry's certificate without it; clients that verify (the
# registry read-back over httpx) use the CA file.

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kvbake.errors import KvbakeError

ENGINE_CERTS_ROOT = Path("/etc/docker/certs.d")
VALID_DAYS = "7"
CURVE = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


@dataclass(frozen=True)
class TlsFiles:
    """The CA certificate every client must trust, and the server's certificate and key."""

    ca_cert: Path
    server_cert: Path
    server_key: Path


def _openssl(args: Sequence[str], cwd: Path) -> None:
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        why = " ".join(result.stderr.split())[:300]
        raise KvbakeError(f"openssl {args[0]} failed: {why}", fix="check that the openssl CLI is installed")


def make_server_tls(folder: Path, ip_addresses: Sequence[str], dns_names: Sequence[str]) -> TlsFiles:
    """Write a fresh CA and a server certificate for the given IP and DNS names into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    _openssl(
        ["req", "-x509", *CURVE, "-keyout", "ca.key", "-out", "ca.crt", "-days", VALID_DAYS,
         "-subj", "/CN=kvbake rig CA",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        folder,
    )
    _openssl(
        ["req", "-new", *CURVE, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=kvbake rig registry"],
        folder,
    )
    names = [f"IP:{ip}" for ip in ip_addresses] + [f"DNS:{name}" for name in dns_names]
    (folder / "server.ext").write_text(
        f"subjectAltName={','.join(names)}\n"
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
    )
    _openssl(
        ["x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
         "-out", "server.crt", "-days", VALID_DAYS, "-extfile", "server.ext"],
        folder,
    )
    for secret in ("ca.key", "server.key"):
        (folder / secret).chmod(0o600)
    return TlsFiles(ca_cert=folder / "ca.crt", server_cert=folder / "server.crt", server_key=folder / "server.key")


def engine_trust_dir(address: str, certs_root: Path = ENGINE_CERTS_ROOT) -> Path:
    """Where an engine looks for the CA of the registry at `address` (host:port)."""
    return certs_root / address


def install_engine_trust(address: str, ca_cert: Path, certs_root: Path = ENGINE_CERTS_ROOT) -> Path:
    """Copy `ca_cert` to `<certs_root>/<address>/ca.crt`; refuse to overwrite a folder we did not write."""
    target = engine_trust_dir(address, certs_root)
    if target.exists():
        raise KvbakeError(
            f"{target} already exists", fix="stop the rig that owns this registry port, or remove that folder"
        )
    target.mkdir(parents=True)
    shutil.copyfile(ca_cert, target / "ca.crt")
    return target


def remove_engine_trust(address: str, certs_root: Path = ENGINE_CERTS_ROOT) -> None:
    """Remove what `install_engine_trust` wrote (missing is fine), and the certs root once empty."""
    shutil.rmtree(engine_trust_dir(address, certs_root), ignore_errors=True)
    try:
        certs_root.rmdir()
    except OSError:
        pass  # other registries are still trusted there, or it is already gone


@contextmanager
def engine_trust(address: str, ca_cert: Path, certs_root: Path = ENGINE_CERTS_ROOT) -> Iterator[Path]:
    """Make every engine on this machine trust `ca_cert` for `address` while the block runs."""
    target = install_engine_trust(address, ca_cert, certs_root)
    try:
        yield target
    finally:
        remove_engine_trust(address, certs_root)
