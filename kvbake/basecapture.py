"""Adapter: read the base's raw config once (at lock time) from a streamed `docker save`, keeping no layer bytes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kvbake.digests import sha256_digest
from kvbake.engine import DirMeta, Engine, read_tar_members
from kvbake.errors import BaseImageError


@dataclass(frozen=True)
class CapturedBase:
    """The raw config bytes' parsed form and each layer's uncompressed size."""

    config: dict[str, Any]
    config_digest: str
    layer_sizes: tuple[int, ...]
    dirs: dict[str, DirMeta]


def capture_base(engine: Engine, reference: str, image_id: str, wanted_dirs: frozenset[str]) -> CapturedBase:
    """Stream `docker save` once: keep the config, check it hashes to the image ID, and read the wanted directories'
    metadata from the topmost layer that holds each of them."""
    scan = read_tar_members(engine.save_stream(reference), lambda name: name.endswith(".json"), wanted_dirs)
    try:
        entry = json.loads(scan.files["manifest.json"])[0]
        config_bytes = scan.files[entry["Config"]]
        sizes = tuple(scan.sizes[layer] for layer in entry["Layers"])
    except (KeyError, IndexError, ValueError) as err:
        raise BaseImageError(f"docker save of {reference} has no readable manifest.json ({err})", "check the engine version (classic store expected)") from None
    digest = sha256_digest(config_bytes)
    if digest != image_id:
        raise BaseImageError(f"the saved config of {reference} hashes to {digest[:19]}, not its ID {image_id[:19]}",
                             "this engine's image ID is not the config digest (containerd store?); use the classic overlay2 store")
    dirs: dict[str, DirMeta] = {}
    for layer in entry["Layers"]:
        dirs.update(scan.dirs.get(layer, {}))
    return CapturedBase(json.loads(config_bytes), digest, sizes, dirs)
