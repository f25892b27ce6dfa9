"""Adapter: the files a running serve holds under its source root that its image does not, and the image's own copies."""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, Iterator, Mapping

from kvbake.bake.adapters.extract import BaseFile, Extractor
from kvbake.bake.core.container_files import (READER, ContainerFile, ServedCopy, hidden_image_files, parse_reading, refuse_hidden_image_files,
                                              refuse_mode_changes, served_copy, tmpfs_targets)
from kvbake.bake.core.served_overlay import (ServedOverlay, container_name, overlay_mounts, relative_to_root, served_overlay,
                                             served_paths, under_root)
from kvbake.engines.adapters.client import Engine
from kvbake.errors import EngineError, IntegrityError, UsageError
from kvbake.ship.adapters.serve_reader import RankServe
from kvbake.ship.core.process_checks import changed_files
from kvbake.ship.core.startup_hooks import hook_failures, mount_sources, unproven_hooks


def regular_files(folder: Path) -> Iterator[tuple[str, bytes]]:
    """(relative path, bytes) of every regular file below a copied-out folder (or the one file it is); a hard link is a
    regular file like any other, read under each of its names."""
    for inner, path in copied_paths(folder):
        if stat.S_ISREG(path.lstat().st_mode):
            yield inner, path.read_bytes()


def copied_links(folder: Path) -> list[str]:
    """The relative path of every symbolic link below a copied-out folder (or "" when the copy is one link): docker cp
    copies a link, not its target, so the container must read what it points at."""
    return [inner for inner, path in copied_paths(folder) if path.is_symlink()]


def copied_paths(folder: Path) -> Iterator[tuple[str, Path]]:
    """(relative path, path) of every entry below a copied-out folder that is not a folder (or the copy itself)."""
    if folder.is_symlink() or not folder.is_dir():
        yield "", folder
        return
    for root, dirs, names in os.walk(folder):
        for name in sorted(names) + sorted(d for d in dirs if (Path(root) / d).is_symlink()):
            path = Path(root) / name
            yield path.relative_to(folder).as_posix(), path


def in_container(engine: Engine, container: Mapping[str, Any], paths: list[str], how: str, source_root: str) -> dict[str, ServedCopy]:
    """These paths (files, links, folders walked) as the running container reads them, by path under the source root."""
    if not paths:
        return {}
    found = read_through(engine, str(container["Id"]), paths)
    return {relative_to_root(f.path, source_root): served_copy(f, how, container_name(container)) for f in found}


def read_through(engine: Engine, container: str, paths: list[str]) -> tuple[ContainerFile, ...]:
    """These paths as the container's own python3 reads them (links followed, folders walked)."""
    return parse_reading(engine.exec_in(container, ["python3", "-c", READER, *paths]))


def copied_files(engine: Engine, container: Mapping[str, Any], path: str, copied: Path, how: str, source_root: str) -> dict[str, ServedCopy]:
    """The files of one path copied out (each by its path under the source root), its links read through the container."""
    def joined(inner: str) -> str:
        return f"{path}/{inner}" if inner else path
    found = {relative_to_root(joined(inner), source_root): ServedCopy(data, how, stat.S_IMODE((copied / inner if inner else copied).stat().st_mode))
             for inner, data in regular_files(copied)}
    return {**found, **in_container(engine, container, [joined(inner) for inner in copied_links(copied)], how, source_root)}


def mounted_files(engine: Engine, container: Mapping[str, Any], source_root: str, scratch: Path) -> dict[str, ServedCopy]:
    """Every file the container's bind mounts put at or under the source root, as the running container shows it."""
    found = {}
    for number, (target, source) in enumerate(overlay_mounts(container, source_root)):
        copied = scratch / f"mount-{number}"
        if engine.copy_out(str(container["Id"]), target, copied):
            found.update(copied_files(engine, container, target, copied, f"mounted from {source}", source_root))
    return found


def tmpfs_files(engine: Engine, container: Mapping[str, Any], source_root: str) -> dict[str, ServedCopy]:
    """Every file in a tmpfs at or under the source root, read through the running container (docker cp would read the
    image's files the tmpfs hides)."""
    found = {}
    for target in tmpfs_targets(container, source_root):
        found.update(in_container(engine, container, [target], f"in a tmpfs at {target}", source_root))
    return found


