"""The operate commands (doctor, config, validate, capacity): one function each, returning (data for --json, text)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from kvbake.command_output import Result, emit
from kvbake.engines.adapters.client import Engine
from kvbake.errors import ResourceError, UsageError
from kvbake.lock import read_lock
from kvbake.manifest import Manifest, load_manifest
from kvbake.serve.core.presets import check_reason

if TYPE_CHECKING:
    from kvbake.bake.core.served_overlay import Proof, ServedOverlay


def cmd_doctor(args: argparse.Namespace) -> Result:
    from kvbake.bake.core.provenance import switch_names
    from kvbake.deployfile import check_node_launches, load_deployment
    from kvbake.operate.adapters.doctor import diagnose, first_failure
    from kvbake.operate.adapters.memwatch import GIB

    manifest = load_manifest(args.manifest)
    lock = read_lock(manifest) if manifest.lock_path.exists() else None
    deployment = load_deployment(args.deploy) if args.deploy else None
    if deployment is not None and lock is not None:
        check_node_launches(deployment, switch_names(manifest), lock.source_root)
    checks = diagnose(Engine(args.host), manifest, lock, deployment, args.registry, int(args.mem_floor * GIB), int(args.disk_floor * GIB))
    data = {"checks": [{"check": c.name, "verdict": c.verdict, "seen": c.seen} for c in checks]}
    failure = first_failure(checks)
    if failure is not None:
        emit(args, data | {"ok": False}, "\n".join(c.line() for c in checks))
        raise failure
    return data | {"ok": True}, "\n".join(c.line() for c in checks)


def cmd_config(args: argparse.Namespace) -> Result:
    from kvbake.serve.core import runtime_config as rc
    from kvbake.serve.core.presets import choose_preset

    check_reason(args.reason)
    manifest = load_manifest(args.manifest)
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
            expected = rc.as_tree(rc.render_many(manifest, names, provenance))
            if rc.unwritten(expected, actual):
                raise rc.unwritten_error(shown, out.is_dir(), provenance.lock_sha256 is not None)
            drift = rc.compare_tree(expected, actual)
            if not drift.clean:
                raise rc.drift_error(drift, shown)
            checked["presets"] = list(names)
            lines.append(f"{shown}: {', '.join(names)} match the manifest and lock")
        if args.deploy is not None:
            checked["nodes"], proof = _check_what_runs(manifest, args.deploy)
            lines.append("what runs matches the manifest: " + ", ".join(f"{node} serves preset {preset}" for node, preset in checked["nodes"].items()))
            if proof is not None:
                checked["served_proof"] = {"equal": list(proof.equal), "differences": [d.path for d in proof.differences]}
                lines.append(f"proof: {proof.line()}" if not proof.differences else
                             f"proof: a stated code change: {', '.join(d.path for d in proof.differences)} differ from what runs, "
                             f"as code-changes/ says")
        return checked, "\n".join(lines)
    if args.all == bool(args.preset):
        raise UsageError("config needs exactly one of PRESET, --all or --check", f"see {args.prog} config --help")
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


def _check_what_runs(manifest: Manifest, deploy_file: Path) -> tuple[dict[str, str], Proof | None]:
    """Every node's serve, process by process, against the manifest's presets: a kvbake release must still be its preset
    as the manifest states it, and what runs must equal that preset; a serve kvbake did not deploy (before or after
    adopt) must equal one of the presets, which proves that preset (control, after init) is today's serve. The files
    such a serve runs over its image (bind-mounted or changed in its writable layer) are proven against the locked
    chain's result (the proof, or None when no serve runs changed files or nothing is locked yet)."""
    from kvbake.deployfile import load_deployment
    from kvbake.serve.core import runtime_config as rc
    from kvbake.ship.adapters.fleet import connect
    from kvbake.ship.adapters.nodestate import NodeState
    from kvbake.ship.adapters.serve_reader import read_rank
    from kvbake.ship.adapters.served_files import read_served_overlay

    deployment = load_deployment(deploy_file)
    engines = connect(deployment)
    problems, served, overlays, asked = [], {}, {}, {}
    for node in deployment.nodes:
        engine = engines[node.name]
        release = NodeState(node.name, engine).read().current
        deployed = release if release is not None and release.adopted is None else None
        if deployed is not None:
            problems += rc.runtime_drift(manifest, node.name, deployed, None)
        name = deployment.launcher.container if deployed is not None else (node.container or deployment.launcher.container)
        container = engine.container_inspect(name)
        if not (container and (container.get("State") or {}).get("Running")):
            problems.append(f"{node.name} runs no container {name}")
            continue
        rank = read_rank(engine, container)
        preset, found = _serve_against_presets(manifest, rank.reading, node.name, deployed.preset if deployed else None,
                                               lambda args: api_length(deployment, args, asked))
        problems += found
        if preset:
            served[node.name] = preset
        if deployed is None:
            overlays[node.name] = read_served_overlay(engine, container, rank.changes, manifest.base.source_root)
    if problems:
        raise rc.running_drift_error(problems)
    return served, _served_bytes_proof(manifest, overlays)


