"""Manifests as a registry serves them: media types, digest checks and shape checks (pure, no network)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from kvbake.digests import sha256_digest
from kvbake.errors import RegistryError

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
IMAGE_TYPES = (DOCKER_MANIFEST, OCI_MANIFEST)
INDEX_TYPES = (DOCKER_LIST, OCI_INDEX)
MANIFEST_ACCEPT = ", ".join((*IMAGE_TYPES, *INDEX_TYPES))
FIX_PROXY = "check the registry and any proxy in front of it"


@dataclass(frozen=True)
class RemoteManifest:
    """A manifest as the registry serves it: its digest, media type and parsed body."""

    digest: str
    media_type: str
    data: Mapping[str, Any]
    raw: bytes = b""

    @property
    def config_digest(self) -> str | None:
        """The config blob's digest (None for an index or list, whatever else its body holds)."""
        if self.media_type in INDEX_TYPES:
            return None
        return (self.data.get("config") or {}).get("digest")

    @property
    def layers(self) -> list[tuple[str, int]]:
        """(digest, compressed size) of every layer, in order (none for an index or list)."""
        if self.media_type in INDEX_TYPES:
            return []
        return [(layer["digest"], int(layer["size"])) for layer in self.data.get("layers") or []]


def _is_digest(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("sha256:") and len(value) == 71


def _descriptor_flaw(value: Any, where: str) -> str | None:
    """Why `value` is not a descriptor ({digest, size}), or None."""
    if not isinstance(value, dict):
        return f"{where} is not an object"
    if not _is_digest(value.get("digest")):
        return f"{where} has no sha256 digest"
    size = value.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return f"{where} has no byte size"
    return None


def shape_flaw(media_type: str, data: Mapping[str, Any]) -> str | None:
    """Why a parsed manifest of `media_type` cannot be read (pure), or None."""
    if media_type in INDEX_TYPES:
        entries = data.get("manifests")
        if not isinstance(entries, list):
            return "its manifests are not a list"
        return next((flaw for i, e in enumerate(entries) if (flaw := _descriptor_flaw(e, f"manifests[{i}]"))), None)
    flaw = _descriptor_flaw(data.get("config"), "config")
    if flaw:
        return flaw
    layers = data.get("layers")
    if not isinstance(layers, list):
        return "its layers are not a list"
    return next((flaw for i, layer in enumerate(layers) if (flaw := _descriptor_flaw(layer, f"layers[{i}]"))), None)


def _media_type(served: str, data: Mapping[str, Any], what: str) -> str:
    """The manifest's media type: the Content-Type must be one kvbake asked for and agree with the body."""
    declared = data.get("mediaType")
    if served not in (*IMAGE_TYPES, *INDEX_TYPES):
        raise RegistryError(f"the registry served {what} as {served or 'no Content-Type'}, not as a manifest type kvbake asked for",
                            f"push with a current engine (Docker schema 2 or OCI manifests), or {FIX_PROXY}")
    if declared is not None and declared != served:
        raise RegistryError(f"the registry served {what} as {served} but its body says {str(declared)[:80]}", FIX_PROXY)
    return served


def parse_manifest(body: bytes, header_digest: str | None, content_type: str, reference: str | None = None) -> RemoteManifest:
    """Check the body against the digest header (and a digest reference), its media type and shape; parse it."""
    digest = sha256_digest(body)
    if header_digest and header_digest != digest:
        raise RegistryError(f"the registry says the manifest is {header_digest[:80]} but its bytes hash to {digest}",
                            "the registry or a proxy altered the manifest; check the registry")
    if reference and reference.startswith("sha256:") and reference != digest:
        raise RegistryError(f"the registry answered the manifest {reference[:80]} with bytes that hash to {digest}", FIX_PROXY)
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise RegistryError(f"the manifest {digest} is not JSON", "check the registry") from None
    if not isinstance(data, dict):
        raise RegistryError(f"the manifest {digest} is not a JSON object", "check the registry")
    media_type = _media_type(content_type.split(";")[0].strip().lower(), data, f"the manifest {digest}")
    flaw = shape_flaw(media_type, data)
    if flaw:
        raise RegistryError(f"the manifest {digest} is malformed: {flaw}", "check the registry, then push again")
    return RemoteManifest(digest, media_type, data, body)
