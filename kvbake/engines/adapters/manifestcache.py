"""Adapter: a content-addressed cache of image manifests, so the containerd store's IDs resolve without a `docker save`."""

from __future__ import annotations

import os
from pathlib import Path

from kvbake.atomicfile import write_atomic
from kvbake.digests import sha256_digest

CACHE_ENV = "KVBAKE_CACHE_DIR"


def cache_root() -> Path:
    """$KVBAKE_CACHE_DIR, else $XDG_CACHE_HOME/kvbake, else ~/.cache/kvbake."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kvbake"


def _path(digest: str) -> Path:
    algorithm, _, hexpart = digest.partition(":")
    return cache_root() / "manifests" / algorithm / hexpart


def get(digest: str) -> bytes | None:
    """The cached bytes of `digest`, or None; an entry whose bytes do not hash to its name is ignored."""
    try:
        data = _path(digest).read_bytes()
    except OSError:
        return None
    return data if sha256_digest(data) == digest else None


def put(data: bytes) -> str:
    """Store `data` under its own digest (atomically: a private temporary file, then rename); returns the digest."""
    digest = sha256_digest(data)
    if get(digest) is None:
        write_atomic(_path(digest), data)
    return digest
