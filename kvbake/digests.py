"""Hashes and canonical JSON: the byte-level identities every other module compares."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_digest(data: bytes) -> str:
    """An OCI-style digest string: 'sha256:<hex>'."""
    return "sha256:" + sha256_hex(data)


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no insignificant whitespace, UTF-8: the same value always gives the same bytes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def tree_sha256(entries: Iterable[tuple[str, str]]) -> str:
    """A hash of a set of (path, sha256) pairs, independent of their order."""
    lines = "".join(f"{sha}  {path}\n" for path, sha in sorted(entries))
    return sha256_hex(lines.encode("utf-8"))
