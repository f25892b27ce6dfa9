"""The classic image store (graph drivers such as overlay2): an image's Id is its config digest."""

from __future__ import annotations

from kvbake.digests import sha256_digest

CLASSIC = "classic"


class ClassicStore:
    """The `ImageStore` of engines that keep images in a graph driver."""

    name = CLASSIC
    id_meaning = "config digest"
    keeps_manifests = False
    digests_loaded_images = False

    def derived_id(self, config_bytes: bytes, manifest_bytes: bytes | None) -> str:
        return sha256_digest(config_bytes)

    def pulled_id(self, config_digest: str, pinned: str) -> str:
        return config_digest


STORE = ClassicStore()