def _served_bytes_proof(manifest: Manifest, overlays: dict[str, tuple[ServedOverlay, dict[str, bytes]]]) -> Proof | None:
    """The locked chain's result against the bytes every rank serves; ranks that serve different bytes, or a chain that
    bakes other bytes (unless lock --code-change stated exactly that change), refuse, naming each file."""
    from kvbake.bake.adapters.served_proof import kept_statement
    from kvbake.bake.core.plan import read_overlay
    from kvbake.bake.core.served_overlay import agreed, prove
    from kvbake.errors import IntegrityError

    if not overlays or not any(found.files for found, _ in overlays.values()) or not manifest.lock_path.exists():
        return None
    overlay = agreed({node: found for node, (found, _) in overlays.items()})
    lock = read_lock(manifest)
    proof = prove(overlay, next(iter(overlays.values()))[1], read_overlay(manifest, lock), {f.path: f.base_sha256 for f in lock.files})
    statement = kept_statement(manifest.root, lock.overlay_tree_sha256)
    if proof.differences and not (statement is not None and statement.covers(lock.overlay_tree_sha256, overlay, proof)):
        shown = "; ".join(f"{d.path}: {d.why}" for d in proof.differences[:3])
        raise IntegrityError(f"config --check: {proof.line()} ({shown})",
                             "run python build.py lock to see each diff (written beside the served record), then bake the served "
                             "bytes (init --capture) or fix the chain or the mounted overlay so both agree")
    return proof


def api_length(deployment: Any, args: Any, asked: dict[str, int | None]) -> int | None:
    """The length a serve started without --max-model-len runs: what the head's /v1/models says (asked once per run,
    with the serve's API key from VLLM_API_KEY, as init asked); None when the serve gives the option."""
    from kvbake.secret_env import SECRET_OPTIONS
    from kvbake.serve.core.serve_description import LENGTH_OPTION
    from kvbake.ship.adapters.served_length import serve_length

    if args.value(LENGTH_OPTION):
        return None
    if "head" not in asked:
        head = next((n for n in deployment.nodes if n.role == "head"), deployment.nodes[0])
        url = f"http://{head.address or '127.0.0.1'}:{args.value('--port') or '8000'}"
        asked["head"] = serve_length(url, os.environ.get(SECRET_OPTIONS["--api-key"]))[0]
    return asked["head"]


def _serve_against_presets(manifest: Manifest, reading: Any, node: str, wanted: str | None,
                           length_of: Callable[[Any], int | None] = lambda args: None) -> tuple[str | None, list[str]]:
    """(the preset every vLLM serve of the container equals, the differences): `wanted` when kvbake deployed it,
    else any preset (control first). `length_of` gives the length a serve without --max-model-len runs."""
    from kvbake.bake.core.provenance import switch_names
    from kvbake.operate.core.serve_presets import nearest, preset_differences, presets_served
    from kvbake.ship.core.process_checks import switch_set

    preset, problems = None, []
    for serving in reading.serving:
        args, switches = serving.serve.args, switch_set(serving.process.env, switch_names(manifest))
        length = length_of(args)
        matches = presets_served(args, switches, manifest.presets, length)
        if (wanted in matches) if wanted else matches:
            preset = wanted or matches[0]
            continue
        if wanted and wanted in manifest.presets:
            shown, differences = wanted, preset_differences(args, switches, manifest.presets[wanted], length)
        else:
            shown, differences = nearest(args, switches, manifest.presets, api_length=length)
        problems.append(f"{node} pid {serving.process.pid} is not preset {shown}: {'; '.join(differences)}")
    return (preset if not problems else None), problems


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
    from kvbake.operate.adapters.validation_run import ValidateRequest, api_key_of, check_written_options, run_validation
    from kvbake.serve.core.presets import choose_preset
    from kvbake.operate.core.validate_plan import parse_depths, report_text, report_to_dict

    check_reason(args.reason)
    check_written_options(args.endpoint, args.model)
    manifest = load_manifest(args.manifest)
    chosen = choose_preset(manifest, args.preset, args.allow_held, args.allow_untested, args.reason)
    deployment = load_deployment(args.deploy) if args.deploy else None
    request = ValidateRequest(manifest, chosen, args.endpoint, args.model, args.corpus, deployment, parse_depths(args.depths),
                              args.prefix_tokens, args.corruption_tokens, args.pressure, args.pressure_tokens, args.seed,
                              args.mem_floor, args.mem_interval, args.meminfo_path, oracle=args.oracle,
                              api_key=api_key_of(args.api_key_env, deployment))
    report, path = run_validation(request, _validate_rollback(args, manifest, deployment))
    shown = path.relative_to(manifest.root)
    return report_to_dict(report) | {"report": str(shown)}, report_text(report) + f"report:   {shown} (and .txt)"


def cmd_capacity(args: argparse.Namespace) -> Result:
    from kvbake.deployfile import load_deployment
    from kvbake.operate.adapters.capacity_logs import check_deployment, predict_preset
    from kvbake.operate.core.capacity_prediction import prediction_dict

    manifest = load_manifest(args.manifest)
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
        logged = [line.partition(":")[0] for line in ranks if "no KV cache size line" not in line]
        lines += [f"  {line}" for line in ranks] + [f"the predicted line was logged by {', '.join(logged)}"]
    return data, "\n".join(lines)


def _validate_rollback(args: argparse.Namespace, manifest: Manifest, deployment):
    if not args.rollback_on_failure:
        return None
    if deployment is None:
        raise UsageError("--rollback-on-failure needs --deploy", "pass --deploy deploy.yaml so the nodes are known")

    def roll_back() -> str:
        from kvbake.ship.adapters.fleet import make_fleet
        from kvbake.ship.adapters.rollout import rollback

        journal = rollback(make_fleet(deployment, manifest, read_lock(manifest)), break_lock=False)
        return f"rolled back every rank to release {journal.release_id}"

    return roll_back

