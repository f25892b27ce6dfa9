"""One function per CLI subcommand: parse nothing, call the library, return (data for --json, text for people)."""

from __future__ import annotations

import argparse
from pathlib import Path

from kvbake.building import build_image, build_with_docker
from kvbake.engine import Engine
from kvbake.lock import read_lock
from kvbake.manifest import Manifest, load_manifest
from kvbake.plan import make_plan, plan_summary, read_overlay, tag_for
from kvbake.record import build_record, write_record

Result = tuple[dict, str]


def _manifest(args: argparse.Namespace) -> Manifest:
    return load_manifest(args.manifest)


def cmd_build(args: argparse.Namespace) -> Result:
    manifest = _manifest(args)
    engine = Engine(args.host)
    built = build_with_docker(engine, manifest) if args.builder == "docker" else build_image(engine, manifest)
    record = build_record(built, args.builder)
    path = write_record(manifest.root, record)
    plan = built.plan
    text = "\n".join([
        f"image:     {built.reference}" + ("   (STAND-IN example)" if manifest.standin else ""),
        f"image id:  {built.image_id}",
        (f"layer:     {plan.layer.diff_id} ({len(plan.lock.files)} files, {len(plan.whiteouts)} bytecode whiteouts, {len(plan.layer.data)} bytes)"
         if args.builder == "kvbake" else f"layers:    docker build (COPY + RUN rm of {len(plan.whiteouts)} stale bytecode files); ID not reproducible"),
        f"chain:     {' '.join(p.id for p in plan.lock.patches)} (applied strictly, after-hashes checked)",
        f"switches:  {len(manifest.switches)} declared, all off by default; {len(manifest.forbidden)} forbidden",
        ("verified:  base prefix, exactly one thin layer, reproducible ID, labels, no switch in Env" if args.builder == "kvbake"
         else "verified:  base prefix, labels, no switch in Env, files read back, patched code runs (deep)"),
        "phases:    " + ", ".join(f"{k} {v:.2f}s" for k, v in built.timings.items()),
        f"record:    {path.relative_to(manifest.root)}",
    ])
    return record, text


def cmd_plan(args: argparse.Namespace) -> Result:
    manifest = _manifest(args)
    lock = read_lock(manifest)
    plan = make_plan(manifest, lock, read_overlay(manifest, lock))
    summary = plan_summary(plan)
    lines = [f"plan for {manifest.path.name} ({'STAND-IN example' if manifest.standin else manifest.name}); nothing is changed",
             f"base:    {lock.base.reference}  config {lock.base.config_digest}  ({len(lock.base.diff_ids)} layers, {lock.base.platform})"]
    lines += [f"patch:   {p['id']}  sha256 {p['sha256'][:16]}…  files: {', '.join(p['files'])}" for p in summary["chain"]]
    lines += [f"file:    {f['path']}  {(f['before'] or 'new')[:12]} → {f['after'][:12]}  {f['mode']} {f['owner']}" for f in summary["files"]]
    lines += [f"remove:  /{w} (whiteout)" for w in summary["whiteouts"]]
    lines += [f"layer:   {summary['layer_diff_id']}", f"image:   {summary['image_id']}", f"tag:     {summary['reference']}"]
    lines += [f"label:   {k}={v}" for k, v in sorted(summary["labels"].items())]
    return summary, "\n".join(lines)


def cmd_lock(args: argparse.Namespace) -> Result:
    from kvbake.donor import import_patches
    from kvbake.locking import create_lock

    manifest = _manifest(args)
    imported = import_patches(manifest, args.donor) if args.donor else []
    if imported:
        manifest = load_manifest(args.manifest)
    lock = create_lock(Engine(args.host), manifest)
    data = {"lock": manifest.lock_path.name, "imported": imported, "files": len(lock.files), "patches": len(lock.patches),
            "image_id": lock.derived.image_id, "layer_diff_id": lock.derived.layer_diff_id, "tag": tag_for(manifest, lock)}
    text = (f"locked {manifest.path.name} → {manifest.lock_path.name}: {len(lock.patches)} patches, {len(lock.files)} files, "
            f"base {lock.base.config_digest[:19]}, expected image {lock.derived.image_id[:19]}")
    if imported:
        text += f"\nimported from the donor: {', '.join(imported)}"
    return data, text


def cmd_verify(args: argparse.Namespace) -> Result:
    from kvbake.building import DOCKER_BUILDER_SUFFIX
    from kvbake.verifying import verify_image

    manifest = _manifest(args)
    lock = read_lock(manifest)
    plan = make_plan(manifest, lock, read_overlay(manifest, lock))
    image = args.image or plan.reference + (DOCKER_BUILDER_SUFFIX if args.builder == "docker" else "")
    report = verify_image(Engine(args.host), plan, image, args.deep, args.builder)
    data = {"image": report.image, "image_id": report.image_id, "deep": report.deep, "files_checked": report.files_checked,
            "modules_proven": report.modules_proven, "ok": True}
    text = f"verified {report.image} ({report.image_id[:19]}): layers, labels, no switch in Env"
    if report.deep:
        text += f"; {report.files_checked} files read back"
        text += f"; {report.modules_proven} modules run their patched code" if report.python else "; no python3 in the image"
    return data, text


