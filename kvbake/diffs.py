"""Parse a unified diff (with unidiff) into the files it touches; refuse paths outside the source root."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

import unidiff

from kvbake.errors import PatchError

MODIFY = "modify"
CREATE = "create"


@dataclass(frozen=True)
class FileChange:
    """One file a patch touches, relative to the source root."""

    path: str
    change: str
    added_lines: tuple[str, ...]


def parse_patch(patch_id: str, text: str) -> tuple[FileChange, ...]:
    """The files a patch touches, in the patch's order; every path is checked."""
    try:
        patch_set = unidiff.PatchSet(text)
    except unidiff.UnidiffParseError as err:
        raise PatchError(f"patch {patch_id} is not a unified diff: {err}", "regenerate it with git diff or git format-patch") from None
    if not patch_set:
        raise PatchError(f"patch {patch_id} touches no file", "remove it from the chain or regenerate it")
    changes = tuple(_file_change(patch_id, patched) for patched in patch_set)
    paths = [c.path for c in changes]
    for path in sorted({p for p in paths if paths.count(p) > 1}):
        raise PatchError(f"patch {patch_id} touches {path} in two sections", "regenerate the patch so each file appears once")
    return changes


def _file_change(patch_id: str, patched: unidiff.PatchedFile) -> FileChange:
    if patched.is_binary_file:
        raise PatchError(f"patch {patch_id} has a binary section for {patched.path}", "keep the chain to text changes")
    if patched.is_removed_file:
        raise PatchError(f"patch {patch_id} deletes {patched.path}", "deleting base files is not supported; gate the code instead")
    if patched.is_rename or patched.source_file.removeprefix("a/") != patched.target_file.removeprefix("b/") and not patched.is_added_file:
        raise PatchError(f"patch {patch_id} renames {patched.source_file} to {patched.target_file}", "renames are not supported; create and gate instead")
    path = relative_source_path(patch_id, patched.target_file)
    if not patched and not patched.is_added_file:
        raise PatchError(f"patch {patch_id} section for {path} has no hunk", "regenerate the patch")
    added = tuple(line.value for hunk in patched for line in hunk if line.is_added)
    return FileChange(path=path, change=CREATE if patched.is_added_file else MODIFY, added_lines=added)


def relative_source_path(patch_id: str, target: str) -> str:
    """Strip git's b/ prefix and refuse absolute paths, `..` and empty paths."""
    raw = target[2:] if target.startswith("b/") else target
    pure = PurePosixPath(raw)
    if pure.is_absolute() or ".." in pure.parts or raw in ("", ".") or target.startswith("/"):
        raise PatchError(f"patch {patch_id} touches {target!r}, outside the source root", "make every path in the patch relative to the source root (a/…, b/…)")
    return str(pure)