def changed_in_layer(engine: Engine, container: Mapping[str, Any], changes: Mapping[str, str], source_root: str,
                     scratch: Path) -> dict[str, ServedCopy]:
    """Every file the container's writable layer changed or added under the source root (outside its mounts)."""
    mounted = mount_targets(container, source_root)
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
            found.update(copied_files(engine, container, path, copied, "changed in the container's writable layer", source_root))
    return found


def layer_digests(engine: Engine, container: str, paths: list[str]) -> dict[str, str]:
    """The sha256 of each of these files as the running container holds them, a symbolic link by its target's bytes
    (read through the container: `docker cp` copies the link); a path that is gone, or is a folder, is left out."""
    found, links = {}, []
    with tempfile.TemporaryDirectory(prefix="kvbake-layer-") as folder:
        for number, path in enumerate(paths):
            copied = Path(folder) / str(number)
            if not engine.copy_out(container, path, copied):
                continue
            if copied.is_symlink():
                links.append(path)
            elif copied.is_file():
                found[path] = hashlib.sha256(copied.read_bytes()).hexdigest()
    return {**found, **link_digests(engine, container, links)}


def link_digests(engine: Engine, container: str, links: list[str]) -> dict[str, str]:
    """The sha256 of each link's target as the container's own python3 reads it; a dangling link is left out, and so
    is every link of a container without python3 (what is left out counts as gone where a digest was recorded)."""
    if not links:
        return {}
    try:
        read = read_through(engine, container, links)
    except EngineError:
        return {}
    return {f.path: hashlib.sha256(f.data).hexdigest() for f in read if f.data is not None}


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
    return {path: (found.data if found else None) for path, found in image_copies(engine, image, paths, source_root).items()}


def image_copies(engine: Engine, image: str, paths: list[str], source_root: str) -> dict[str, BaseFile | None]:
    """The image's own file (bytes and mode) of each path under the source root (None: the image has no such file)."""
    if not paths:
        return {}
    with engine.created_container(image) as created:
        extractor = Extractor(engine, created, source_root)
        return {path: extractor.file(path) for path in paths}


def image_paths_under(engine: Engine, image: str, targets: list[str], source_root: str) -> dict[str, tuple[str, ...]]:
    """By target: every file (or link) the image itself holds at or under it, by path under the source root."""
    if not targets:
        return {}
    found = {}
    with engine.created_container(image) as created, tempfile.TemporaryDirectory(prefix="kvbake-image-") as folder:
        for number, target in enumerate(targets):
            copied = Path(folder) / f"image-{number}"
            if engine.copy_out(created, target, copied):
                found[target] = tuple(relative_to_root(f"{target}/{inner}" if inner else target, source_root)
                                      for inner, _ in copied_paths(copied))
    return found


def mount_targets(container: Mapping[str, Any], source_root: str) -> list[str]:
    """Every bind mount and tmpfs at or under the source root."""
    return [target for target, _ in overlay_mounts(container, source_root)] + list(tmpfs_targets(container, source_root))


def read_served_overlay(engine: Engine, container: Mapping[str, Any], changes: Mapping[str, str],
                        source_root: str) -> tuple[ServedOverlay, dict[str, bytes]]:
    """What one running serve runs under its source root that its image does not hold, with the bytes. A mount that
    hides files of the image is refused, named."""
    with tempfile.TemporaryDirectory(prefix="kvbake-served-") as folder:
        scratch = Path(folder)
        served = {**changed_in_layer(engine, container, changes, source_root, scratch),
                  **mounted_files(engine, container, source_root, scratch), **tmpfs_files(engine, container, source_root)}
    under_mounts = image_paths_under(engine, str(container["Image"]), mount_targets(container, source_root), source_root)
    refuse_hidden_image_files(container_name(container), hidden_image_files(under_mounts, served), source_root)
    kept = {path: served[path] for path in served_paths(served)}
    base = image_copies(engine, str(container["Image"]), list(kept), source_root)
    refuse_mode_changes(container_name(container), {path: copy.mode for path, copy in kept.items()},
                        {path: found.mode if found else None for path, found in base.items()}, source_root)
    return served_overlay(source_root, str(container["Image"]), {path: (copy.data, copy.how) for path, copy in kept.items()},
                          {path: found.data if found else None for path, found in base.items()})
