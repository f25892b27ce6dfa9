"""One function per CLI subcommand: parse nothing, call the library, return (data for --json, text for people)."""

from __future__ import annotations

import argparse
from pathlib import Path

from kvbake.bake.adapters.builder import build_image, build_with_docker
from kvbake.engines.adapters.client import Engine
from kvbake.errors import ResourceError, UsageError
from kvbake.lock import read_lock
from kvbake.manifest import Manifest, load_manifest
from kvbake.bake.core.plan import make_plan, plan_summary, read_overlay, tag_for
from kvbake.presets import check_reason
from kvbake.bake.core.build_record import build_record, write_record

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
    manifest = _manifest(args)
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
    from kvbake.bake.adapters.donor import import_patches
    from kvbake.bake.adapters.pinning import create_lock

    manifest = _manifest(args)
    if args.migrate:
        return _migrate_lock(args, manifest)
    imported = import_patches(manifest, args.donor) if args.donor else []
    if imported:
        manifest = load_manifest(args.manifest)
    lock = create_lock(Engine(args.host), manifest, rebase=args.rebase_base)
    data = {"lock": manifest.lock_path.name, "imported": imported, "files": len(lock.files), "patches": len(lock.patches),
            "image_id": lock.derived.image_id, "layer_diff_id": lock.derived.layer_diff_id, "tag": tag_for(manifest, lock)}
    text = (f"locked {manifest.path.name} → {manifest.lock_path.name}: {len(lock.patches)} patches, {len(lock.files)} files, "
            f"base {lock.base.config_digest[:19]}, expected config digest {lock.derived.image_id[:19]}")
    if imported:
        text += f"\nimported from the donor: {', '.join(imported)}"
    return data, text


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

    manifest = _manifest(args)
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


def cmd_doctor(args: argparse.Namespace) -> Result:
    from kvbake.cli import emit
    from kvbake.deployfile import load_deployment
    from kvbake.doctor import diagnose, first_failure
    from kvbake.memwatch import GIB

    manifest = _manifest(args)
    lock = read_lock(manifest) if manifest.lock_path.exists() else None
    deployment = load_deployment(args.deploy) if args.deploy else None
    checks = diagnose(Engine(args.host), manifest, lock, deployment, args.registry, int(args.mem_floor * GIB), int(args.disk_floor * GIB))
    data = {"checks": [{"check": c.name, "verdict": c.verdict, "seen": c.seen} for c in checks]}
    failure = first_failure(checks)
    if failure is not None:
        emit(args, data | {"ok": False}, "\n".join(c.line() for c in checks))
        raise failure
    return data | {"ok": True}, "\n".join(c.line() for c in checks)


def cmd_base(args: argparse.Namespace) -> Result:
    from kvbake.basesync import sync_base
    from kvbake.deployfile import load_deployment

    manifest = _manifest(args)
    lock = read_lock(manifest)
    deployment = load_deployment(args.deploy)
    result = sync_base(Engine(args.host), deployment, manifest, lock, args.registry, args.force)
    done = {"present": "already held it", "pull": "pulled it", "move": "moved its tag to it (--force)"}
    lines = [f"base:      {manifest.base.image} (config {lock.base.config_digest[:19]}…)",
             f"registry:  {result.pinned}" + ("   (pushed now)" if result.pushed else "   (already there: nothing pushed)")]
    lines += [f"{n.node}: {done[n.action]} as {result.node_name}" for n in result.nodes]
    data = {"pinned": result.pinned, "pushed": result.pushed, "node_name": result.node_name,
            "nodes": [{"node": n.node, "action": n.action, "held_before": n.held} for n in result.nodes]}
    return data, "\n".join(lines)


