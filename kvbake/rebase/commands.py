"""The rebase command: a hunk-by-hunk report of the chain on a new local base, and a refreshed candidate chain."""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from kvbake.atomicfile import fsync_tree, rename_durably
from kvbake.bake.adapters.base_source import config_digest
from kvbake.bake.adapters.extract import Extractor
from kvbake.bake.adapters.gitapply import normalized_bytes
from kvbake.bake.core.chain import first_touches
from kvbake.bake.core.image_checks import platform_of
from kvbake.digests import sha256_hex
from kvbake.engines.adapters.client import Engine
from kvbake.errors import BaseImageError, UsageError
from kvbake.lock import Lock, read_lock
from kvbake.manifest import Manifest, load_manifest
from kvbake.rebase.adapters.accept import accept, plan_acceptance
from kvbake.rebase.adapters.patch_tree import Files, write_tree
from kvbake.rebase.adapters.rebaser import Refreshed, base_hashes, hunk_texts, old_chain, refresh
from kvbake.rebase.core.candidate_patch import BEFORE, RECORD, RESOLVE, refreshed_patch
from kvbake.rebase.core.switch_names import switch_changes
from kvbake.rebase.core.report import FileState, RebaseReport, report_json, report_markdown
from kvbake.rebase.core.html_rebase import report_html

Result = tuple[dict[str, Any], str]


def cmd_rebase(args: argparse.Namespace) -> Result:
    if args.accept is not None:
        if args.out is not None:
            raise UsageError("--out goes with --to, not with --accept", "drop --out")
        return accept_candidate(args)
    return report_candidate(args)


def accept_candidate(args: argparse.Namespace) -> Result:
    """`rebase --accept DIR`: the manifest's diff and the replaced patches are printed first, then written and locked."""
    from kvbake.bake.adapters.pinning import create_lock

    manifest = load_manifest(args.manifest)
    engine = Engine(args.host)
    acceptance = plan_acceptance(engine, manifest, args.accept)
    preview = (f"{acceptance.manifest_diff}replaced patches: {', '.join(acceptance.replaced) or 'none'}; "
               f"the others stay byte for byte")
    if not args.json:
        print(preview, flush=True)
    lock = accept(manifest, acceptance, lambda: create_lock(engine, load_manifest(manifest.path), rebase=True))
    data = {"base": acceptance.target, "manifest_diff": acceptance.manifest_diff, "replaced": list(acceptance.replaced),
            "lock": {"base_config_digest": lock.base.config_digest, "image_id": lock.derived.image_id}}
    text = (f"accepted: base.image is {acceptance.target}, {len(acceptance.replaced)} patch(es) replaced, locked (base "
            f"{lock.base.config_digest[:19]}, expected image {lock.derived.image_id[:19]}); the replaced patches are not "
            f"in the donor repository: commit them there and set donor.revision before the next lock --donor")
    return data, text


def report_candidate(args: argparse.Namespace) -> Result:
    manifest = load_manifest(args.manifest)
    lock = read_lock(manifest)
    engine = Engine(args.host)
    target = args.to
    config = target_identity(engine, lock, target)
    out = candidate_folder(manifest, args.out, config)
    old_base, steps = old_chain(manifest, lock)
    touches = first_touches(manifest)
    current = new_base_files(engine, target, lock.source_root, list(touches), [p for p, change in touches.items() if change != "create"])
    states = tuple(FileState(p, change, base_hashes(lock).get(p), None if current[p] is None else sha256_hex(current[p]))
                   for p, change in touches.items())
    refreshed: list[Refreshed] = []
    for step in steps:
        moved = refresh(step, current, normalized_bytes(step.patch.path))
        current.update(moved.after)
        refreshed.append(moved)
    old_files = dict(old_base)
    for step in steps:
        old_files.update(step.after)
    new_switches, unread = switch_changes(old_files, current, manifest.switches)
    report = RebaseReport(manifest.path.name, lock.base.reference, lock.base.config_digest, target, config, states,
                          tuple(r.report for r in refreshed), new_switches, unread)
    write_candidate(manifest, out, refreshed, report)
    counts = report.counts()
    text = (f"rebase {lock.base.reference} → {target}: {counts['clean']} clean, {counts['offset']} offset, "
            f"{counts['merged']} merged, {counts['conflict']} conflicted hunks; "
            f"needs a person: {', '.join(report.needs_person) or 'none'}\n"
            f"candidate chain and report: {out}/ (report.md, report.json); the manifest and patches/ are unchanged")
    return {**report_json(report), "candidate": str(out)}, text


