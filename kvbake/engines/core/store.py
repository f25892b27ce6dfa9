"""The one interface every image store profile implements: what its image Id is, and how kvbake predicts it."""

from __future__ import annotations

from typing import Protocol


class ImageStore(Protocol):
    """What differs between image stores, and nothing else; `classic.py` and `containerd.py` each implement it."""

    name: str  # the store as `docker info` shows it: "classic" or "containerd"
    id_meaning: str  # what `docker image inspect`'s Id is on this store
    keeps_manifests: bool  # the Id names a manifest: the config digest is read through it, and a load is an OCI layout
    digests_loaded_images: bool  # RepoDigests list loaded images too, so one alone does not prove a pull

    def derived_id(self, config_bytes: bytes, manifest_bytes: bytes | None) -> str:
        """The Id the store reports for the derived image kvbake loads (its config, and the manifest kvbake wrote)."""
        ...

    def pulled_id(self, config_digest: str, pinned: str) -> str:
        """The Id the store gives an image pulled by `repo@sha256:…` whose config digest is `config_digest`."""
        ...
