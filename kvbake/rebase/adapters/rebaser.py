"""Adapter: the locked chain walked over the new base patch by patch, each rejected hunk tried as a three-way merge."""

from __future__ import annotations

from dataclasses import dataclass

import unidiff

from kvbake.bake.adapters.gitapply import normalized_bytes
from kvbake.bake.core.chain import read_patch
from kvbake.bake.core.diffs import FileChange
from kvbake.digests import sha256_hex
from kvbake.errors import LockError
from kvbake.lock import CREATE, Lock
from kvbake.manifest import ChainPatch, Manifest
from kvbake.rebase.adapters.patch_tree import Files, apply_exactly, apply_with_rejects, diff_body, merge_three, reverse_exactly
from kvbake.rebase.core.apply_report import OFFSET, REJECTED, outcome_of
from kvbake.rebase.core.report import CLEAN, CONFLICT, MERGED, HunkReport, PatchedFile, PatchReport
from kvbake.rebase.core.upstream import overlapping_changes


@dataclass(frozen=True)
class OldStep:
    """One patch of the locked chain on the lock's base: its files before and after it."""

    patch: ChainPatch
    before: Files
    after: Files


@dataclass(frozen=True)
class Refreshed:
    """One patch moved onto the new base: its report, the new diff body, and the files after it."""

    report: PatchReport
    body: str
    before: Files
    after: Files

    @property
    def order(self) -> list[str]:
        return [f.path for f in self.report.files]


def chain_texts(manifest: Manifest) -> list[tuple[ChainPatch, bytes, tuple[FileChange, ...]]]:
    """Every patch of the chain with its normalized text and the files it changes, in chain order."""
    return [(patch, normalized_bytes(patch.path), read_patch(patch)[1]) for patch in manifest.chain]


def chain_taken_out(manifest: Manifest, patches: list[tuple[ChainPatch, bytes, tuple[FileChange, ...]]] | None = None) -> Files:
    """The chain's files as overlay/ holds them with every patch reversed, last first (None: absent before the chain).
    `patches` is chain_texts(manifest) when the caller has it already. A patch that does not come back out exactly is
    a PatchError."""
    patches = chain_texts(manifest) if patches is None else patches
    paths = list(dict.fromkeys(change.path for _, _, changes in patches for change in changes))
    overlay = manifest.root / "overlay"
    state: Files = {path: (overlay / path).read_bytes() if (overlay / path).is_file() else None for path in paths}
    for _, text, changes in reversed(patches):
        state.update(reverse_exactly(text, {c.path: state[c.path] for c in changes}))
    return state


def old_chain(manifest: Manifest, lock: Lock) -> tuple[Files, list[OldStep]]:
    """The lock's base files rebuilt from overlay/ (every patch reversed, last first), checked against the lock's
    hashes, then the chain applied again patch by patch: the old base and every patch's files before and after."""
    patches = chain_texts(manifest)
    paths = list(dict.fromkeys(change.path for _, _, changes in patches for change in changes))
    state = chain_taken_out(manifest, patches)
    expected = base_hashes(lock)
    for path in paths:
        found = sha256_hex(state[path]) if state[path] is not None else None
        if found != expected.get(path):
            raise LockError(f"overlay/{path} does not come back to the locked base file by reversing the chain",
                            "run python build.py lock to rewrite overlay/ from the pinned base, then rebase again")
    base = dict(state)
    steps = []
    for patch, text, changes in patches:
        before = {c.path: state[c.path] for c in changes}
        after = apply_exactly(text, before)
        state.update(after)
        steps.append(OldStep(patch, before, after))
    return base, steps


def base_hashes(lock: Lock) -> dict[str, str | None]:
    """Each touched file's hash on the lock's base (None: the chain creates it)."""
    first: dict[str, str | None] = {}
    for patch in lock.patches:
        for entry in patch.files:
            first.setdefault(entry.path, None if entry.change == CREATE else entry.before)
    return first


