"""Adapter: accept a rebase candidate: check it still fits, regenerate resolved patches, point the manifest, lock."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kvbake.atomicfile import write_atomic
from kvbake.bake.adapters.base_source import config_digest
from kvbake.bake.core.diffs import normalized_patch
from kvbake.engines.adapters.client import Engine
from kvbake.errors import KvbakeError, RebaseError
from kvbake.lock import Lock, read_lock
from kvbake.manifest import Manifest
from kvbake.rebase.adapters.patch_tree import Files, diff_body
from kvbake.rebase.core.candidate_patch import BEFORE, RECORD, RESOLVE, conflict_marker_lines, refreshed_patch
from kvbake.rebase.core.manifest_edit import text_diff, with_base_image



@dataclass(frozen=True)
class Acceptance:
    """What accepting changes: the manifest's new text and its diff, and the patch files replaced (id -> new text)."""

    manifest_text: str
    manifest_diff: str
    replaced: dict[str, str]
    target: str


def read_record(folder: Path) -> dict[str, Any]:
    try:
        record = json.loads((folder / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise RebaseError(f"{folder} holds no readable {RECORD}: it is not a folder rebase --to wrote",
                          "give the folder rebase --to printed (rebase-<digest>/ beside the manifest)") from None
    keys = {"manifest", "target", "target_config", "base_config", "chain", "needs_person", "paths"}
    if not isinstance(record, dict) or not keys <= set(record):
        raise RebaseError(f"{folder}/{RECORD} lacks {sorted(keys - set(record if isinstance(record, dict) else {}))}",
                          "run python build.py rebase --to IMAGE:TAG again")
    return record


def check_fits(record: dict[str, Any], folder: Path, manifest: Manifest, lock: Lock, target_config: str | None) -> None:
    """The candidate was made for this manifest, from this lock, onto the image the target still names."""
    if record["manifest"] != str(manifest.path.resolve()) or record["chain"] != [p.id for p in manifest.chain]:
        raise RebaseError(f"{folder} was made for {record['manifest']}, not for {manifest.path.resolve()} and its chain",
                          "run python build.py rebase --to IMAGE:TAG for this manifest")
    if record["base_config"] != lock.base.config_digest:
        raise RebaseError(f"{folder} was made from the lock of base {record['base_config'][:19]}; the lock now pins {lock.base.config_digest[:19]}",
                          "run python build.py rebase --to IMAGE:TAG again: the report is stale")
    if target_config != record["target_config"]:
        now = "is not on the engine" if target_config is None else f"now names config {target_config[:19]}"
        raise RebaseError(f"{record['target']} {now}; the report was made for config {record['target_config'][:19]}",
                          f"run python build.py rebase --to {record['target']} again: the report is stale")


def resolved_files(root: Path, order: list[str]) -> tuple[Files, Files]:
    """A conflicted patch's files before and after it, as the person left them; a deleted resolve file drops that
    file from the patch; a marker left is refused."""
    before = {p: (root / BEFORE / p).read_bytes() if (root / BEFORE / p).is_file() else None for p in order}
    after: Files = {}
    for path in order:
        edited = root / path
        if not edited.is_file():
            after[path] = before[path]
            continue
        data = edited.read_bytes()
        left = conflict_marker_lines(data.decode("utf-8", "replace"))
        if left:
            raise RebaseError(f"{edited} still holds conflict markers (lines {', '.join(map(str, left[:5]))})",
                              "resolve them in that file (or delete it to drop the file from the patch), then accept again")
        after[path] = data
    return before, after


def candidate_texts(record: dict[str, Any], folder: Path, manifest: Manifest) -> dict[str, str]:
    """Each patch's candidate text: a resolved patch regenerated from its files, the others as rebase wrote them."""
    texts = {}
    for patch in manifest.chain:
        if patch.id in record["needs_person"]:
            before, after = resolved_files(folder / RESOLVE / patch.id, record["paths"][patch.id])
            order = [p for p in record["paths"][patch.id] if before[p] != after[p] or before[p] is not None]
            texts[patch.id] = refreshed_patch(patch.path.read_text(encoding="utf-8"), diff_body(before, after, order))
            continue
        text = (folder / patch.file).read_text(encoding="utf-8")
        left = conflict_marker_lines(text)
        if left:
            raise RebaseError(f"{folder / patch.file} still holds conflict markers (lines {', '.join(map(str, left[:5]))})",
                              "resolve them, then accept again")
        texts[patch.id] = text
    return texts


def plan_acceptance(engine: Engine, manifest: Manifest, folder: Path) -> Acceptance:
    record = read_record(folder)
    lock = read_lock(manifest)
    found = engine.inspect_image(record["target"])
    check_fits(record, folder, manifest, lock, None if found is None else config_digest(engine, record["target"], found))
    texts = candidate_texts(record, folder, manifest)
    replaced = {p.id: texts[p.id] for p in manifest.chain
                if normalized_patch(p.id, texts[p.id]) != normalized_patch(p.id, p.path.read_text(encoding="utf-8"))}
    old_text = manifest.path.read_text(encoding="utf-8")
    new_text = with_base_image(old_text, manifest.base.image, record["target"])
    return Acceptance(new_text, text_diff(manifest.path.name, old_text, new_text), replaced, record["target"])


def accept(manifest: Manifest, acceptance: Acceptance, lock_it: Callable[[], Lock]) -> Lock:
    """Write the new patches and manifest, then lock; any failure puts every file back as it was."""
    paths = {p.id: p.path for p in manifest.chain}
    originals = {path: path.read_bytes() for path in [manifest.path, *(paths[i] for i in acceptance.replaced)]}
    try:
        for patch_id, text in acceptance.replaced.items():
            write_atomic(paths[patch_id], text.encode("utf-8"))
        write_atomic(manifest.path, acceptance.manifest_text.encode("utf-8"))
        return lock_it()
    except (KvbakeError, OSError):
        for path, data in originals.items():
            write_atomic(path, data)
        raise
