"""Crash-safe file writes: a unique temporary file in the same folder, fsync, rename, fsync the folder."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

PARTIAL_SUFFIX = ".partial"


def write_atomic(path: Path, data: bytes, before_rename: Callable[[], None] | None = None) -> None:
    """After a crash at any point, `path` holds either its old bytes or `data`, never a mix.
    `before_rename` runs once the temporary file is complete and synced, just before it replaces `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=PARTIAL_SUFFIX)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        if before_rename is not None:
            before_rename()
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    fsync_folder(path.parent)


def partial_files(path: Path) -> list[Path]:
    """Temporary files an interrupted write_atomic of `path` left behind."""
    if not path.parent.is_dir():
        return []
    return sorted(p for p in path.parent.glob(f".{path.name}.*{PARTIAL_SUFFIX}") if p.is_file())


def fsync_folder(folder: Path) -> None:
    """Make the folder's entries (names created, renamed or removed in it) durable."""
    handle = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def fsync_tree(root: Path) -> None:
    """fsync every file and folder below `root`, and `root` itself."""
    for folder, _, names in os.walk(root):
        for name in names:
            handle = os.open(Path(folder, name), os.O_RDONLY)
            try:
                os.fsync(handle)
            finally:
                os.close(handle)
        fsync_folder(Path(folder))


def rename_durably(source: Path, target: Path) -> None:
    """Rename within one folder, then make the rename durable."""
    os.rename(source, target)
    fsync_folder(target.parent)