def cmd_deploy(args: argparse.Namespace) -> Result:
    from kvbake.presets import choose_preset
    from kvbake.rollout import deploy, recover
    from kvbake.shipping import make_release, pushed_reference

    if not (args.preset or args.resume or args.revert):
        raise_usage("deploy needs --preset NAME (or --resume / --revert)")
    check_reason(args.reason)
    manifest, lock, plan, deployment, fleet = _ship_context(args, refuse_diverged=not args.revert)
    if args.resume or args.revert:
        release_id = None
        if args.preset and args.resume:
            chosen = choose_preset(manifest, args.preset, args.allow_held, args.allow_untested, args.reason)
            release_id = make_release(plan, args.image or pushed_reference(manifest, plan), chosen, args.reason or "").id
        journal = recover(fleet, "resume" if args.resume else "revert", args.break_lock, release_id)
        verb = "resumed" if args.resume else "reverted"
        return {"journal": journal.id, "action": verb}, f"{verb} {journal.kind} {journal.id} on {len(fleet.engines)} nodes"
    chosen = choose_preset(manifest, args.preset, args.allow_held, args.allow_untested, args.reason)
    image = args.image or pushed_reference(manifest, plan)
    release = make_release(plan, image, chosen, args.reason or "")
    unknown = sorted(set(args.reseat) - {n.name for n in deployment.nodes})
    if unknown:
        raise_usage(f"--reseat {', '.join(unknown)}: no such node in {args.deploy.name}")
    journal = deploy(fleet, release, manifest.base.node_name, lock.base.diff_ids, args.break_lock, frozenset(args.reseat))
    text = (f"deployed release {release.id} ({release.preset}, max-model-len {release.max_model_len}) to "
            f"{', '.join(n.name for n in deployment.nodes)}; verify-running passed on every rank")
    return {"release": release.id, "journal": journal.id, "image": release.image, "preset": release.preset,
            "switches": dict(release.switches), "nodes": [n.name for n in deployment.nodes]}, text


def cmd_adopt(args: argparse.Namespace) -> Result:
    from kvbake.adoption import adopt

    check_reason(args.reason)
    *_, deployment, fleet = _ship_context(args, refuse_diverged=True)
    releases = adopt(fleet, args.reason, args.break_lock)
    lines = [f"{node}: adopted container {r.adopted['container_id'][:12]} ({r.image}, {dict(r.switches) or 'no switches'}) as release {r.id}"
             for node, r in releases.items()]
    lines.append("the first deploy keeps it as previous; python build.py rollback then restarts that very container")
    return {"release": next(iter(releases.values())).id, "nodes": {node: r.adopted["container_id"] for node, r in releases.items()}}, "\n".join(lines)


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


