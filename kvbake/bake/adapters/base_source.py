"""Adapter: the base's raw config from a registry copy or the engine's own store; one `docker save` if neither has it."""

# The containerd store's manifest comes from the registry copy too. When no registry named in the image's RepoDigests
# serves the config (a base built on its node), lock reads it from the engine's own store (store_blobs); only when
# that fails too does it stream one `docker save` of the whole base (and says so).

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kvbake.bake.adapters.basecapture import capture_base
from kvbake.bake.adapters.store_blobs import stored_config
from kvbake.bake.core.registry_copies import RegistryCopy, platform_entries, registry_copies
from kvbake.digests import sha256_digest
from kvbake.engines.adapters import manifestcache
from kvbake.engines.adapters.client import Engine
from kvbake.engines.core.savefile import DirMeta
from kvbake.errors import BaseImageError, RegistryError
from kvbake.registry.adapters.credentials import credentials_for
from kvbake.registry.adapters.registry_api import RegistryClient

log = logging.getLogger(__name__)
STAT_WORKERS = 4  # directories read at once (each one a short `docker cp` that stops after its first entry)


@dataclass(frozen=True)
class BaseRead:
    """The base's raw config, the directories above the touched files, and where the config came from."""

    config_bytes: bytes
    config_digest: str
    dirs: dict[str, DirMeta]
    source: str

    @property
    def config(self) -> dict[str, Any]:
        return json.loads(self.config_bytes)


def read_base(engine: Engine, reference: str, inspect: dict[str, Any], platform: str, wanted_dirs: frozenset[str]) -> BaseRead:
    """The registry route when a registry named in the image's RepoDigests serves its config, else one `docker save`."""
    copies = registry_copies(reference, list(inspect.get("RepoDigests") or []))
    identity = registry_identity(engine, reference, inspect, copies) if copies else None
    for copy in copies if identity is not None else []:
        config_bytes = config_from(copy, identity, platform)
        if config_bytes is not None:
            check_layers(reference, config_bytes, inspect)
            return BaseRead(config_bytes, identity, engine_dirs(engine, reference, wanted_dirs), f"registry {copy.reference}")
    stored = stored_config(engine, reference, inspect, platform)
    if stored is not None:
        if stored.manifest is not None:
            engine.remember_manifest(stored.manifest)
        check_layers(reference, stored.config_bytes, inspect, "the engine store's")
        return BaseRead(stored.config_bytes, stored.config_digest, engine_dirs(engine, reference, wanted_dirs), "the engine's own store")
    log.warning("lock reads %s from one docker save (O(base)): %s, and the engine's own store cannot be read through a "
                "container; `python build.py base sync`, or pulling the base from its registry, lets lock read only its "
                "config and directories", reference,
                "no registry named in its RepoDigests serves it" if copies else "the image names no registry copy")
    saved = capture_base(engine, reference, tuple(inspect["RootFS"]["Layers"]), wanted_dirs)
    named = engine.config_digest_of(inspect, reference)  # the containerd store's manifest came with the save
    if saved.config_digest != named:
        raise BaseImageError(f"the saved config of {reference} hashes to {saved.config_digest[:19]}, not the config "
                             f"{named[:19]} that {engine.profile().name} names", "the image changed during the save; run lock again")
    return BaseRead(saved.config_bytes, saved.config_digest, saved.dirs, "docker save")


def registry_identity(engine: Engine, reference: str, inspect: dict[str, Any], copies: list[RegistryCopy]) -> str | None:
    """The config digest the engine names: the Id on the classic store; on the containerd store the config of the
    store's manifest, cached or fetched by its digest from a registry copy. None when no copy has that manifest."""
    if not engine.profile().image_store.keeps_manifests:
        return str(inspect["Id"])
    if manifestcache.get(inspect["Id"]) is None:
        fetched = next((raw for raw in (manifest_bytes(copy, inspect["Id"]) for copy in copies) if raw is not None), None)
        if fetched is None or sha256_digest(fetched) != inspect["Id"]:
            return None
        engine.remember_manifest(fetched)
    return engine.config_digest_of(inspect, reference)


def config_digest(engine: Engine, reference: str, inspect: dict[str, Any]) -> str:
    """The image's config digest, on the containerd store read from a registry copy's manifest when one serves it, so
    that only an image no registry holds costs a `docker save` (the engine's own route)."""
    copies = registry_copies(reference, list(inspect.get("RepoDigests") or []))
    return (registry_identity(engine, reference, inspect, copies) if copies else None) or engine.config_digest_of(inspect, reference)


def manifest_bytes(copy: RegistryCopy, digest: str) -> bytes | None:
    """The raw manifest `digest` in this copy's repository (checked against the digest by the client), or None."""
    found = _quietly(copy, lambda client: client.manifest(copy.name, digest))
    return None if found is None else found.raw


def config_from(copy: RegistryCopy, identity: str, platform: str) -> bytes | None:
    """The config blob `identity` as the copy's manifest (or its index entry for `platform`) names it, checked by
    digest; None when this copy is unreachable, refuses, or names another config."""

    def read(client: RegistryClient) -> bytes | None:
        manifest = client.manifest(copy.name, copy.digest)
        if manifest is None:
            return None
        candidates = [manifest] if manifest.config_digest else [client.manifest(copy.name, d) for d in platform_entries(manifest.data, platform)]
        if not any(found is not None and found.config_digest == identity for found in candidates):
            log.info("%s names another config than %s; not used", copy.reference, identity[:19])
            return None
        return client.blob(copy.name, identity)

    return _quietly(copy, read)


def _quietly(copy: RegistryCopy, read):
    """One read of a registry copy; a registry failure is logged and means "not from here" (lock falls back)."""
    try:
        with RegistryClient(copy.registry, credentials_for(copy.registry)) as client:
            return read(client)
    except RegistryError as err:
        log.info("the registry copy %s cannot be read (%s)", copy.reference, err.message)
        return None


def check_layers(reference: str, config_bytes: bytes, inspect: dict[str, Any], whose: str = "the registry's") -> None:
    """The config read (from a registry copy, or the engine's own store) must describe exactly the layers the engine holds."""
    try:
        diff_ids = json.loads(config_bytes)["rootfs"]["diff_ids"]
    except (ValueError, KeyError, TypeError):
        raise BaseImageError(f"{whose} config {sha256_digest(config_bytes)[:19]} of {reference} has no rootfs.diff_ids",
                             "check the registry copy of the base, or remove it so that lock reads a docker save") from None
    if list(diff_ids) != list(inspect["RootFS"]["Layers"]):
        raise BaseImageError(f"{whose} config of {reference} names other layers than the engine reports",
                             "the image changed; pull or load the base again, then run lock again")


def engine_dirs(engine: Engine, reference: str, wanted_dirs: frozenset[str]) -> dict[str, DirMeta]:
    """Each wanted directory that exists in the base (a path that is absent or not a directory is left out)."""
    with engine.created_container(reference) as container, ThreadPoolExecutor(STAT_WORKERS) as pool:
        paths = sorted(wanted_dirs)
        found = pool.map(lambda path: engine.dir_meta(container, "/" + path), paths)
        return {path: meta for path, meta in zip(paths, found) if meta is not None}
