"""Adapter: kvbake's identity of an image a node holds, its config digest, on either store (manifests from the registry)."""

# The registry backs the containerd store's manifests, so reading one costs a request, never a `docker save` over the
# node's link.

from __future__ import annotations

import logging
from typing import Any, Callable

from kvbake.engines.adapters.client import Engine
from kvbake.errors import RegistryError
from kvbake.registry.adapters.credentials import credentials_for
from kvbake.registry.adapters.registry_api import RegistryClient, split_repository

log = logging.getLogger(__name__)


def config_digest_on(engine: Engine, inspect: dict[str, Any], repository: str) -> str:
    """The config digest of an image a node holds: its Id on the classic store; on the containerd store the config of
    the manifest its Id names (cached; else read from `repository` in the registry by that digest and checked against
    it; else, as a last resort, the engine's `docker save`)."""
    return engine.config_digest_of(inspect, f"{repository}@{inspect['Id']}", registry_manifests(engine, repository))


def registry_manifests(engine: Engine, repository: str) -> Callable[[str], bytes | None]:
    """A source of the manifests of `repository` by digest, read from its registry with the engine client's login;
    None when the registry has none or cannot be asked (the caller then reads the engine)."""
    def fetch(digest: str) -> bytes | None:
        registry, name = split_repository(repository)
        try:
            with RegistryClient(registry, credentials_for(registry, engine.config_dir())) as client:
                found = client.manifest(name, digest)
        except RegistryError as err:
            log.info("the registry cannot give the manifest %s of %s (%s)", digest[:19], repository, err.one_line())
            return None
        return found.raw if found is not None and found.raw else None

    return fetch


def repository_of(reference: str) -> str:
    """`host/name` of `host/name@sha256:…` or `host/name:tag`."""
    if "@" in reference:
        return reference.partition("@")[0]
    head, colon, tail = reference.rpartition(":")
    return head if colon and "/" not in tail else reference
