"""Apply the chain patch by patch in an isolated tree, checking every touched file's hash after each patch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kvbake.bake.core.diffs import CREATE, FileChange, parse_patch
from kvbake.bake.core.nofollow import NotRegularFile, read_regular
from kvbake.digests import sha256_hex
from kvbake.errors import PatchError
from kvbake.lock import Lock, PatchFileHashes
from kvbake.manifest import ChainPatch, Manifest


class Applier(Protocol):
    """What the chain needs from a patch tool (bake/adapters/gitapply.py satisfies it)."""

    def apply_strictly(self, label: str, patch: Path, tree: Path) -> None: ...

    def applies_reversed(self, patch: Path, tree: Path) -> bool: ...


@dataclass(frozen=True)
class ChainStep:
    """One applied patch: its identity and each file's before and after hash."""

    patch: ChainPatch
    sha256: str
    files: tuple[PatchFileHashes, ...]


def read_patch(patch: ChainPatch) -> tuple[bytes, tuple[FileChange, ...]]:
    """The patch bytes and the files they touch; a missing file is an error naming the manifest entry."""
    try:
        data = patch.path.read_bytes()
    except FileNotFoundError:
        raise PatchError(f"patch {patch.id}: file {patch.file} is missing", "restore it, or run python build.py lock --donor DIR to import it") from None
    except IsADirectoryError:
        raise PatchError(f"patch {patch.id}: {patch.file} is a directory, not a patch file", "point chain[].file at the patch file") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise PatchError(f"patch {patch.id}: {patch.file} is not UTF-8 text (byte {err.start})", "save the patch as UTF-8") from None
    return data, parse_patch(patch.id, text)


def first_touches(manifest: Manifest) -> dict[str, str]:
    """Each touched path and how the chain first touches it (modify means it must come from the base)."""
    first: dict[str, str] = {}
    for patch in manifest.chain:
        for change in read_patch(patch)[1]:
            first.setdefault(change.path, change.change)
    return first


def read_tree_file(label: str, tree: Path, path: str) -> bytes | None:
    """A touched file's bytes, opened without following symlinks; None when absent; PatchError when not a regular file."""
    try:
        return read_regular(tree, path)
    except NotRegularFile as err:
        raise PatchError(f"{label}: {path} in the patched tree is {err.kind}, not a regular file",
                         "the chain may only edit and create regular files; check the patch and the base image") from None


def read_patched_tree(tree: Path, paths) -> dict[str, bytes]:
    """The final bytes of every touched path (for the layer and overlay/), each a regular file read without following links."""
    files = {}
    for path in paths:
        data = read_tree_file("the patched tree", tree, path)
        if data is None:
            raise PatchError(f"the patched tree: {path} is missing after the chain", "check the chain; every touched file must exist at the end")
        files[path] = data
    return files


def file_hash(tree: Path, path: str, label: str = "the patched tree") -> str | None:
    data = read_tree_file(label, tree, path)
    return None if data is None else sha256_hex(data)


def apply_chain(manifest: Manifest, tree: Path, applier: Applier, lock: Lock | None = None) -> tuple[ChainStep, ...]:
    """Apply every patch in order; with a lock, refuse any patch or file hash that differs from it."""
    steps: list[ChainStep] = []
    touched_so_far: dict[str, str] = {}
    total = len(manifest.chain)
    if lock is not None and [p.id for p in lock.patches] != [p.id for p in manifest.chain]:
        raise PatchError(f"the lock pins patches {', '.join(p.id for p in lock.patches)} but the chain is {', '.join(p.id for p in manifest.chain)}",
                         "review the chain and run python build.py lock")
    parsed = [read_patch(patch) for patch in manifest.chain]  # every patch is refused or accepted before the first is applied
    for index, (patch, read) in enumerate(zip(manifest.chain, parsed), start=1):
        label = f"patch {patch.id} ({index}/{total})"
        step = apply_one(label, patch, read, tree, applier, touched_so_far, lock.patches[index - 1] if lock else None)
        for item in step.files:
            touched_so_far[item.path] = patch.id
        steps.append(step)
    return tuple(steps)


def apply_one(label: str, patch: ChainPatch, read: tuple[bytes, tuple[FileChange, ...]], tree: Path, applier: Applier,
              touched: dict[str, str], locked) -> ChainStep:
    data, changes = read
    digest = sha256_hex(data)
    if locked is not None and (locked.id != patch.id or locked.sha256 != digest):
        raise PatchError(f"{label}: sha256 {digest[:12]}… differs from the lock's {locked.sha256[:12]}…",
                         "restore the pinned patch file, or review it and run python build.py lock")
    before = {c.path: _before_state(label, tree, c) for c in changes}
    try:
        applier.apply_strictly(label, patch.path, tree)
    except PatchError as err:
        raise _diagnose(label, patch, tree, applier, changes, touched) or err
    files = tuple(PatchFileHashes(c.path, c.change, before[c.path], _after_hash(label, tree, c.path)) for c in changes)
    if locked is not None:
        _check_after_hashes(label, files, locked.files)
    return ChainStep(patch, digest, files)


def _after_hash(label: str, tree: Path, path: str) -> str:
    after = file_hash(tree, path, label)
    if after is None:
        raise PatchError(f"{label}: {path} is missing after the patch", "report this: git applied the patch but the file is gone")
    return after


def _before_state(label: str, tree: Path, change: FileChange) -> str | None:
    current = file_hash(tree, change.path, label)
    if change.change == CREATE and current is not None:
        raise PatchError(f"{label}: creates {change.path}, which already exists (already applied?)", "drop the duplicate patch or regenerate it")
    if change.change != CREATE and current is None:
        raise PatchError(f"{label}: modifies {change.path}, which is not in the base image's source root", "check base.source_root and the patch paths")
    return current


def _diagnose(label: str, patch: ChainPatch, tree: Path, applier: Applier, changes, touched: dict[str, str]) -> PatchError | None:
    """Name the likely state when the patch applies in reverse: already applied, or reversed."""
    if not applier.applies_reversed(patch.path, tree):
        return None
    earlier = sorted({touched[c.path] for c in changes if c.path in touched})
    if earlier:
        return PatchError(f"{label}: is already applied (its change is already in the tree after patch {', '.join(earlier)})",
                          "remove the duplicate patch from the chain")
    return PatchError(f"{label}: is reversed, or its change is already in the base image", "regenerate the patch as base→patched (git diff a/ b/), or pick the right base")


def _check_after_hashes(label: str, files: tuple[PatchFileHashes, ...], expected: tuple[PatchFileHashes, ...]) -> None:
    wanted = {f.path: f.after for f in expected}
    for item in files:
        if item.path not in wanted:
            raise PatchError(f"{label}: touches {item.path}, which the lock does not list for it", "review the patch and run python build.py lock")
        if item.after != wanted[item.path]:
            raise PatchError(f"{label}: {item.path} has sha256 {item.after[:12]}… after the patch, the lock says {wanted[item.path][:12]}…",
                             "the patch or the base differs from what was locked; restore them or re-lock")
    missing = sorted(set(wanted) - {f.path for f in files})
    if missing:
        raise PatchError(f"{label}: no longer touches {', '.join(missing)}", "review the patch and run python build.py lock")