def cmd_dockerfile(args: argparse.Namespace) -> Result:
    from kvbake.dockerfile import render

    manifest = _manifest(args)
    lock = read_lock(manifest)
    plan = make_plan(manifest, lock, read_overlay(manifest, lock))
    target = manifest.root / "Dockerfile.overlay"
    target.write_text(render(plan))
    return {"dockerfile": str(target.name)}, f"wrote {Path(target).relative_to(manifest.root)}"


def cmd_push(args: argparse.Namespace) -> Result:
    from kvbake.pushing import push_image, push_record, upload_summary, write_push_record

    manifest = _manifest(args)
    lock = read_lock(manifest)
    plan = make_plan(manifest, lock, read_overlay(manifest, lock))
    result = push_image(Engine(args.host), plan, args.registry)
    record = push_record(result)
    path = write_push_record(manifest.root, record)
    text = "\n".join([
        f"pushed:    {result.target.reference}" + ("   (already present: nothing uploaded)" if result.already_present else ""),
        f"pull:      {result.pinned}   (what nodes pull)",
        f"uploaded:  {'nothing' if result.already_present else upload_summary(result.upload)}",
        f"read back: config {result.manifest.config_digest[:19]}… = image ID, diff_ids = base + thin layer, "
        f"{len(result.manifest.layers)} layers, labels equal",
        f"record:    {path.relative_to(manifest.root)}",
    ])
    return record, text


def _ship_context(args: argparse.Namespace, refuse_diverged: bool = False):
    from kvbake.deployfile import load_deployment
    from kvbake.rollout import refuse_if_diverged
    from kvbake.shipping import make_fleet

    manifest = _manifest(args)
    lock = read_lock(manifest)
    plan = make_plan(manifest, lock, read_overlay(manifest, lock))
    deployment = load_deployment(args.deploy)
    if refuse_diverged:
        refuse_if_diverged(deployment)
    return manifest, lock, plan, deployment, make_fleet(deployment, manifest, lock)


def cmd_deploy(args: argparse.Namespace) -> Result:
    from kvbake.presets import choose_preset
    from kvbake.rollout import deploy, recover
    from kvbake.shipping import make_release, pushed_reference

    manifest, lock, plan, deployment, fleet = _ship_context(args, refuse_diverged=not args.revert)
    if args.resume or args.revert:
        release_id = None
        if args.preset and args.resume:
            chosen = choose_preset(manifest, args.preset, args.allow_held, args.allow_untested, args.reason)
            release_id = make_release(plan, args.image or pushed_reference(manifest, plan), chosen, args.reason or "").id
        journal = recover(fleet, "resume" if args.resume else "revert", args.break_lock, release_id)
        verb = "resumed" if args.resume else "reverted"
        return {"journal": journal.id, "action": verb}, f"{verb} {journal.kind} {journal.id} on {len(fleet.engines)} nodes"
    if not args.preset:
        raise_usage("deploy needs --preset NAME (or --resume / --revert)")
    chosen = choose_preset(manifest, args.preset, args.allow_held, args.allow_untested, args.reason)
    image = args.image or pushed_reference(manifest, plan)
    release = make_release(plan, image, chosen, args.reason or "")
    journal = deploy(fleet, release, manifest.base.image, lock.base.diff_ids, args.break_lock)
    text = (f"deployed release {release.id} ({release.preset}, max-model-len {release.max_model_len}) to "
            f"{', '.join(n.name for n in deployment.nodes)}; verify-running passed on every rank")
    return {"release": release.id, "journal": journal.id, "image": release.image, "preset": release.preset,
            "switches": dict(release.switches), "nodes": [n.name for n in deployment.nodes]}, text


def cmd_rollback(args: argparse.Namespace) -> Result:
    from kvbake.rollout import rollback

    *_, deployment, fleet = _ship_context(args, refuse_diverged=True)
    journal = rollback(fleet, args.break_lock)
    return {"journal": journal.id, "release": journal.release_id}, (
        f"rolled back every rank to release {journal.release_id} (tag swap, nothing pulled); verify-running passed")


def cmd_verify_running(args: argparse.Namespace) -> Result:
    from kvbake.running import parse_expect
    from kvbake.shipping import verify_running

    *_, fleet = _ship_context(args)
    expect = None if args.expect is None else parse_expect(args.expect)
    reports = verify_running(fleet, expect)
    data = {"ok": True, "ranks": [{"node": r.node, "switches": r.switches} for r in reports]}
    lines = [f"{r.node}: ok, switches {','.join(f'{k}={v}' for k, v in sorted(r.switches.items())) or '(none)'}" for r in reports]
    return data, "\n".join(lines + ["all ranks agree"])


def cmd_status(args: argparse.Namespace) -> Result:
    from kvbake.shipping import status, status_table

    *_, fleet = _ship_context(args)
    data = status(fleet)
    return data, status_table(data)


def raise_usage(message: str) -> None:
    from kvbake.errors import PresetError

    raise PresetError(message, "see python build.py deploy --help")
