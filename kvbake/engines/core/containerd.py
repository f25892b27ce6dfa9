"""The containerd image store: an image's Id is its manifest's digest, so kvbake writes and predicts that manifest."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from typing import Any

from kvbake.digests import canonical_json, sha256_digest
from kvbake.errors import BaseImageError

CONTAINERD = "containerd"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
# The thin layer's media type, in the family of the base's manifest.
GZIP_LAYER = {OCI_MANIFEST: "application/vnd.oci.image.layer.v1.tar+gzip",
              DOCKER_MANIFEST: "application/vnd.docker.image.rootfs.diff.tar.gzip"}
CONFIG_TYPE = {OCI_MANIFEST: "application/vnd.oci.image.config.v1+json",
               DOCKER_MANIFEST: "application/vnd.docker.container.image.v1+json"}
THIN_GZIP_LEVEL = 6


@dataclass(frozen=True)
class StoreManifest:
    """An image manifest as a store holds it: its digest, config digest and layer descriptors."""

    data: bytes

    @property
    def digest(self) -> str:
        return sha256_digest(self.data)

    @property
    def document(self) -> dict[str, Any]:
        return json.loads(self.data)

    @property
    def media_type(self) -> str:
        return str(self.document.get("mediaType") or OCI_MANIFEST)

    @property
    def config_digest(self) -> str:
        return str((self.document.get("config") or {}).get("digest") or "")

    @property
    def layers(self) -> list[dict[str, Any]]:
        return list(self.document.get("layers") or [])


def parse_store_manifest(data: bytes, where: str) -> StoreManifest:
    """A manifest blob must be JSON of a known image manifest type with a config and layers."""
    try:
        document = json.loads(data)
    except ValueError:
        raise BaseImageError(f"the manifest of {where} is not JSON", "remove the manifest cache entry and retry") from None
    manifest = StoreManifest(data)
    if not isinstance(document, dict) or manifest.media_type not in GZIP_LAYER or not manifest.config_digest:
        raise BaseImageError(f"the manifest of {where} is not a single-platform image manifest ({document.get('mediaType') if isinstance(document, dict) else '?'})",
                             "use a single-platform base image")
    return manifest


def thin_blob(layer_tar: bytes) -> bytes:
    """The thin layer as the containerd store keeps and pushes it: gzip with no name and no time, so the bytes repeat."""
    return gzip.compress(layer_tar, compresslevel=THIN_GZIP_LEVEL, mtime=0)


def derived_store_manifest(base: StoreManifest, config_bytes: bytes, blob: bytes) -> bytes:
    """The derived image's manifest: the base's own layer descriptors as the store holds them, then the thin layer."""
    family = base.media_type
    document = {
        "schemaVersion": 2, "mediaType": family,
        "config": {"mediaType": CONFIG_TYPE[family], "digest": sha256_digest(config_bytes), "size": len(config_bytes)},
        "layers": [*base.layers, {"mediaType": GZIP_LAYER[family], "digest": sha256_digest(blob), "size": len(blob)}],
    }
    return canonical_json(document)


class ContainerdStore:
    """The `ImageStore` of engines that keep images in containerd (the snapshotter store)."""

    name = CONTAINERD
    id_meaning = "manifest digest"
    keeps_manifests = True
    digests_loaded_images = True

    def derived_id(self, config_bytes: bytes, manifest_bytes: bytes | None) -> str:
        if manifest_bytes is None:
            raise ValueError("the containerd store needs the derived manifest")
        return sha256_digest(manifest_bytes)

    def pulled_id(self, config_digest: str, pinned: str) -> str:
        return pinned.rpartition("@")[2]


STORE = ContainerdStore()
