"""`build.py lock`: pin the local base, apply the chain once, and write the lock and overlay/."""

from __future__ import annotations

import logging
import os
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from kvbake import FORMAT_VERSION
from kvbake.bake.adapters.base_source import read_base
from kvbake.bake.adapters.donor import patches_from
from kvbake.bake.adapters.extract import BaseFile, Extractor
from kvbake.bake.adapters.gitapply import GitApplier, patch_id
from kvbake.bake.adapters.served_proof import ProofOutcome, require_served_proof, stage_chain, write_statement
from kvbake.bake.core.bytecode import python_tags, shadow_candidates
from kvbake.bake.core.registry_copies import names_registry_host, repository_of
from kvbake.bake.core.chain import ChainStep, apply_chain, first_touches, read_patch
from kvbake.bake.core.diffs import CREATE, MODIFY
from kvbake.bake.core.switch_coverage import check_coverage, raise_for_coverage
from kvbake.bake.core.thin_layer import in_image, parent_dirs
from kvbake.digests import sha256_hex, tree_sha256
from kvbake.engines.adapters.client import Engine
from kvbake.errors import BaseImageError, IntegrityError, LockError, PatchError
from kvbake.lock import (Derived, Lock, LockedBase, LockedDir, LockedFile, LockedPatch, check_lock_matches, load_lock_file, lock_bytes,
                         locked_source_date_epoch, pinned_manifest_sha256, write_lock)
from kvbake.bake.core.image_checks import moved_tag, platform_of
from kvbake.bake.core.overlayswap import exclusive, recover_overlay, swap_overlay
from kvbake.bake.core.plan import make_plan, read_overlay
from kvbake.engines.core.detection import store_named
from kvbake.engines.core.savefile import DirMeta
from kvbake.manifest import Manifest, load_manifest

log = logging.getLogger(__name__)
PENDING = Derived(layer_diff_id="", image_id="")


@dataclass(frozen=True)
class BaseSnapshot:
    """What lock reads out of the base: the touched files and the names of their cached bytecode."""

    files: dict[str, BaseFile]
    stale: dict[str, tuple[str, ...]]


def source_date_epoch(manifest: Manifest) -> int:
    """SOURCE_DATE_EPOCH when set, else the previous lock's value (a malformed one is refused, never guessed), else now."""
    given = os.environ.get("SOURCE_DATE_EPOCH", "")
    if given:
        if not (given.isascii() and given.isdigit()):
            raise LockError(f"SOURCE_DATE_EPOCH={given[:40]!r} is not a whole number of seconds",
                            "set it to digits only (e.g. the commit time: git log -1 --format=%ct), or unset it")
        return int(given)
    if manifest.lock_path.exists():
        return locked_source_date_epoch(manifest.lock_path)
    return int(time.time())


def registry_digest_of(reference: str, repo_digests: list[str], store: str) -> str | None:
    """The manifest digest the base's own repository gave it, if it was pulled from there; never another repository's.
    The containerd store lists a digest for every image, loaded ones too, so there only a reference that names its
    registry host counts."""
    repository = repository_of(reference)
    if store_named(store).digests_loaded_images and not names_registry_host(repository):
        return None
    return next((d.split("@", 1)[1] for d in repo_digests if d.split("@", 1)[0] == repository), None)


def locked_base(engine: Engine, manifest: Manifest, wanted: frozenset[str]) -> tuple[LockedBase, dict[str, DirMeta]]:
    """The base's pins and the metadata of the wanted directories, read where the base already lives (base_source)."""
    inspect = engine.require_image(manifest.base.image)
    platform = platform_of(inspect)
    if manifest.base.platform not in ("native", platform):
        raise BaseImageError(f"{manifest.base.image} is {platform}, the manifest wants {manifest.base.platform}",
                             "load the image for the right platform")
    read = read_base(engine, manifest.base.image, inspect, platform, wanted)
    log.info("lock read the config of %s from %s", manifest.base.image, read.source)
    repo_digest = registry_digest_of(manifest.base.image, inspect["RepoDigests"], engine.profile().store)
    base = LockedBase(manifest.base.image, platform, read.config_digest, tuple(inspect["RootFS"]["Layers"]), repo_digest, read.config)
    return base, read.dirs


def first_creators(manifest: Manifest) -> dict[str, str]:
    """Each path the chain first touches with a new-file section, and the id of the patch that creates it."""
    first: dict[str, tuple[str, str]] = {}
    for patch in manifest.chain:
        for change in read_patch(patch)[1]:
            first.setdefault(change.path, (change.change, patch.id))
    return {path: patch_id for path, (change, patch_id) in first.items() if change == CREATE}


def refuse_created_over_base(engine: Engine, container: str, manifest: Manifest, creators: dict[str, str]) -> None:
    """A new-file section must not land on anything the base already has at that path (file, folder or link)."""
    for path, patch in sorted(creators.items()):
        with tempfile.TemporaryDirectory(prefix="kvbake-cp-") as tmp:
            found = engine.copy_out(container, str(PurePosixPath(manifest.base.source_root) / path), Path(tmp) / "found")
        if found:
            raise PatchError(f"patch {patch} creates {path} as a new file, but {manifest.base.image} already has {path} "
                             f"under {manifest.base.source_root}",
                             "regenerate the patch as a change of the base file (git diff against the base), or create another path")


