"""Adapter: copy only the touched files (and the names of their cached bytecode) out of a never-started container."""

from __future__ import annotations

import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from kvbake.digests import sha256_hex
from kvbake.engines.adapters.client import Engine


@dataclass(frozen=True)
class BaseFile:
    """A file as the base image holds it."""

    path: str
    data: bytes
    mode: int
    uid: int
    gid: int
    mtime: int = 0

    @property
    def sha256(self) -> str:
        return sha256_hex(self.data)


def stale_bytecode_names(module: str, cached: list[str]) -> list[str]:
    """The bytecode files in __pycache__ that belong to `module` (e.g. mod.cpython-311.pyc, mod.cpython-311.opt-1.pyc)."""
    stem = PurePosixPath(module).stem
    return sorted(name for name in cached if name.startswith(stem + ".") and name.endswith(".pyc") and name.count(".") >= 2)


class Extractor:
    """Copies named paths out of one image, through one created container."""

    def __init__(self, engine: Engine, container: str, source_root: str) -> None:
        self.engine = engine
        self.container = container
        self.source_root = source_root
        self._listings: dict[str, list[str] | None] = {}

    def _inside(self, relative: str) -> str:
        return str(PurePosixPath(self.source_root) / relative)

    def file(self, relative: str) -> BaseFile | None:
        """One regular file with its mode and owner, or None when absent."""
        with tempfile.TemporaryDirectory(prefix="kvbake-cp-") as tmp:
            target = Path(tmp) / "f"
            if not self.engine.copy_out(self.container, self._inside(relative), target):
                return None
            info = target.lstat()
            if not stat.S_ISREG(info.st_mode):
                return None
            return BaseFile(relative, target.read_bytes(), stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid, int(info.st_mtime))

    def listing(self, relative_dir: str) -> list[str] | None:
        """Names inside a directory (copied out whole, once; use for small folders such as __pycache__), or None when absent."""
        if relative_dir not in self._listings:
            self._listings[relative_dir] = self._list(relative_dir)
        return self._listings[relative_dir]

    def _list(self, relative_dir: str) -> list[str] | None:
        with tempfile.TemporaryDirectory(prefix="kvbake-cp-") as tmp:
            target = Path(tmp) / "d"
            if not self.engine.copy_out(self.container, self._inside(relative_dir), target):
                return None
            return sorted(os.listdir(target)) if target.is_dir() else None

    def present(self, relative: str) -> bool:
        """Whether any entry of that name is in its folder, read from the folder's listing (one copy per folder)."""
        parent = PurePosixPath(relative).parent
        return PurePosixPath(relative).name in (self.listing(str(parent)) or [])

    def stale_bytecode(self, module: str) -> list[str]:
        """Paths (relative to the source root) of cached bytecode for a module the chain replaces or creates."""
        cache_dir = str(PurePosixPath(module).parent / "__pycache__")
        names = self.listing(cache_dir) or []
        return [f"{cache_dir}/{name}" for name in stale_bytecode_names(module, names)]
