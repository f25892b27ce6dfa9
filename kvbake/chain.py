"""Apply the chain patch by patch in an isolated tree, checking every touched file's hash after each patch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kvbake.diffs import CREATE, FileChange, parse_patch
from kvbake.digests import sha256_hex
from kvbake.errors import PatchError
from kvbake.lock import Lock, PatchFileHashes
from kvbake.manifest import ChainPatch, Manifest


class Applier(Protocol):
    """What the chain needs from a patch tool (kvbake.gitapply satisfies it)."""

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
    return data, parse_patch(patch.id, data.decode("utf-8", "replace"))


def first_touches(manifest: Manifest) -> dict[str, str]:
    """Each touched path and how the chain first touches it (modify means it must come from the base)."""
    first: dict[str, str] = {}
    for patch in manifest.chain:
        for change in read_patch(patch)[1]:
            first.setdefault(change.path, change.change)
    return first


def file_hash(tree: Path, path: str) -> str | None:
    target = tree / path
    return sha256_hex(target.read_bytes()) if target.is_file() else None


def apply_chain(manifest: Manifest, tree: Path, applier: Applier, lock: Lock | None = None) -> tuple[ChainStep, ...]:
    """Apply every patch in order; with a lock, refuse any patch or file hash that differs from it."""
    steps: list[ChainStep] = []
    touched_so_far: dict[str, str] = {}
    total = len(manifest.chain)
    if lock is not None and [p.id for p in lock.patches] != [p.id for p in manifest.chain]:
        raise PatchError(f"the lock pins patches {', '.join(p.id for p in lock.patches)} but the chain is {', '.join(p.id for p in manifest.chain)}",
                         "review the chain and run python build.py lock")
    for index, patch in enumerate(manifest.chain, start=1):
        label = f"patch {patch.id} ({index}/{total})"
        step = apply_one(label, patch, tree, applier, touched_so_far, lock.patches[index - 1] if lock else None)
        for item in step.files:
            touched_so_far[item.path] = patch.id
        steps.append(step)
    return tuple(steps)


def apply_one(label: str, patch: ChainPatch, tree: Path, applier: Applier, touched: dict[str, str], locked) -> ChainStep:
    data, changes = read_patch(patch)
    digest = sha256_hex(data)
    if locked is not None and (locked.id != patch.id or locked.sha256 != digest):
        raise PatchError(f"{label}: sha256 {digest[:12]}… differs from the lock's {locked.sha256[:12]}…",
                         "restore the pinned patch file, or review it and run python build.py lock")
    before = {c.path: _before_state(label, tree, c) for c in changes}
    try:
        applier.apply_strictly(label, patch.path, tree)
    except PatchError as err:
        raise _diagnose(label, patch, tree, applier, changes, touched) or err
    files = tuple(PatchFileHashes(c.path, c.change, before[c.path], file_hash(tree, c.path) or "") for c in changes)
    if locked is not None:
        _check_after_hashes(label, files, locked.files)
    return ChainStep(patch, digest, files)


def _before_state(label: str, tree: Path, change: FileChange) -> str | None:
    current = file_hash(tree, change.path)
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
