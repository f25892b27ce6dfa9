"""The derived image config and the classic store's thin load archive (Docker's manifest.json), as bytes."""

from __future__ import annotations

import copy
import io
import json
import tarfile
from datetime import datetime, timezone
from typing import Any, Mapping

from kvbake.digests import canonical_json, sha256_digest

DROPPED_KEYS = ("container", "container_config", "docker_version", "id", "parent")


def rfc3339(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def derived_config(base_config: Mapping[str, Any], diff_id: str, labels: Mapping[str, str], created: str, created_by: str) -> bytes:
    """Base config + labels + one layer + one history entry; Env, Entrypoint, Cmd, WorkingDir and User stay the base's."""
    config = copy.deepcopy(dict(base_config))
    for key in DROPPED_KEYS:
        config.pop(key, None)
    runtime = config.setdefault("config", {}) or {}
    config["config"] = runtime
    runtime["Labels"] = {**(runtime.get("Labels") or {}), **labels}
    config["created"] = created
    config["rootfs"] = {"type": "layers", "diff_ids": [*config["rootfs"]["diff_ids"], diff_id]}
    history = list(config.get("history") or [])
    history.append({"created": created, "created_by": created_by, "comment": "kvbake thin layer"})
    config["history"] = history
    return canonical_json(config)


def image_id(config_bytes: bytes) -> str:
    """On the classic store the image ID is the config digest."""
    return sha256_digest(config_bytes)


def archive_members(config_bytes: bytes, base_diff_ids: list[str], thin: bytes) -> list[tuple[str, bytes]]:
    """Files of a classic-store load archive (Docker's manifest.json) that carries only the thin layer; the base layers
    are listed by diff_id but absent, as the engine already holds them."""
    config_hex = sha256_digest(config_bytes).split(":")[1]
    thin_hex = sha256_digest(thin).split(":")[1]
    layer_paths = [f"blobs/sha256/{d.split(':')[1]}" for d in base_diff_ids] + [f"blobs/sha256/{thin_hex}"]
    docker_manifest = [{"Config": f"blobs/sha256/{config_hex}", "RepoTags": None, "Layers": layer_paths}]
    members = [
        (f"blobs/sha256/{config_hex}", config_bytes),
        (f"blobs/sha256/{thin_hex}", thin),
        ("manifest.json", json.dumps(docker_manifest, separators=(",", ":")).encode()),
    ]
    return sorted(members)


def oci_layout_members(config_bytes: bytes, blob: bytes, manifest_bytes: bytes) -> list[tuple[str, bytes]]:
    """An OCI layout for the containerd store: the config, the compressed thin layer and the manifest; base blobs absent."""
    blobs = [(f"blobs/sha256/{sha256_digest(data).split(':')[1]}", data) for data in (config_bytes, blob, manifest_bytes)]
    media_type = json.loads(manifest_bytes)["mediaType"]
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [{"mediaType": media_type, "digest": sha256_digest(manifest_bytes), "size": len(manifest_bytes)}]}
    return sorted([*blobs, ("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", canonical_json(index))])


def write_archive(fileobj: io.RawIOBase, members: list[tuple[str, bytes]], mtime: int) -> None:
    """A deterministic tar of the archive members."""
    with tarfile.open(fileobj=fileobj, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), mtime, 0o644
            tar.addfile(info, io.BytesIO(data))
