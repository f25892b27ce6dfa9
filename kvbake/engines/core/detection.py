"""The detection: which Docker version and image store an engine runs (its profile), and the store module that serves it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from kvbake.engines.core import classic, containerd
from kvbake.engines.core.classic import CLASSIC
from kvbake.engines.core.containerd import CONTAINERD
from kvbake.engines.core.store import ImageStore
from kvbake.errors import EngineError

STORES: Mapping[str, ImageStore] = {CLASSIC: classic.STORE, CONTAINERD: containerd.STORE}
SNAPSHOTTER_DRIVER_TYPE = "io.containerd.snapshotter.v1"
OLDEST_SUPPORTED = (20, 10)
STORE_CHECK = "docker info --format '{{.Driver}} {{json .DriverStatus}}'"


@dataclass(frozen=True)
class EngineProfile:
    """One engine's version and image store; the store decides what `docker image inspect`'s Id means."""

    server_version: str
    store: str
    driver: str

    @property
    def version(self) -> tuple[int, int]:
        return parse_version(self.server_version)

    @property
    def name(self) -> str:
        """`docker-26.1-containerd`, `docker-20.10-classic`: short, stable across patch releases."""
        major, minor = self.version
        return f"docker-{major}.{minor}-{self.store}"

    @property
    def image_store(self) -> ImageStore:
        """The store module behind this profile: everything that differs between stores goes through it."""
        return store_named(self.store)

    @property
    def id_meaning(self) -> str:
        """What this store reports as an image's Id."""
        return self.image_store.id_meaning

    @property
    def save_is_oci_layout(self) -> bool:
        """From Engine 25 on, `docker save` writes an OCI layout whose manifest.json points into blobs/."""
        return self.version >= (25, 0) or self.image_store.keeps_manifests

    def describe(self) -> str:
        return f"{self.name} (Docker {self.server_version}, {self.store} image store, driver {self.driver}; image ID = {self.id_meaning})"

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "server_version": self.server_version, "store": self.store, "driver": self.driver,
                "id_meaning": self.id_meaning}


def parse_version(text: str) -> tuple[int, int]:
    """`26.1.5+dfsg1` → (26, 1); an unreadable version is an EngineError."""
    found = re.match(r"\s*v?(\d+)\.(\d+)", text or "")
    if not found:
        raise EngineError(f"the engine reports an unreadable server version {text!r}", "check the engine (docker version)")
    return int(found.group(1)), int(found.group(2))


def store_named(store: str) -> ImageStore:
    """The image store of a profile's `store` name; any name but the containerd store's is the classic store (as in
    `store_of`)."""
    return STORES.get(store, classic.STORE)


def store_of(driver_status: Sequence[Sequence[str]] | None) -> str:
    """The containerd image store reports a snapshotter driver type; everything else is the classic graph driver store."""
    for item in driver_status or ():
        if len(item) >= 2 and item[0] == "driver-type" and item[1] == SNAPSHOTTER_DRIVER_TYPE:
            return CONTAINERD
    return CLASSIC


def profile_from_info(info: Mapping[str, Any], label: str) -> EngineProfile:
    """The profile of an engine from its `docker info` facts; engines older than 20.10 are refused."""
    profile = EngineProfile(str(info.get("server_version") or ""), store_of(info.get("driver_status")),
                            str(info.get("driver") or ""))
    if profile.version < OLDEST_SUPPORTED:
        raise EngineError(f"{label} runs Docker {profile.server_version}, older than the oldest supported engine 20.10",
                          "upgrade the engine to Docker 20.10 or later (25 or later recommended)")
    return profile
