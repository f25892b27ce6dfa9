"""The bake commands (build, plan, lock, verify, dockerfile): one function each, returning (data for --json, text)."""

from __future__ import annotations

import argparse
from pathlib import Path

from kvbake.bake.adapters.builder import build_image, build_with_docker
from kvbake.bake.adapters.served_proof import kept_statement, read_served, served_proof, statement_path
from kvbake.bake.core.build_record import build_record, write_record
from kvbake.bake.core.plan import make_plan, plan_summary, read_overlay, tag_for
from kvbake.command_output import Result
from kvbake.engines.adapters.client import Engine
from kvbake.errors import UsageError
from kvbake.lock import read_lock
from kvbake.manifest import Manifest, load_manifest


def cmd_build(args: argparse.Namespace) -> Result:
    manifest = load_manifest(args.manifest)
    engine = Engine(args.host)
    built = build_with_docker(engine, manifest) if args.builder == "docker" else build_image(engine, manifest)
    record = build_record(built, args.builder)
    path = write_record(manifest.root, record)
    plan = built.plan
    text = "\n".join([
        f"image:     {built.reference}" + ("   (STAND-IN example)" if manifest.standin else ""),
        f"identity:  config digest {built.config_digest}",
        f"engine:    {built.expected.describe() if built.expected else engine.profile().name + ': image ID ' + built.image_id}",
        (f"layer:     {plan.layer.diff_id} ({len(plan.lock.files)} files, {len(plan.whiteouts)} bytecode whiteouts, {len(plan.layer.data)} bytes)"
         if args.builder == "kvbake" else f"layers:    docker build (COPY + RUN rm of {len(plan.whiteouts)} stale bytecode files); ID not reproducible"),
        f"chain:     {' '.join(p.id for p in plan.lock.patches)} (applied strictly, after-hashes checked)",
        f"switches:  {len(manifest.switches)} declared, all off by default; {len(manifest.forbidden)} forbidden",
        ("verified:  base prefix, exactly one thin layer, reproducible config digest and engine ID, labels, no switch in Env" if args.builder == "kvbake"
         else "verified:  base prefix, labels, no switch in Env, files read back, patched code runs (deep)"),
        "phases:    " + ", ".join(f"{k} {v:.2f}s" for k, v in built.timings.items()),
        f"record:    {path.relative_to(manifest.root)}",
    ])
    return record, text


def cmd_plan(args: argparse.Namespace) -> Result:
    manifest = load_manifest(args.manifest)
    lock = read_lock(manifest)
    plan = make_plan(manifest, lock, read_overlay(manifest, lock))
    summary = plan_summary(plan)
    lines = [f"plan for {manifest.path.name} ({'STAND-IN example' if manifest.standin else manifest.name}); nothing is changed",
             f"base:    {lock.base.reference}  config {lock.base.config_digest}  ({len(lock.base.diff_ids)} layers, {lock.base.platform})"]
    lines += [f"patch:   {p['id']}  sha256 {p['sha256'][:16]}…  files: {', '.join(p['files'])}" for p in summary["chain"]]
    lines += [f"file:    {f['path']}  {(f['before'] or 'new')[:12]} → {f['after'][:12]}  {f['mode']} {f['owner']}" for f in summary["files"]]
    lines += [f"remove:  /{w} (whiteout)" for w in summary["whiteouts"]]
    lines += [f"layer:   {summary['layer_diff_id']}", f"image:   config digest {summary['image_id']} (the identity on every engine)",
              f"tag:     {summary['reference']}"]
    lines += [f"label:   {k}={v}" for k, v in sorted(summary["labels"].items())]
    return summary, "\n".join(lines)