def cmd_config(args: argparse.Namespace) -> Result:
    from kvbake import runtime_config as rc
    from kvbake.presets import choose_preset

    check_reason(args.reason)
    manifest = _manifest(args)
    out = args.out if args.out is not None else manifest.root / "configs"
    shown = _shown(manifest, out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {shown} is not a folder", "pass a folder for the configuration (it is created when missing)")
    provenance = rc.Provenance(manifest.path.name, read_lock(manifest).core_sha256() if manifest.lock_path.exists() else None)
    if args.check:
        checked: dict = {"ok": True, "out": shown}
        lines = []
        if args.deploy is None or out.is_dir():
            actual = _read_tree(out)
            names = rc.checked_presets(manifest, rc.preset_names_in(actual), args.all)
            drift = rc.compare_tree(rc.as_tree(rc.render_many(manifest, names, provenance)), actual)
            if not drift.clean:
                raise rc.drift_error(drift, shown)
            checked["presets"] = list(names)
            lines.append(f"{shown}: {', '.join(names)} match the manifest and lock")
        if args.deploy is not None:
            checked["nodes"] = _check_what_runs(manifest, args.deploy)
            lines.append(f"what runs on {', '.join(checked['nodes'])} matches the manifest's runtime settings")
        return checked, "\n".join(lines)
    if args.all == bool(args.preset):
        raise UsageError("config needs exactly one of PRESET, --all or --check", "see python build.py config --help")
    if args.all:
        configs = rc.render_many(manifest, manifest.presets, provenance)
    else:
        chosen = choose_preset(manifest, args.preset, args.allow_held, args.allow_untested, args.reason)
        configs = (rc.render_config(manifest, chosen, provenance),)
    _write_tree(out, rc.as_tree(configs))
    lines = [f"wrote {shown}/{c.preset}/ ({', '.join(c.files)}): {manifest.presets[c.preset].status}, "
             f"max-model-len {manifest.presets[c.preset].max_model_len}, {len(manifest.presets[c.preset].switches)} switches"
             for c in configs]
    lines.append(f"{rc.drafter_limit(manifest)}; lock: {provenance.lock_sha256 or 'unlocked'}")
    return {"out": shown, "presets": [c.preset for c in configs], "lock_sha256": provenance.lock_sha256}, "\n".join(lines)


def _check_what_runs(manifest: Manifest, deploy_file: Path) -> list[str]:
    """Every node's recorded release and serving switch set against the manifest's presets now."""
    from kvbake import runtime_config as rc
    from kvbake.deployfile import load_deployment
    from kvbake.nodestate import NodeState
    from kvbake.bake.core.provenance import switch_names
    from kvbake.rollout import connect
    from kvbake.running import switch_env

    deployment = load_deployment(deploy_file)
    problems = []
    for name, engine in connect(deployment).items():
        release = NodeState(name, engine).read().current
        container = engine.container_inspect(deployment.launcher.container)
        running = switch_env(container["Config"]["Env"], switch_names(manifest)) if container else None
        problems += rc.runtime_drift(manifest, name, release, running)
    if problems:
        raise rc.running_drift_error(problems)
    return [n.name for n in deployment.nodes]


def _shown(manifest: Manifest, folder: Path) -> str:
    folder = folder.absolute()
    return str(folder.relative_to(manifest.root)) if folder.is_relative_to(manifest.root) else str(folder)


def _read_tree(folder: Path) -> dict[str, str]:
    if not folder.is_dir():
        return {}
    return {p.relative_to(folder).as_posix(): p.read_text(encoding="utf-8", errors="replace")
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _write_tree(folder: Path, tree: dict[str, str]) -> None:
    from kvbake.atomicfile import write_atomic

    for relative, text in sorted(tree.items()):
        target = folder / relative
        try:
            write_atomic(target, text.encode("utf-8"))
        except OSError as err:
            raise ResourceError(f"cannot write {target}: {err.strerror}", "pass an --out folder this user can write") from None


def cmd_validate(args: argparse.Namespace) -> Result:
    from kvbake.deployfile import load_deployment
    from kvbake.presets import choose_preset
    from kvbake.validate_plan import parse_depths, report_text, report_to_dict
    from kvbake.validating import ValidateRequest, check_written_options, run_validation

    check_reason(args.reason)
    check_written_options(args.endpoint, args.model)
    manifest = _manifest(args)
    chosen = choose_preset(manifest, args.preset, args.allow_held, args.allow_untested, args.reason)
    deployment = load_deployment(args.deploy) if args.deploy else None
    request = ValidateRequest(manifest, chosen, args.endpoint, args.model, args.corpus, deployment, parse_depths(args.depths),
                              args.prefix_tokens, args.corruption_tokens, args.pressure, args.pressure_tokens, args.seed,
                              args.mem_floor, args.mem_interval, args.meminfo_path, oracle=args.oracle)
    report, path = run_validation(request, _validate_rollback(args, manifest, deployment))
    shown = path.relative_to(manifest.root)
    return report_to_dict(report) | {"report": str(shown)}, report_text(report) + f"report:   {shown} (and .txt)"


def cmd_capacity(args: argparse.Namespace) -> Result:
    from kvbake.capacity_logs import check_deployment, predict_preset
    from kvbake.capacity_prediction import prediction_dict
    from kvbake.deployfile import load_deployment

    manifest = _manifest(args)
    prediction = predict_preset(manifest, args.preset, args.model_config, args.device)
    cap = prediction.capacity
    scaled = f", blocks x{prediction.blocks_factor} by the preset's packing switch" if prediction.blocks_factor != 1 else ""
    lines = [f"{args.preset} (predicted): {prediction.line}",
             f"  {cap.num_blocks:,} blocks of {cap.bytes_per_block:,} bytes, {cap.blocks_per_request} per full-length request{scaled}"]
    data = prediction_dict(prediction)
    if not cap.fits:
        lines.append("  vLLM would refuse to start: one full-length request does not fit beside the null block")
    if args.deploy is not None:
        ranks = check_deployment(prediction, load_deployment(args.deploy))
        data["ranks"] = ranks
        lines += [f"  {line}" for line in ranks] + ["every rank logged the predicted line"]
    return data, "\n".join(lines)


def _validate_rollback(args: argparse.Namespace, manifest: Manifest, deployment):
    if not args.rollback_on_failure:
        return None
    if deployment is None:
        raise UsageError("--rollback-on-failure needs --deploy", "pass --deploy deploy.yaml so the nodes are known")

    def roll_back() -> str:
        from kvbake.rollout import rollback
        from kvbake.shipping import make_fleet

        journal = rollback(make_fleet(deployment, manifest, read_lock(manifest)), break_lock=False)
        return f"rolled back every rank to release {journal.release_id}"

    return roll_back


def raise_usage(message: str) -> None:
    raise UsageError(message, "see python build.py deploy --help")
