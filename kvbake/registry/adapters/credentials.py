"""Adapter: registry credentials from the engine client's own login store (config.json or a credential helper)."""

from __future__ import annotations

import base64
import binascii
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvbake.errors import RegistryError

DOCKER_HUB_KEY = "https://index.docker.io/v1/"
HUB_NAMES = ("docker.io", "index.docker.io", "registry-1.docker.io")
TOKEN_USER = "<token>"


@dataclass(frozen=True)
class RegistryAuth:
    """A user and secret for one registry; the secret never shows in repr, logs or messages."""

    username: str
    secret: str = field(repr=False)

    @property
    def is_identity_token(self) -> bool:
        """True when the secret is an identity (refresh) token rather than a password."""
        return self.username == TOKEN_USER


def config_folder(explicit: str | os.PathLike[str] | None) -> Path:
    """The folder the docker CLI reads: the client's --config, else DOCKER_CONFIG, else ~/.docker."""
    if explicit:
        return Path(explicit)
    if os.environ.get("DOCKER_CONFIG"):
        return Path(os.environ["DOCKER_CONFIG"])
    return Path.home() / ".docker"


def _server_key(key: str) -> str:
    """'https://host:port/v1/' → 'host:port' (login stores use both forms)."""
    return key.split("://", 1)[-1].split("/", 1)[0]


def _store_key(registry: str) -> str:
    return DOCKER_HUB_KEY if registry in HUB_NAMES else registry


def _decode_auth(registry: str, entry: dict[str, Any]) -> RegistryAuth | None:
    if entry.get("identitytoken"):
        return RegistryAuth(TOKEN_USER, str(entry["identitytoken"]))
    encoded = entry.get("auth")
    if not encoded:
        return None
    try:
        username, _, secret = base64.b64decode(str(encoded), validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise RegistryError(f"the login entry for {registry} in the docker config is not valid base64 user:password",
                            f"run docker login {registry} again") from None
    return RegistryAuth(username, secret) if username else None


def _helper_auth(helper: str, registry: str) -> RegistryAuth | None:
    """Ask `docker-credential-<helper> get`; None when it holds nothing for this registry."""
    program = f"docker-credential-{helper}"
    try:
        done = subprocess.run([program, "get"], input=_store_key(registry), capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise RegistryError(f"the docker config names the credential helper {program}, which is not installed",
                            f"install {program} or remove it from the docker config, then docker login {registry}") from None
    except OSError as err:
        raise RegistryError(f"the credential helper {program} cannot be run ({err.strerror})",
                            f"make {program} executable, or remove it from the docker config") from None
    if done.returncode != 0:
        return None  # helpers exit non-zero with "credentials not found" for an unknown server
    try:
        reply = json.loads(done.stdout)
    except json.JSONDecodeError:
        reply = None
    if not isinstance(reply, dict):
        raise RegistryError(f"{program} answered with something that is not a JSON object",
                            f"check the helper, or docker logout and docker login {registry}")
    username, secret = str(reply.get("Username") or ""), str(reply.get("Secret") or "")
    return RegistryAuth(username, secret) if username and secret else None


def read_config(folder: Path) -> dict[str, Any]:
    """The login store's config.json, or {} when there is none."""
    path = folder / "config.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise RegistryError("the docker config.json of the engine client is not valid JSON", "repair it or docker login again") from None
    return data if isinstance(data, dict) else {}


def _section(config: dict[str, Any], key: str) -> dict[str, Any]:
    """A mapping section of the config ({} when absent); another shape is a one-line error."""
    value = config.get(key) or {}
    if not isinstance(value, dict):
        raise RegistryError(f"the docker config of the engine client has a {key} that is not an object",
                            "repair it or docker login again")
    return value


def _helper_name(value: Any, key: str) -> str | None:
    """A credential helper's name from the config (None or "" means none, as for the docker CLI)."""
    if value in (None, ""):
        return None
    if not (isinstance(value, str) and value.strip()):
        raise RegistryError(f"the docker config of the engine client names a {key} that is not a helper name",
                            "repair it or docker login again")
    return value


def lookup(config: dict[str, Any], registry: str) -> RegistryAuth | None:
    """The credentials a docker CLI with this config would send to `registry`, or None (anonymous)."""
    helper = _helper_name(_section(config, "credHelpers").get(registry), "credHelpers entry")
    if helper:
        return _helper_auth(helper, registry)
    auths = {_server_key(str(key)): value for key, value in _section(config, "auths").items()}
    entry = auths.get(_server_key(_store_key(registry)))
    store = _helper_name(config.get("credsStore"), "credsStore")
    if store:
        found = _helper_auth(store, registry)
        if found is not None:
            return found
    return _decode_auth(registry, entry) if isinstance(entry, dict) else None


def credentials_for(registry: str, config_dir: str | os.PathLike[str] | None = None) -> RegistryAuth | None:
    """Credentials for `registry` from the login store the engine client uses."""
    return lookup(read_config(config_folder(config_dir)), registry)
