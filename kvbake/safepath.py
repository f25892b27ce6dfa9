"""Resolve a manifest-relative path and refuse anything absolute, with `..`, or escaping through a symlink."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from kvbake.errors import ManifestError


def resolve_inside(root: Path, relative: str, what: str) -> Path:
    """Return root/relative, resolved, or raise when it is absolute or leaves root."""
    pure = PurePosixPath(relative)
    if pure.is_absolute():
        raise ManifestError(f"{what} {relative!r} is absolute", "give a path relative to the manifest's folder")
    if "\\" in relative:
        raise ManifestError(f"{what} {relative!r} contains a backslash", "use forward slashes, relative to the manifest's folder")
    if ".." in pure.parts:
        raise ManifestError(f"{what} {relative!r} contains '..'", "give a path inside the manifest's folder")
    real_root = root.resolve()
    resolved = (real_root / pure).resolve()
    if resolved != real_root and real_root not in resolved.parents:
        raise ManifestError(f"{what} {relative!r} escapes the manifest's folder through a symlink", "replace the symlink with the file itself")
    return resolved

