"""Registry credentials for the rig: a bcrypt htpasswd file and engine logins into a private config folder."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from python_on_whales import DockerClient
from python_on_whales.exceptions import DockerException

from kvbake.errors import KvbakeError, RegistryError


@dataclass(frozen=True)
class Credentials:
    """A registry user; the password never shows in repr or logs."""

    username: str
    password: str = field(repr=False)

    @classmethod
    def generate(cls, username: str = "kvbake") -> Credentials:
        """A user with a fresh random password."""
        return cls(username=username, password=secrets.token_urlsafe(24))


def write_htpasswd(path: Path, credentials: Credentials) -> Path:
    """Write a one-user bcrypt htpasswd file; the password goes through stdin, never argv."""
    result = subprocess.run(
        ["htpasswd", "-B", "-i", "-n", credentials.username],
        input=credentials.password,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise KvbakeError(f"htpasswd failed: {result.stderr.strip()}", fix="install apache2-utils")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(result.stdout.strip() + "\n")
    path.chmod(0o600)
    return path


@contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send what child processes print to stdout to stderr instead, so callers' stdout stays clean."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def login(client: DockerClient, server: str, credentials: Credentials) -> None:
    """`docker login` through `client`, storing the auth in that client's config folder."""
    try:
        with _stdout_to_stderr():
            client.login(server=server, username=credentials.username, password=credentials.password)
    except DockerException as err:
        raise RegistryError(
            f"login to {server} as {credentials.username} failed (exit {err.return_code})",
            fix="check the user and password, and that the engine trusts the registry's CA",
        ) from err


@contextmanager
def logged_in(client: DockerClient, server: str, credentials: Credentials) -> Iterator[DockerClient]:
    """Log `client` in to `server` for the duration of the block, then log it out."""
    login(client, server, credentials)
    try:
        yield client
    finally:
        with _stdout_to_stderr():
            client.logout(server)


def private_client(config_dir: Path, host: str | None = None) -> DockerClient:
    """A client whose login store is `config_dir` instead of the user's own ~/.docker."""
    config_dir.mkdir(parents=True, exist_ok=True)
    return DockerClient(config=str(config_dir), host=host)