def target_identity(engine: Engine, lock: Lock, target: str) -> str:
    """The target's config digest; it must be local (never pulled), on the lock's platform, and another image."""
    inspect = engine.inspect_image(target)
    if inspect is None:
        raise BaseImageError(f"the rebase target {target} is not on {engine.label} (kvbake never pulls)",
                             f"pull or load it yourself (docker pull --platform {lock.base.platform} {target}), then rebase again")
    if platform_of(inspect) != lock.base.platform:
        raise BaseImageError(f"the rebase target {target} is {platform_of(inspect)}, the locked base is {lock.base.platform}",
                             f"pull the target for {lock.base.platform} (docker pull --platform {lock.base.platform} {target})")
    config = config_digest(engine, target, inspect)
    if config == lock.base.config_digest:
        raise BaseImageError(f"the rebase target {target} is the locked base itself (config {config[:19]})",
                             "name the new base image; nothing moves between an image and itself")
    return config


def candidate_folder(manifest: Manifest, chosen: Path | None, config: str) -> Path:
    """Where the candidate goes: `--out`, or rebase-<target config> beside the manifest; never an existing folder."""
    out = chosen if chosen is not None else manifest.root / f"rebase-{config.split(':')[-1][:12]}"
    if out.exists():
        raise UsageError(f"{out} already exists; rebase never writes over a folder",
                         "remove it, or give another folder with --out DIR")
    if out.resolve() == (manifest.root / "patches").resolve():
        raise UsageError("--out names patches/ itself", "give a new folder: the candidate never replaces patches/ (rebase --accept does)")
    return out


def new_base_files(engine: Engine, target: str, source_root: str, paths: list[str], modified: list[str]) -> Files:
    """Every file the chain touches, as the target holds it (None: absent), copied out of a never-started container one
    by one (never the whole source root). A target that holds none of the files the chain edits has no such tree."""
    with engine.created_container(target) as container:
        extractor = Extractor(engine, container, source_root)
        found = {path: extractor.file(path) for path in paths}
    if modified and all(found[path] is None for path in modified):
        raise BaseImageError(f"the rebase target {target} holds none of the chain's files under {source_root} (the manifest's "
                             "source root)", "rebase onto an image of the same layout, or change base.source_root in the manifest first")
    return {path: (file.data if file is not None else None) for path, file in found.items()}


def write_candidate(manifest: Manifest, out: Path, refreshed: list[Refreshed], report: RebaseReport) -> None:
    """The candidate folder, whole or not at all: refreshed patches under their chain file names, the report, the record."""
    scratch = Path(tempfile.mkdtemp(prefix=".kvbake-rebase-", dir=out.parent))
    try:
        for moved, patch in zip(refreshed, manifest.chain):
            target = scratch / patch.file
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(refreshed_patch(patch.path.read_text(encoding="utf-8"), moved.body), encoding="utf-8")
        for moved in refreshed:
            if moved.report.id in report.needs_person:
                write_tree(scratch / RESOLVE / moved.report.id / BEFORE, moved.before)
                write_tree(scratch / RESOLVE / moved.report.id, moved.after)
        (scratch / "report.md").write_text(report_markdown(report), encoding="utf-8")
        (scratch / "report.json").write_text(json.dumps(report_json(report), indent=2) + "\n", encoding="utf-8")
        texts = {patch.id: hunk_texts(normalized_bytes(patch.path)) for patch in manifest.chain}
        (scratch / "report.html").write_text(report_html(report_json(report), texts), encoding="utf-8")
        record = {"manifest": str(manifest.path.resolve()), "target": report.to_image, "target_config": report.to_config,
                  "base_config": report.from_config, "chain": [p.id for p in manifest.chain], "needs_person": list(report.needs_person),
                  "paths": {moved.report.id: moved.order for moved in refreshed}}
        (scratch / RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        fsync_tree(scratch)
        rename_durably(scratch, out)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