def snapshot_base(engine: Engine, manifest: Manifest, touches: dict[str, str]) -> BaseSnapshot:
    files: dict[str, BaseFile] = {}
    stale: dict[str, tuple[str, ...]] = {}
    with engine.created_container(manifest.base.image) as container:
        refuse_created_over_base(engine, container, manifest, first_creators(manifest))
        extractor = Extractor(engine, container, manifest.base.source_root)
        for path, change in sorted(touches.items()):
            if change == MODIFY:
                found = extractor.file(path)
                if found is None:
                    raise BaseImageError(f"{path} is not a file in {manifest.base.image} under {manifest.base.source_root}",
                                         "check base.source_root and the patch paths")
                files[path] = found
            stale[path] = tuple(extractor.stale_bytecode(path))
        refuse_shadowed_modules(extractor, manifest.base.image, sorted(touches), stale, engine.require_image(manifest.base.image)["Architecture"])
    return BaseSnapshot(files, stale)


def refuse_shadowed_modules(extractor: Extractor, image: str, paths: list[str], stale: dict[str, tuple[str, ...]], architecture: str) -> None:
    """A patched module that a package or an extension module of the same name shadows in the base would never run."""
    tags = python_tags(tuple(pyc for items in stale.values() for pyc in items))
    for path in (p for p in paths if p.endswith(".py")):
        for candidate in shadow_candidates(path, tags, architecture):
            if extractor.file(candidate) is not None:
                raise BaseImageError(f"{path} is shadowed in {image} by {candidate}, which Python imports first: the patched source would never run",
                                     "check the patch paths against the base (a module cannot sit beside a package or extension of the same name)")


def wanted_dirs(source_root: str, touches: dict[str, str], stale: dict[str, tuple[str, ...]]) -> frozenset[str]:
    """Image paths of every directory above a touched file or a whited-out bytecode file."""
    paths = [in_image(source_root, p) for p in touches] + [in_image(source_root, pyc) for items in stale.values() for pyc in items]
    return frozenset(parent_dirs(paths))


def split_dirs(source_root: str, wanted: frozenset[str], found: dict[str, DirMeta]) -> tuple[tuple[LockedDir, ...], tuple[str, ...]]:
    """Existing directories with their metadata, and the ones the chain creates (relative to the source root)."""
    existing = tuple(LockedDir(p, m.mode, m.uid, m.gid, m.mtime) for p, m in sorted(found.items()))
    prefix = source_root.strip("/") + "/"
    created = tuple(sorted(p.removeprefix(prefix) for p in wanted - set(found)))
    outside = [p for p in created if p.startswith("/") or in_image(source_root, p) not in wanted]
    if outside:
        raise BaseImageError(f"directories above the source root are missing in the base: {', '.join(outside)}", "check base.source_root")
    return existing, created


def locked_files(snapshot: BaseSnapshot, tree: dict[str, bytes]) -> tuple[LockedFile, ...]:
    result = []
    for path in sorted(tree):
        base = snapshot.files.get(path)
        result.append(LockedFile(
            path=path, base_sha256=base.sha256 if base else None, overlay_sha256=sha256_hex(tree[path]),
            mode=base.mode if base else 0o644, uid=base.uid if base else 0, gid=base.gid if base else 0,
            stale_bytecode=snapshot.stale.get(path, ()),
        ))
    return tuple(result)


def locked_patches(steps: tuple[ChainStep, ...], tree_root: Path) -> tuple[LockedPatch, ...]:
    return tuple(LockedPatch(s.patch.id, s.patch.file, s.sha256, patch_id(s.patch.path, tree_root), s.files) for s in steps)


def check_switch_coverage(manifest: Manifest, tree: dict[str, bytes]) -> None:
    """Every name the chain reads is declared, every declared switch is read; unregistered VLLM_* names warn."""
    coverage = check_coverage(manifest, {p.id: read_patch(p)[1] for p in manifest.chain}, tree)
    for warning in coverage.warnings:
        log.warning("switch coverage: %s", warning)
    raise_for_coverage(coverage)


def refuse_silent_repin(engine: Engine, manifest: Manifest, rebase: bool) -> None:
    """The base reference the lock pinned must still name the pinned image: a re-pushed upstream tag never moves the
    lock unnoticed. `--rebase-base`, or a changed base reference in the manifest, re-pins on purpose."""
    if rebase or not manifest.lock_path.exists():
        return
    try:
        previous = load_lock_file(manifest.lock_path).base
    except LockError:
        return
    if previous.reference != manifest.base.image:
        return
    inspect = engine.require_image(manifest.base.image)
    now = engine.config_digest_of(inspect, manifest.base.image)
    if now != previous.config_digest:
        cause, fix = moved_tag(manifest.base.image, now, previous.config_digest)
        raise BaseImageError(cause, fix.replace("rebase --to", "lock --rebase-base (no report) or python build.py rebase --to", 1))


