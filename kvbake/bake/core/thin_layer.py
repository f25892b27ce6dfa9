"""The thin layer as a deterministic tar: sorted entries, fixed mtime, base metadata, stale-bytecode whiteouts."""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass
from pathlib import PurePosixPath

from kvbake.digests import sha256_digest

WHITEOUT_PREFIX = ".wh."
NEW_DIR_MODE = 0o755
NEW_FILE_MODE = 0o644


@dataclass(frozen=True)
class LayerFile:
    """A regular file in the layer, with the metadata it must carry."""

    path: str
    data: bytes
    mode: int
    uid: int
    gid: int


@dataclass(frozen=True)
class LayerDir:
    """A directory entry: either an existing base directory re-stated with its own metadata, or a new one."""

    path: str
    mode: int
    uid: int
    gid: int
    mtime: int


@dataclass(frozen=True)
class ThinLayer:
    """The layer's tar bytes and its diff_id (sha256 of the uncompressed tar)."""

    data: bytes
    diff_id: str
    entries: tuple[str, ...]


def whiteout_path(path: str) -> str:
    """The overlay whiteout entry that removes `path` from the layers below."""
    pure = PurePosixPath(path)
    return str(pure.parent / f"{WHITEOUT_PREFIX}{pure.name}")


def parent_dirs(paths: list[str]) -> list[str]:
    """Every ancestor directory of the given image paths, shallowest first."""
    found = {str(parent) for path in paths for parent in PurePosixPath(path).parents if str(parent) != "."}
    return sorted(found, key=lambda p: (p.count("/"), p))


def in_image(source_root: str, relative: str) -> str:
    """A tar member name (no leading slash) for a path relative to the source root."""
    return str(PurePosixPath(source_root.lstrip("/")) / relative)


def build_layer(files: list[LayerFile], whiteouts: list[str], dirs: list[LayerDir], mtime: int) -> ThinLayer:
    """Write the tar in sorted order. Every parent directory is stated, existing ones with the base's exact metadata:
    an engine that meets a file whose parent has no entry creates that parent in the new layer with its own defaults
    (mode 0755, current time), which would shadow the base directory's metadata."""
    members: list[tuple[str, tarfile.TarInfo, bytes | None]] = []
    for directory in dirs:
        members.append((directory.path, _info(directory.path, tarfile.DIRTYPE, directory.mode, directory.uid, directory.gid, directory.mtime, 0), None))
    for item in files:
        members.append((item.path, _info(item.path, tarfile.REGTYPE, item.mode, item.uid, item.gid, mtime, len(item.data)), item.data))
    for removed in whiteouts:
        name = whiteout_path(removed)
        members.append((name, _info(name, tarfile.REGTYPE, 0o644, 0, 0, mtime, 0), b""))
    names = [m[0] for m in members]
    if len(set(names)) != len(names):
        raise ValueError("duplicate entries in the thin layer")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for _, info, data in sorted(members, key=lambda m: m[0]):
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    data = buffer.getvalue()
    return ThinLayer(data=data, diff_id=sha256_digest(data), entries=tuple(sorted(names)))


def _info(name: str, kind: bytes, mode: int, uid: int, gid: int, mtime: int, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.uid, info.gid = uid, gid
    info.uname = info.gname = ""
    info.mtime = mtime
    info.size = size
    return info
