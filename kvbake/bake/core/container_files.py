"""What a running serve's own reading of its files says: links and their targets, tmpfs mounts, permission bits."""

from __future__ import annotations

import ast
import posixpath
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from kvbake.bake.core.served_overlay import container_name, under_root
from kvbake.errors import UsageError

# Run by the serve's python3 inside its container (docker exec): it reads each path as the serve sees it, a link
# followed to its target, a folder walked without following the links it holds (each is read as a file); one Python
# literal, a list of {path, link, mode, data}, where a link's target that cannot be read as a file gives no data. It
# imports no json nor base64: a python3-minimal (Debian's) has neither.
READER = r"""
import os, stat, sys
def entry(path):
    link = os.readlink(path) if os.path.islink(path) else None
    try:
        with open(path, "rb") as opened:
            data = opened.read()
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        data, mode = None, None
    return {"path": path, "link": link, "mode": mode, "data": data}
def walk(top):
    if os.path.islink(top) or not os.path.isdir(top):
        return [entry(top)] if os.path.lexists(top) else []
    found = []
    for root, dirs, files in os.walk(top):
        found += [entry(os.path.join(root, name)) for name in files]
        found += [entry(os.path.join(root, name)) for name in dirs if os.path.islink(os.path.join(root, name))]
    return found
print(repr([found for top in sys.argv[1:] for found in walk(top)]))
"""
EXECUTABLE = 0o111  # the only mode a git patch can state (100644 / 100755), and the only one a chain could carry


@dataclass(frozen=True)
class ServedCopy:
    """One file as a serve runs it: its bytes, how it got there (a link says so, and where it points), its mode."""

    data: bytes
    how: str
    mode: int


@dataclass(frozen=True)
class ContainerFile:
    """One path as the container's own python3 read it: the link's target (None: not a link), mode and bytes (None:
    the path, or the link's target, cannot be read as a file)."""

    path: str
    link: str | None
    mode: int | None
    data: bytes | None


def parse_reading(text: str) -> tuple[ContainerFile, ...]:
    """The files READER printed (a literal, read as one, never run), sorted by path."""
    entries: Any = ast.literal_eval(text.strip())
    return tuple(sorted((ContainerFile(str(e["path"]), e["link"], e["mode"], e["data"]) for e in entries), key=lambda found: found.path))


def link_note(link: str | None) -> str:
    """What a served path's record adds when the path is a symbolic link: where it points."""
    return f", a symbolic link to {link} (its target's bytes)" if link is not None else ""


def served_copy(found: ContainerFile, how: str, name: str) -> ServedCopy:
    """A file the container read, as the serve runs it; a path (or a link's target) that cannot be read is refused."""
    if found.data is None or found.mode is None:
        what = f"is a symbolic link to {found.link}, which cannot be read as a file (dangling, or a folder)" if found.link is not None \
            else "cannot be read as a file"
        raise UsageError(f"init: {name} serves {found.path}, which {what}; a chain bakes files only",
                         "point the link at a file (or replace it with the file), or remove it, then run init again")
    return ServedCopy(found.data, how + link_note(found.link), found.mode)


def tmpfs_targets(container: Mapping[str, Any], source_root: str) -> tuple[str, ...]:
    """Every tmpfs at or under the source root (`--tmpfs` in HostConfig.Tmpfs, `--mount type=tmpfs` in Mounts), sorted;
    one over a folder above it is refused (it replaces the whole package tree, which no chain can state)."""
    targets = {str(path) for path in ((container.get("HostConfig") or {}).get("Tmpfs") or {})}
    targets |= {str(m.get("Destination", "")) for m in container.get("Mounts") or () if m.get("Type") == "tmpfs"}
    found = []
    for target in sorted(targets):
        if under_root(target, source_root):
            found.append(target)
        elif source_root.startswith(target.rstrip("/") + "/"):
            raise UsageError(f"init: {container_name(container)} mounts a tmpfs at {target}, a folder above the source "
                             f"root {source_root}: it replaces the whole package tree, which no chain can state",
                             "put only the patched files (or their folders) under the source root, then run init again")
    return tuple(found)


def mode_changes(served_modes: Mapping[str, int], base_modes: Mapping[str, int | None]) -> tuple[str, ...]:
    """The paths the serve runs executable where the image's file is not, or the other way round (a new file has no
    mode to differ from: the chain creates it as the thin layer does)."""
    return tuple(sorted(path for path, mode in served_modes.items()
                        if (base := base_modes.get(path)) is not None and bool(mode & EXECUTABLE) != bool(base & EXECUTABLE)))


def refuse_mode_changes(name: str, served_modes: Mapping[str, int], base_modes: Mapping[str, int | None], source_root: str) -> None:
    """A served file whose executable bits differ from the image's is refused, named: a chain carries bytes, never a mode."""
    changed = mode_changes(served_modes, base_modes)
    if changed:
        shown = ", ".join(f"{posixpath.join(source_root, path)} ({served_modes[path]:04o}, the image's {base_modes.get(path) or 0:04o})" for path in changed)
        raise UsageError(f"init: {name} serves {shown} with another mode than its image; a chain changes bytes, never a mode",
                         "give the file the image's mode back (chmod in the container, or on the mounted file), then run init again")


def hidden_image_files(image_paths: Mapping[str, Iterable[str]], served: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """By mount target: the image's files under it (paths under the source root) that the mount holds no file at, so
    the serve runs without them. Python's bytecode caches are left out (the interpreter writes them again)."""
    shown = set(served)
    hidden = {}
    for target, paths in image_paths.items():
        missing = tuple(sorted(path for path in paths if path not in shown and "__pycache__" not in path.split("/")
                               and not path.endswith(".pyc")))
        if missing:
            hidden[target] = missing
    return hidden


def refuse_hidden_image_files(name: str, hidden: Mapping[str, tuple[str, ...]], source_root: str) -> None:
    """A mount that hides files of the image is refused, each named: the serve runs without them while the baked image
    would hold them, and a chain changes or adds a file, never removes one."""
    if not hidden:
        return
    shown = "; ".join(f"{target} hides {', '.join(posixpath.join(source_root, path) for path in paths)}" for target, paths in hidden.items())
    raise UsageError(f"init: {name} mounts a folder over its image's files, which the serve then runs without ({shown}); "
                     "a chain changes or adds a file, never removes one",
                     "put the hidden files into the mounted folder (copy them from the image), or mount only the patched "
                     "files, then run init again")