def cmd_lock(args: argparse.Namespace) -> Result:
    from kvbake.bake.adapters.pinning import create_lock

    manifest = load_manifest(args.manifest)
    if args.migrate:
        return _migrate_lock(args, manifest)
    lock = create_lock(Engine(args.host), manifest, rebase=args.rebase_base, donor=args.donor, code_change=args.code_change)
    imported = [patch.id for patch in manifest.chain] if args.donor else []
    data = {"lock": manifest.lock_path.name, "imported": imported, "files": len(lock.files), "patches": len(lock.patches),
            "image_id": lock.derived.image_id, "layer_diff_id": lock.derived.layer_diff_id, "tag": tag_for(manifest, lock)}
    text = (f"locked {manifest.path.name} → {manifest.lock_path.name}: {len(lock.patches)} patches, {len(lock.files)} files, "
            f"base {lock.base.config_digest[:19]}, expected config digest {lock.derived.image_id[:19]}")
    if imported:
        text += f"\nimported from the donor: {', '.join(imported)}"
    proof = served_proof(manifest.root, manifest.base.source_root, read_overlay(manifest, lock),
                         {f.path: f.base_sha256 for f in lock.files})
    if proof is not None:
        data["served_proof"] = {"equal": list(proof.equal), "differences": [d.path for d in proof.differences]}
        text += f"\nproof: {proof.line()}" if not proof.differences else ""
        text += stated_change_line(manifest.root, lock, proof, data)
    return data, text


def stated_change_line(project: Path, lock, proof, data: dict) -> str:
    """The statement that let a chain differ from the proof's baseline: its file, reason and baseline."""
    baseline = read_served(project)
    if baseline is not None:
        data["served_proof"]["against"] = baseline[0].label()
    statement = kept_statement(project, lock.overlay_tree_sha256)
    if not proof.differences or statement is None:
        return ""
    where = statement_path(project, lock.overlay_tree_sha256).relative_to(project)
    data["served_proof"]["code_change"] = {"reason": statement.reason, "file": str(where), "against": statement.against}
    return (f"\nproof: a stated code change: {len(proof.differences)} of {len(proof.equal) + len(proof.differences)} files differ from "
            f"{statement.against} ({', '.join(statement.files)}); reason: {statement.reason}; every diff is in {where}")


def _migrate_lock(args: argparse.Namespace, manifest: Manifest) -> Result:
    from kvbake.bake.adapters.pinning import migrate_lock

    if args.donor:
        raise UsageError("lock --migrate takes no --donor", "migrate first, then import patches with lock --donor DIR")
    lock, changed = migrate_lock(manifest)
    data = {"lock": manifest.lock_path.name, "migrated": changed, "format": lock.format, "image_id": lock.derived.image_id,
            "tag": tag_for(manifest, lock)}
    if not changed:
        return data, f"{manifest.lock_path.name} is already format {lock.format}; nothing to migrate"
    return data, (f"migrated {manifest.lock_path.name} to format {lock.format}: same pins, runtime sections out of the image identity; "
                  f"new expected config digest {lock.derived.image_id[:19]} (rebuild and push once)")


def cmd_verify(args: argparse.Namespace) -> Result:
    from kvbake.bake.adapters.builder import DOCKER_BUILDER_SUFFIX
    from kvbake.bake.adapters.verifier import verify_image

    manifest = load_manifest(args.manifest)
    lock = read_lock(manifest)
    plan = make_plan(manifest, lock, read_overlay(manifest, lock))
    image = args.image or plan.reference + (DOCKER_BUILDER_SUFFIX if args.builder == "docker" else "")
    report = verify_image(Engine(args.host), plan, image, args.deep, args.builder)
    data = {"image": report.image, "image_id": report.image_id, "config_digest": report.config_digest, "engine": report.profile,
            "deep": report.deep, "files_checked": report.files_checked, "modules_proven": report.modules_proven,
            "offline_proven": report.offline_proven, "interpreter_proof": report.python, "ok": True}
    text = (f"verified {report.image} (config digest {report.config_digest[:19]}; {report.profile} ID {report.image_id[:19]}): "
            "layers, labels, no switch in Env")
    if report.deep:
        text += f"; {report.files_checked} files read back; {report.proofs()}"
    return data, text


def cmd_dockerfile(args: argparse.Namespace) -> Result:
    from kvbake.bake.core.dockerfile import render

    manifest = load_manifest(args.manifest)
    lock = read_lock(manifest)
    plan = make_plan(manifest, lock, read_overlay(manifest, lock))
    target = manifest.root / "Dockerfile.overlay"
    target.write_text(render(plan))
    return {"dockerfile": str(target.name)}, f"wrote {Path(target).relative_to(manifest.root)}"