def create_lock(engine: Engine, manifest: Manifest, rebase: bool = False, donor: Path | None = None,
                code_change: str | None = None) -> Lock:
    """Pin everything and write overlay/ and the lock; nothing is written when any step fails. With `donor`, the
    selected patches are imported first and put back as they were unless the lock that pins them is written. An
    earlier `lock` that was interrupted is first finished or rolled back (kvbake.bake.core.overlayswap). With
    `code_change`, a chain that differs from the proof's baseline is kept with that statement (code-changes/)."""
    with exclusive(manifest.path):
        recover_overlay(manifest.root, manifest.lock_path)
        with patches_from(manifest, donor) as imported:
            if imported is not None:
                manifest = load_manifest(manifest.path)
            epoch = source_date_epoch(manifest)
            refuse_silent_repin(engine, manifest, rebase)
            lock, tree, outcome = pinned_lock(engine, manifest, epoch, code_change)
            swap_overlay(manifest.root, tree, manifest.lock_path, lock_bytes(lock), committed=imported.keep if imported else None)
            write_statement(manifest.root, outcome)
            stage_chain(manifest.root, manifest.base.source_root, lock.derived.image_id, lock.overlay_tree_sha256, tree,
                        {f.path: f.base_sha256 for f in lock.files})
    return load_lock_file(manifest.lock_path)


def pinned_lock(engine: Engine, manifest: Manifest, epoch: int,
                code_change: str | None = None) -> tuple[Lock, dict[str, bytes], ProofOutcome]:
    """The new lock and the patched files, computed in memory (and a temporary folder that is always removed)."""
    engine.ping()
    touches = first_touches(manifest)
    snapshot = snapshot_base(engine, manifest, touches)
    wanted = wanted_dirs(manifest.base.source_root, touches, snapshot.stale)
    base, found_dirs = locked_base(engine, manifest, wanted)
    dirs, created_dirs = split_dirs(manifest.base.source_root, wanted, found_dirs)
    with tempfile.TemporaryDirectory(prefix="kvbake-lock-") as tmp:
        tree_root = Path(tmp) / "tree"
        tree_root.mkdir()
        for path, found in snapshot.files.items():
            (tree_root / path).parent.mkdir(parents=True, exist_ok=True)
            (tree_root / path).write_bytes(found.data)
        steps = apply_chain(manifest, tree_root, GitApplier())
        tree = {path: (tree_root / path).read_bytes() for path in touches}
        patches = locked_patches(steps, tree_root)
    check_switch_coverage(manifest, tree)
    files = locked_files(snapshot, tree)
    chain_tree = tree_sha256((f.path, f.overlay_sha256) for f in files)
    outcome = require_served_proof(manifest.root, manifest.base.source_root, tree, {path: found.sha256 for path, found in snapshot.files.items()},
                                   {path: found.data for path, found in snapshot.files.items()}, chain_tree, code_change)
    lock = Lock(FORMAT_VERSION, pinned_manifest_sha256(manifest, FORMAT_VERSION), manifest.base.source_root, epoch,
                manifest.donor.url, manifest.donor.revision, base, patches, files, dirs, created_dirs, chain_tree, PENDING)
    return lock.with_derived(make_plan(manifest, lock, tree).derived()), tree, outcome


def migrate_lock(manifest: Manifest) -> tuple[Lock, bool]:
    """Rewrite a format-1 or format-2 lock as format 3 without the engine or a `docker save`: the same pins, the hash of
    the manifest's image sections, no saved layer sizes, and the derived section recomputed from overlay/. Returns the
    lock and whether it changed; a lock already in format 3 is left as it is."""
    with exclusive(manifest.path):
        recover_overlay(manifest.root, manifest.lock_path)
        if not manifest.lock_path.exists():
            raise LockError(f"{manifest.path.name} is not locked ({manifest.lock_path.name} is missing), so there is nothing to migrate",
                            f"run: python build.py lock --manifest {manifest.path.name}")
        old = load_lock_file(manifest.lock_path)
        check_lock_matches(manifest, old)
        if old.format == FORMAT_VERSION:
            return old, False
        tree = read_overlay(manifest, old)
        drifted = [f.path for f in old.files if sha256_hex(tree[f.path]) != f.overlay_sha256]
        if drifted:
            raise IntegrityError(f"overlay/ drifts from {manifest.lock_path.name} ({', '.join(drifted)}), so the lock cannot be migrated",
                                 "restore overlay/ from version control, or run python build.py lock")
        lock = replace(old, format=FORMAT_VERSION, manifest_sha256=pinned_manifest_sha256(manifest, FORMAT_VERSION),
                       base=replace(old.base, layer_sizes=None))
        lock = lock.with_derived(make_plan(manifest, lock, tree).derived())  # the plan never reads the old derived section
        write_lock(manifest.lock_path, lock)
    return load_lock_file(manifest.lock_path), True
