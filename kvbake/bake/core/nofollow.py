"""Read a file below a root folder without following a symlink anywhere on the way; only regular files are read."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path, PurePosixPath

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a named pipe"),
         (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))


class NotRegularFile(Exception):
    """`relative` exists below the root but is not a regular file reached through real directories; `kind` says what it is."""

    def __init__(self, relative: str, kind: str) -> None:
        self.relative, self.kind = relative, kind
        super().__init__(f"{relative} is {kind}, not a regular file")


def read_regular(root: Path, relative: str) -> bytes | None:
    """The bytes of root/relative, or None when it does not exist; NotRegularFile for a symlink (the file or any folder
    above it), a directory, a pipe, a socket or a device."""
    parts = PurePosixPath(relative).parts
    if not parts or parts[0] == "/" or ".." in parts:
        raise NotRegularFile(relative, "not a path inside the folder")
    folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for index, part in enumerate(parts[:-1]):
            opened = _open_below(folder, part, DIR_FLAGS, relative, "/".join(parts[: index + 1]))
            if opened is None:
                return None
            os.close(folder)
            folder = opened
        handle = _open_below(folder, parts[-1], FILE_FLAGS, relative, relative)
        return None if handle is None else _read_fd(handle, relative)
    finally:
        os.close(folder)


def _open_below(folder: int, name: str, flags: int, relative: str, shown: str) -> int | None:
    try:
        return os.open(name, flags, dir_fd=folder)
    except FileNotFoundError:
        return None
    except OSError as err:
        if err.errno not in (errno.ELOOP, errno.EMLINK, errno.ENOTDIR):
            raise NotRegularFile(relative, f"unreadable ({shown}: {err.strerror})") from None
        link = stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
        if shown == relative:
            raise NotRegularFile(relative, "a symlink" if link else f"not a regular file ({err.strerror})") from None
        raise NotRegularFile(relative, f"below a symlink ({shown})" if link else f"below a file that is not a folder ({shown})") from None


def _read_fd(handle: int, relative: str) -> bytes:
    try:
        mode = os.fstat(handle).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(relative, next((kind for test, kind in KINDS if test(mode)), "not a regular file"))
        chunks = []
        while chunk := os.read(handle, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(handle)