def refresh(step: OldStep, current: Files, text: bytes) -> Refreshed:
    """Move one patch onto `current` (the new base with the patches before it refreshed)."""
    sections = list(unidiff.PatchSet(text.decode("utf-8")))
    applicable = [s for s in sections if applies_to(s, current)]
    applied, outcomes = apply_with_rejects(section_text(applicable), {s.path: current[s.path] for s in applicable}) \
        if applicable else ({}, {})
    after: Files = dict(applied)  # the sections git could not try get their merge below
    hunks: list[HunkReport] = []
    conflicted: set[str] = set()
    for section in sections:
        path = section.path
        if section not in applicable:
            reason = "the new base has no such file" if current[path] is None else "the new base already has this file"
            hunks += [HunkReport(path, n, hunk_header(h), CONFLICT, reason=reason) for n, h in enumerate(section, 1)]
            # both sides changed the whole file (one removed or added it): the merge holds it all between markers
            after[path] = merge_three(current[path] or b"", step.before[path] or b"", step.after[path] or b"")[0]
            conflicted.add(path)
            continue
        rejected = []
        for number, hunk in enumerate(section, 1):
            outcome = outcome_of(outcomes, path, number)
            if outcome.status == REJECTED:
                rejected.append((number, hunk))
            else:
                hunks.append(HunkReport(path, number, hunk_header(hunk), OFFSET if outcome.status == OFFSET else CLEAN,
                                        outcome.offset, outcome.line))
        if rejected:
            merged, hunk_reports = merge_file(step, path, current[path], rejected)
            after[path] = merged[0]
            hunks += hunk_reports
            if merged[1]:
                conflicted.add(path)
    hunks.sort(key=lambda h: ([s.path for s in sections].index(h.path), h.number))
    order = [s.path for s in sections]
    body = diff_body({p: current[p] for p in order}, {p: after[p] for p in order}, order)
    files = tuple(PatchedFile(p, digest(current[p]), None if p in conflicted else digest(after[p])) for p in order)
    return Refreshed(PatchReport(step.patch.id, step.patch.file, tuple(hunks), files), body,
                     {p: current[p] for p in order}, {p: after[p] for p in order})


def merge_file(step: OldStep, path: str, current: bytes | None, rejected) -> tuple[tuple[bytes, int], list[HunkReport]]:
    """The file's three-way merge (new base, old base, old patched), and each rejected hunk merged on its own."""
    old_before, old_after = step.before[path] or b"", step.after[path] or b""
    whole = merge_three(current or b"", old_before, old_after)
    alone_conflicts = []
    for number, hunk in rejected:
        alone = apply_exactly(one_hunk(path, hunk), {path: step.before[path]})[path] or b""
        alone_conflicts.append(merge_three(current or b"", old_before, alone)[1])
    together = whole[1] > 0 and not any(alone_conflicts)  # each merges alone, not all at once
    reports = []
    for (number, hunk), conflicts in zip(rejected, alone_conflicts):
        upstream = overlapping_changes(old_before.decode("utf-8"), (current or b"").decode("utf-8"), hunk.source_start, hunk.source_length)
        status = CONFLICT if conflicts or together else MERGED
        reason = "both sides change these lines" if conflicts else ("the file's hunks conflict when merged together" if together else "")
        reports.append(HunkReport(path, number, hunk_header(hunk), status, upstream=upstream, reason=reason))
    return whole, reports


def applies_to(section: unidiff.PatchedFile, current: Files) -> bool:
    """A file section git can try on the new base: its file is there to edit, or absent to create."""
    created = section.is_added_file
    return (current[section.path] is None) if created else (current[section.path] is not None)


def section_text(sections) -> bytes:
    return "".join(str(section) for section in sections).encode("utf-8")


def one_hunk(path: str, hunk: unidiff.Hunk) -> bytes:
    """The hunk as a patch of its own: git apply looks for a hunk at its new-side start, which counts the lines the hunks
    before it added; alone, it starts where its old side does."""
    header = f"@@ -{hunk.source_start},{hunk.source_length} +{hunk.source_start},{hunk.target_length} @@\n"
    lines = "".join(str(line) for line in hunk)
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n{header}{lines}".encode("utf-8")


def hunk_texts(text: bytes) -> dict[tuple[str, int], str]:
    """Every hunk of a patch as it states it (header and lines), by file path and hunk number (1-based, as the report counts)."""
    return {(section.path, number): str(hunk) for section in unidiff.PatchSet(text.decode("utf-8"))
            for number, hunk in enumerate(section, 1)}


def hunk_header(hunk: unidiff.Hunk) -> str:
    return f"@@ -{hunk.source_start},{hunk.source_length} +{hunk.target_start},{hunk.target_length} @@"


def digest(data: bytes | None) -> str | None:
    return None if data is None else sha256_hex(data)
