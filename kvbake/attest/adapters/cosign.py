"""Adapter: the cosign program: make a key pair, sign a pushed digest, attach and check its SLSA provenance."""

from __future__ import annotations

import functools
import getpass
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from kvbake.errors import SignatureError
from kvbake.registry.adapters.registry_api import ENGINE_CERTS_ROOT, is_loopback, split_repository

PASSWORD_ENV = "COSIGN_PASSWORD"
BINARY_ENV = "KVBAKE_COSIGN"
# Where the developers' set-up unpacks Debian 13's cosign (scripts/install_tools.sh); an operator's PATH comes first.
CACHED = Path(os.environ.get("KVBAKE_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kvbake") \
    / "tools" / "cosign-2.5.0" / "root" / "usr" / "bin" / "cosign"


def cosign_binary() -> str:
    """KVBAKE_COSIGN, else cosign on PATH, else the developers' unpacked copy."""
    given = os.environ.get(BINARY_ENV)
    found = given or shutil.which("cosign") or (str(CACHED) if CACHED.is_file() else None)
    if not found or not os.access(found, os.X_OK):
        raise SignatureError(f"cosign is not installed{f' at {given}' if given else ''}",
                             "install cosign 2.5 or later (Debian 13: apt-get install cosign) or set KVBAKE_COSIGN to its path")
    return found


def password() -> str:
    """The key's password: COSIGN_PASSWORD, else asked on the terminal; never logged, recorded or passed as an argument."""
    given = os.environ.get(PASSWORD_ENV)
    if given is not None:
        return given
    if not sys.stdin.isatty():
        raise SignatureError("the signing key's password is not given", f"set {PASSWORD_ENV} in the environment, or run on a terminal")
    return getpass.getpass("cosign key password: ")


def registry_ca(address: str, certs_root: Path = ENGINE_CERTS_ROOT) -> Path | None:
    """The CA the engines trust for the registry at `address` (certs.d/<host:port>/ca.crt), or None."""
    ca = certs_root / address / "ca.crt"
    return ca if ca.is_file() else None


def registry_options(reference: str, certs_root: Path = ENGINE_CERTS_ROOT) -> list[str]:
    """What cosign needs to reach the registry as the engines and kvbake's own client do: plain HTTP allowed for a
    registry on loopback only, judged by the same rule as kvbake's client (a name that only starts like one,
    `localhost.corp.example:5000`, is remote); the CA the engines trust for it, which cosign does not read by itself,
    given as its registry CA."""
    address = split_repository(reference)[0]
    ca = registry_ca(address, certs_root)
    return [*(["--allow-http-registry"] if is_loopback(address) else []), *(["--registry-cacert", str(ca)] if ca else [])]


def registry_reach(reference: str, certs_root: Path = ENGINE_CERTS_ROOT, timeout_s: float = 60) -> str:
    """Whether cosign reaches the registry of `reference` (its TLS verified as for a signature): `cosign triangulate`
    asks the registry for the reference; an image that is not there still proves the connection. The line says with
    which CA."""
    address = split_repository(reference)[0]
    argv = [cosign_binary(), "triangulate", *registry_options(reference, certs_root), reference]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise SignatureError(f"cosign did not reach {address} within {timeout_s:g} s",
                             "check that the registry answers from this host (and any proxy cosign goes through)") from None
    text = done.stderr + done.stdout
    if done.returncode != 0 and not any(word in text for word in UNKNOWN_IMAGE):
        last = next((line.strip() for line in reversed(done.stderr.splitlines()) if line.strip()), f"exit code {done.returncode}")
        fix = (f"give the registry's CA where the engines read it, {certs_root}/{address}/ca.crt: kvbake hands it to cosign"
               if "x509" in last or "certificate" in last else "check the registry's address and that it answers")
        raise SignatureError(f"cosign cannot reach {address} ({last})", fix)
    ca = registry_ca(address, certs_root)
    return f"cosign reaches {address}" + (f" with the engines' CA {ca}" if ca else "")


UNKNOWN_IMAGE = ("MANIFEST_UNKNOWN", "NAME_UNKNOWN", "not found", "404")


def run_cosign(argv: list[str], what: str, secret: str | None = None) -> str:
    env = {**os.environ, **({PASSWORD_ENV: secret} if secret is not None else {})}
    done = subprocess.run([cosign_binary(), *argv], env=env, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        last = next((line.strip() for line in reversed(done.stderr.splitlines()) if line.strip()), f"exit code {done.returncode}")
        raise SignatureError(f"cosign could not {what} ({last})", "read cosign's reason; check the key, its password and the registry")
    return done.stdout


PRIVATE_KEY_HEADERS = ("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----", "-----BEGIN ENCRYPTED COSIGN PRIVATE KEY-----")


def check_private_key(key: Path) -> None:
    """The signing key must be a cosign private key file (encrypted, as `keys` and cosign write it)."""
    try:
        head = key.read_text(encoding="utf-8", errors="replace").lstrip()
    except FileNotFoundError:
        raise SignatureError(f"signing key {key} not found", "give --key the cosign.key python build.py keys wrote") from None
    except OSError as err:
        raise SignatureError(f"signing key {key} cannot be read ({err.strerror})", "give --key a readable cosign.key") from None
    if not head.startswith(PRIVATE_KEY_HEADERS):
        raise SignatureError(f"{key} is not a cosign private key (no {PRIVATE_KEY_HEADERS[0]} line)",
                             "give --key the cosign.key python build.py keys (or cosign generate-key-pair) wrote")


def check_password(key: Path, secret: str) -> None:
    """The password must open the key: cosign derives the public key from it, locally, before anything is pushed."""
    try:
        run_cosign(["public-key", "--key", str(key)], f"open {key.name}", secret)
    except SignatureError:
        raise SignatureError(f"the password does not open {key.name} (cosign could not decrypt it)",
                             f"set {PASSWORD_ENV} to that key's password; nothing was signed") from None


def generate_key_pair(prefix: Path, secret: str) -> tuple[Path, Path]:
    """A new key pair, the private key encrypted with `secret`: PREFIX.key and PREFIX.pub."""
    key, pub = prefix.with_name(prefix.name + ".key"), prefix.with_name(prefix.name + ".pub")
    for path in (key, pub):
        if path.exists():
            raise SignatureError(f"{path} already exists; keys are never overwritten", "give another --out folder or name")
    run_cosign(["generate-key-pair", "--output-key-prefix", str(prefix)], "make a key pair", secret)
    return key, pub


@functools.lru_cache(maxsize=None)
def offline_options(binary: str, command: str) -> tuple[str, ...]:
    """No transparency log, in the signature format every cosign generation verifies: cosign 2 writes it by default;
    cosign 3 (it has --use-signing-config) writes the new bundle as an OCI referrer unless told to keep the old
    `sha256-<digest>.sig` form, which cosign 2 cannot find."""
    shown = subprocess.run([binary, command, "--help"], capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    if "--use-signing-config" in shown.stdout + shown.stderr:
        return ("--new-bundle-format=false", "--use-signing-config=false", "--tlog-upload=false")
    return ("--tlog-upload=false",)


def sign(reference: str, key: Path, secret: str) -> None:
    """Sign the digest reference (no transparency log: the registry is private)."""
    run_cosign(["sign", "--key", str(key), *offline_options(cosign_binary(), "sign"), "--yes", *registry_options(reference), reference],
               f"sign {reference}", secret)


def attest(reference: str, key: Path, secret: str, predicate: dict[str, Any], predicate_type: str) -> None:
    """Attach an in-toto attestation of the predicate to the digest reference."""
    with tempfile.TemporaryDirectory(prefix="kvbake-attest-") as scratch:
        path = Path(scratch) / "predicate.json"
        path.write_text(json.dumps(predicate, sort_keys=True), encoding="utf-8")
        run_cosign(["attest", "--key", str(key), "--type", predicate_type, "--predicate", str(path), *offline_options(cosign_binary(), "attest"), "--yes",
                    *registry_options(reference), reference], f"attest {reference}", secret)


def verify(reference: str, public_key: Path) -> list[dict[str, Any]]:
    """cosign's own check of the signature against one public key (offline: no transparency log)."""
    out = run_cosign(["verify", "--key", str(public_key), "--insecure-ignore-tlog", *registry_options(reference), reference],
                     f"verify the signature of {reference} with {public_key.name}")
    return json.loads(out)


def verify_attestation(reference: str, public_key: Path, predicate_type: str) -> list[dict[str, Any]]:
    """cosign's check of the attestation's signature; the in-toto statements it holds."""
    out = run_cosign(["verify-attestation", "--key", str(public_key), "--type", predicate_type, "--insecure-ignore-tlog",
                      *registry_options(reference), reference], f"verify the attestation of {reference} with {public_key.name}")
    return [json.loads(line) for line in out.splitlines() if line.strip()]
