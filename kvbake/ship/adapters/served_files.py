"""Adapter: the files a running serve holds under its source root that its image does not, and the image's own copies."""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, Iterator, Mapping

from kvbake.bake.adapters.extract import Extractor
from kvbake.bake.core.served_overlay import (ServedOverlay, container_name, overlay_mounts, relative_to_root, served_overlay,
                                             served_paths, under_root)
from kvbake.engines.adapters.client import Engine
from kvbake.errors import IntegrityError, UsageError
from kvbake.ship.adapters.serve_reader import RankServe
from kvbake.ship.core.process_checks import changed_files
from kvbake.ship.core.startup_hooks import hook_failures, mount_sources, unproven_hooks


def regular_files(folder: Path) -> Iterator[tuple[str, bytes]]:
    """(relative path, bytes) of every regular file below a copied-out folder (or the one file it is)."""
    if folder.is_file() and not folder.is_symlink():
        yield "", folder.read_bytes()
        return
    for root, _, names in os.walk(folder):
        for name in names:
            path = Path(root) / name
            if stat.S_ISREG(path.lstat().st_mode):
                yield path.relative_to(folder).as_posix(), path.read_bytes()


def mounted_files(engine: Engine, container: Mapping[str, Any], source_root: str, scratch: Path) -> dict[str, tuple[bytes, str]]:
    """Every file the container's bind mounts put at or under the source root, as the running container shows it."""
    found = {}
    for number, (target, source) in enumerate(overlay_mounts(container, source_root)):
        copied = scratch / f"mount-{number}"
        if not engine.copy_out(str(container["Id"]), target, copied):
            continue
        for inner, data in regular_files(copied):
            path = relative_to_root(f"{target}/{inner}" if inner else target, source_root)
            found[path] = (data, f"mounted from {source}")
    return found


def changed_in_layer(engine: Engine, container: Mapping[str, Any], changes: Mapping[str, str], source_root: str,
                     scratch: Path) -> dict[str, tuple[bytes, str]]:
    """Every file the container's writable layer changed or added under the source root (outside its mounts)."""
    mounted = [target for target, _ in overlay_mounts(container, source_root)]
    found = {}
    for number, (path, kind) in enumerate(changed_files(changes, source_root)):
        if any(under_root(path, target) for target in mounted):
            continue
        if kind == "D":
            raise UsageError(f"init: {container_name(container)} deleted {path} under the source root in its writable layer; "
                             "a chain can change or add a file, never delete one",
                             f"put the file back (docker cp it from the image), or recreate the serve, then run init again")
        copied = scratch / f"changed-{number}"
        if engine.copy_out(str(container["Id"]), path, copied):
            for inner, data in regular_files(copied):
                found[relative_to_root(f"{path}/{inner}" if inner else path, source_root)] = (data, "changed in the container's writable layer")
    return found


def layer_digests(engine: Engine, container: str, paths: list[str]) -> dict[str, str]:
    """The sha256 of each of these files as the running container holds them; a path that is gone, or is a folder, is
    left out."""
    found = {}
    with tempfile.TemporaryDirectory(prefix="kvbake-layer-") as folder:
        for number, path in enumerate(paths):
            copied = Path(folder) / str(number)
            if engine.copy_out(container, path, copied) and copied.is_file() and not copied.is_symlink():
                found[path] = hashlib.sha256(copied.read_bytes()).hexdigest()
    return found


def image_digests(engine: Engine, image: str, paths: list[str]) -> dict[str, str | None]:
    """The sha256 of the image's own file at each absolute path (None: the image has no such file)."""
    if not paths:
        return {}
    with engine.created_container(image) as created:
        extractor = Extractor(engine, created, "/")
        return {path: hashlib.sha256(found.data).hexdigest() if (found := extractor.file(path.lstrip("/"))) else None for path in paths}


def foreign_hooks(engine: Engine, container: Mapping[str, Any], rank: RankServe, where: str) -> list[str]:
    """The start-up hooks the rank's serves run that its image does not hold with the same bytes, one line each."""
    mounts = mount_sources(container)
    unproven = unproven_hooks(rank.origins, rank.changes, mounts)
    return hook_failures(where, unproven, image_digests(engine, str(container["Image"]), sorted(unproven)), mounts)


def refuse_foreign_hooks(command: str, ranks: list[tuple[str, Engine, Mapping[str, Any], RankServe]]) -> None:
    """Before anything is written: a serve whose interpreter runs a start-up hook its image does not hold is refused,
    since the switch set read from its environment may not be the one it runs."""
    found = [line for node, engine, container, rank in ranks for line in foreign_hooks(engine, container, rank, f"{command}: {node}")]
    if found:
        raise IntegrityError("; ".join(found), "remove the hook (its mount, or its copy in the container) and start the serve "
                             "again, or bake what it does into the chain; nothing was written")


def image_files(engine: Engine, image: str, paths: list[str], source_root: str) -> dict[str, bytes | None]:
    """The image's own bytes of each path under the source root (None: the image has no such file)."""
    if not paths:
        return {}
    with engine.created_container(image) as created:
        extractor = Extractor(engine, created, source_root)
        return {path: (found.data if (found := extractor.file(path)) else None) for path in paths}


def read_served_overlay(engine: Engine, container: Mapping[str, Any], changes: Mapping[str, str],
                        source_root: str) -> tuple[ServedOverlay, dict[str, bytes]]:
    """What one running serve runs under its source root that its image does not hold, with the bytes."""
    with tempfile.TemporaryDirectory(prefix="kvbake-served-") as folder:
        scratch = Path(folder)
        served = {**changed_in_layer(engine, container, changes, source_root, scratch),
                  **mounted_files(engine, container, source_root, scratch)}
    kept = {path: served[path] for path in served_paths(served)}
    base = image_files(engine, str(container["Image"]), list(kept), source_root)
    return served_overlay(source_root, str(container["Image"]), kept, base)
