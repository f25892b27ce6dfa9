"""Pure: a directory's metadata from the first entry of the archive `docker cp CONTAINER:PATH -` streams."""

from __future__ import annotations

import tarfile
from typing import BinaryIO

from kvbake.engines.core.savefile import DirMeta

PERMISSION_BITS = 0o7777  # the archive's mode carries the file type too; a layer's directory entry keeps only these


def first_entry(stream: BinaryIO) -> tarfile.TarInfo | None:
    """The archive's first entry, read without going further (the rest of the stream is never touched)."""
    try:
        return tarfile.open(fileobj=stream, mode="r|").next()
    except tarfile.ReadError:
        return None


def dir_meta_of(entry: tarfile.TarInfo | None) -> DirMeta | None:
    """The entry's mode, owner and whole-second mtime when it is a directory; None for a file, a link or nothing."""
    if entry is None or not entry.isdir():
        return None
    return DirMeta(entry.mode & PERMISSION_BITS, entry.uid, entry.gid, int(entry.mtime))
