"""Adapter: the base's raw config read from the engine's own image store, through a container that never runs."""

# A base built on its node has no registry copy, and `docker save` streams the whole image for a config of a few
# kilobytes. The engine keeps that config on its own host (blob_folders): a container of the base, created and never
# started, with that folder bind-mounted read-only, lets `docker cp` hand kvbake one blob, whatever the image's size,
# over whatever connection reaches the engine. Every blob is held to its digest; a folder that is absent, unreadable,
# or holds other bytes means "not from here", and lock falls back to the save.

from __future__ import annotations

import json
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvbake.bake.core.registry_copies import platform_entries
from kvbake.digests import sha256_digest
from kvbake.engines.adapters.client import Engine
from kvbake.engines.core.blob_folders import blob_folders, blob_name
from kvbake.errors import EngineError

log = logging.getLogger(__name__)
MOUNTED_AT = "/kvbake-store"  # where the store's blob folder appears in the never-started container


@dataclass(frozen=True)
class StoredConfig:
    """The base's raw config as its engine stores it, and the store manifest behind a containerd-store image ID."""

    config_bytes: bytes
    config_digest: str
    manifest: bytes | None = None


def stored_config(engine: Engine, reference: str, inspect: dict[str, Any], platform: str) -> StoredConfig | None:
    """The raw config from the first blob folder of the engine's store that holds it, checked by digest; None when no
    folder does (the engine is elsewhere than its store says, or refuses the mount)."""
    root, driver = engine.store_root()
    if not root:
        return None
    keeps_manifests = engine.profile().image_store.keeps_manifests
    for folder in blob_folders(root, driver, keeps_manifests):
        try:
            with engine.created_container(reference, (folder, MOUNTED_AT)) as container:
                found = read_config(BlobReader(engine, container), str(inspect["Id"]), keeps_manifests, platform)
        except EngineError as err:
            log.info("the store folder %s cannot be read through a container (%s)", folder, err.message)
            continue
        if found is not None:
            return found
    return None


def read_config(blobs: BlobReader, image_id: str, keeps_manifests: bool, platform: str) -> StoredConfig | None:
    """The classic store: the config is the blob named by the image ID. The containerd store: the ID names the manifest
    (or an index, whose entry for `platform` is), which names the config."""
    if not keeps_manifests:
        config = blobs.read(image_id)
        return None if config is None else StoredConfig(config, image_id)
    top = blobs.read(image_id)
    document = parsed(top)
    if document is None:
        return None
    manifest, manifest_bytes = document, top
    if not isinstance(document.get("config"), dict):
        entries = platform_entries(document, platform)
        manifest_bytes = blobs.read(entries[0]) if len(entries) == 1 else None
        manifest = parsed(manifest_bytes)
        if manifest is None or not isinstance(manifest.get("config"), dict):
            return None
    digest = manifest["config"].get("digest")
    config = blobs.read(digest) if isinstance(digest, str) else None
    if config is None:
        return None
    return StoredConfig(config, digest, top if manifest_bytes is top else None)


def parsed(data: bytes | None) -> dict[str, Any] | None:
    """A JSON object, or None (no blob, or not one)."""
    if data is None:
        return None
    try:
        document = json.loads(data)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


class BlobReader:
    """Blobs by digest out of the mounted store folder of one never-started container."""

    def __init__(self, engine: Engine, container: str) -> None:
        self.engine = engine
        self.container = container

    def read(self, digest: str) -> bytes | None:
        """The blob `digest`, only when its bytes hash to it; None when absent or other bytes."""
        try:
            name = blob_name(digest)
        except ValueError:
            return None
        with tempfile.TemporaryDirectory(prefix="kvbake-store-") as folder:
            target = Path(folder) / "blob"
            if not self.engine.copy_out(self.container, f"{MOUNTED_AT}/{name}", target) or not target.is_file():
                return None
            data = target.read_bytes()
        if sha256_digest(data) != digest:
            log.info("the store's blob %s holds other bytes; not used", digest[:19])
            return None
        return data
