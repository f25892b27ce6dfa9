"""The ship commands (push, base sync, deploy, adopt, rollback, verify-running, status): one function each."""

from __future__ import annotations

import argparse
import os
import re
import shlex
from pathlib import Path

from kvbake.bake.core.plan import make_plan, read_overlay
from kvbake.command_output import Result
from kvbake.engines.adapters.client import Engine
from kvbake.errors import UsageError
from kvbake.lock import read_lock
from kvbake.manifest import load_manifest
from kvbake.names import check_container_name, check_node_name
from kvbake.serve.core.presets import check_reason
from kvbake.serve.core.launcher_ties import RUNBOOK
from kvbake.serve.core.serve_reading import RAY_WORKER


def cmd_push(args: argparse.Namespace) -> Result:
    from kvbake.ship.adapters.pusher import push_image, push_record, upload_summary, write_push_record

    manifest = load_manifest(args.manifest)
    lock = read_lock(manifest)
    plan = make_plan(manifest, lock, read_overlay(manifest, lock))
    secret = None
    if args.sign is not None:
        from kvbake.attest.adapters.signing import opened_key
        secret = opened_key(args.sign)  # before anything is pushed
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
    if secret is not None:
        from kvbake.attest.adapters.signing import sign_pushed
        from kvbake.ship.core.push_record import pushed_image
        signed, said = sign_pushed(pushed_image(manifest, lock).pinned, lock, manifest.path.name, args.sign, secret)
        return record | {"signed": signed}, f"{text}\nsigned:    {said}"
    return record, text


def _ship_context(args: argparse.Namespace, refuse_diverged: bool = False):
    """The manifest, its lock, the deployment and its fleet; no plan: nothing is rebuilt after push."""
    from kvbake.ship.adapters.fleet import make_fleet
    from kvbake.ship.adapters.rollout import refuse_if_diverged

    manifest, lock, deployment = _deployment_context(args)
    if refuse_diverged:
        refuse_if_diverged(deployment)
    return manifest, lock, deployment, make_fleet(deployment, manifest, lock)


def _deployment_context(args: argparse.Namespace):
    """The manifest, its lock and the deployment, each node's launch settings checked against the manifest's switches
    and the image's source root; no engine is touched."""
    from kvbake.bake.core.provenance import switch_names
    from kvbake.deployfile import check_node_launches, load_deployment

    manifest = load_manifest(args.manifest)
    lock = read_lock(manifest)
    deployment = load_deployment(args.deploy)
    check_node_launches(deployment, switch_names(manifest), lock.source_root)
    return manifest, lock, deployment


def cmd_base(args: argparse.Namespace) -> Result:
    from kvbake.deployfile import load_deployment
    from kvbake.ship.adapters.basesync import sync_base

    manifest = load_manifest(args.manifest)
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
    from kvbake.serve.core.presets import choose_preset
    from kvbake.attest.core.slsa import provenance_predicate
    from kvbake.ship.adapters.rollout import deploy, recover, who_deploys
    from kvbake.ship.core.push_record import check_digest_reference, pushed_image
    from kvbake.ship.core.release import make_release

    if not (args.preset or args.resume or args.revert or args.reset_tags):
        raise_usage("deploy needs --preset NAME (or --resume / --revert / --reset-tags)", args.prog)
    if args.image:
        check_digest_reference(args.image)
    check_reason(args.reason)
    if args.reset_tags and (args.preset or args.reseat or args.image or args.dry_run):
        raise_usage("deploy --reset-tags takes no --preset, --image, --reseat or --dry-run: it moves no release", args.prog)
    if args.dry_run:
        return deploy_dry_run(args)
    manifest, lock, deployment, fleet = _ship_context(args, refuse_diverged=not args.revert)
    if args.reset_tags:
        return reset_stray_tags(fleet, args.break_lock)
    if args.resume or args.revert:
        release_id = None
        if args.preset and args.resume:
            chosen = choose_preset(manifest, args.preset, args.allow_held, args.allow_untested, args.reason)
            release_id = make_release(pushed_image(manifest, lock, args.image), chosen, manifest, args.reason or "", who_deploys()).id
        journal = recover(fleet, "resume" if args.resume else "revert", args.break_lock, release_id)
        if journal.phase == "never began":
            return ({"journal": journal.id, "action": "dropped"},
                    f"{journal.kind} {journal.id} never began (no step ran, no node keeps its journal): nothing to undo; its journal was removed")
        verb = "resumed" if args.resume else "reverted"
        return {"journal": journal.id, "action": verb}, f"{verb} {journal.kind} {journal.id} on {len(fleet.engines)} nodes"
    chosen = choose_preset(manifest, args.preset, args.allow_held, args.allow_untested, args.reason)
    release = make_release(pushed_image(manifest, lock, args.image), chosen, manifest, args.reason or "", who_deploys())
    unknown = sorted(set(args.reseat) - {n.name for n in deployment.nodes})
    if unknown:
        raise_usage(f"--reseat {', '.join(unknown)}: no such node in {args.deploy.name}", args.prog)
    journal = deploy(fleet, release, manifest.base.node_name, lock.base.diff_ids, args.break_lock, frozenset(args.reseat),
                     provenance_predicate(lock, manifest.path.name)["materials"])
    text = (f"deployed release {release.id} ({release.preset}, max-model-len {release.max_model_len}) to "
            f"{', '.join(n.name for n in deployment.nodes)}; verify-running passed on every rank")
    data = {"release": release.id, "journal": journal.id, "image": release.image, "preset": release.preset,
            "switches": dict(release.switches), "nodes": [n.name for n in deployment.nodes]}
    baseline = deployed_release_as_baseline(manifest, lock, release.id, deployment)
    if baseline:
        data["proof_baseline"] = baseline
        text += f"\nproof baseline: {baseline}"
    return data, text


def reset_stray_tags(fleet, break_lock: bool) -> Result:
    """`deploy --reset-tags`: what was put back, or that every tag already agreed."""
    from kvbake.ship.adapters.tag_reset import reset_tags

    resets = reset_tags(fleet, break_lock)
    if not resets:
        return {"reset": []}, "every current and previous tag points where its node's records say: nothing changed"
    return {"reset": [reset.describe() for reset in resets]}, "\n".join(["reset the tags from the records:", *(r.describe() for r in resets)])


def deployed_release_as_baseline(manifest, lock, release_id: str, deployment) -> str:
    """The release just deployed becomes the served-bytes proof's baseline, when this project keeps one: what lock
    holds a later chain against, or "" without a proof."""
    from kvbake.bake.adapters.served_proof import read_served, release_becomes_baseline

    if read_served(manifest.root) is None:
        return ""
    if release_becomes_baseline(manifest.root, lock.overlay_tree_sha256, release_id, [n.name for n in deployment.nodes]) is None:
        return "kept as it was: this lock was made on another host (run lock here to stage its files)"
    return f"release {release_id} (a later lock is held against the files it serves)"


def signing_key_entry(path: Path, out: Path) -> str:
    """A reviewer's public key as deploy.yaml lists it: relative to the project folder; it must be one now."""
    from kvbake.deployfile import PUBLIC_KEY_HEADER

    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise UsageError(f"init: --signing-key {path} cannot be read ({err.strerror})", "give each reviewer's cosign.pub") from None
    if not text.lstrip().startswith(PUBLIC_KEY_HEADER) or path.suffix != ".pub":
        raise UsageError(f"init: --signing-key {path} is not a cosign public key (.pub with a {PUBLIC_KEY_HEADER} line)",
                         "give the .pub file python build.py keys wrote, never the private key")
    return os.path.relpath(path.absolute(), out.absolute())


def pairs(values: list[str], what: str, bare: bool = False) -> dict[str, str]:
    """NAME=VALUE options as a mapping; with `bare`, a value without NAME= applies to every node (key "")."""
    found: dict[str, str] = {}
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep and bare:
            name, rest = "", value
        if (not sep and not bare) or not rest or name in found:
            raise UsageError(f"init: {what} {value!r} is not NAME=VALUE (or names {name or 'every node'} twice)",
                             f"give {what} NAME=VALUE once per node, e.g. {what} spark-a=ssh://ops@spark-a")
        found[name] = rest
    return found


def cmd_init(args: argparse.Namespace) -> Result:
    from kvbake.ship.adapters.project_init import init_project
    from kvbake.ship.core.init_documents import LAUNCHER_COMMAND, InitOptions

    nodes = {check_node_name(name, "--node"): host for name, host in pairs(args.node, "--node").items()}
    containers = {node: check_container_name(name, "--container") for node, name in pairs(args.container, "--container", bare=True).items()}
    unknown = sorted(set(containers) - set(nodes) - {""})
    if unknown:
        raise UsageError(f"init: --container names {', '.join(unknown)}, which no --node gives", "name each container's node as --node gives it")
    if args.donor_revision and not re.fullmatch(r"[0-9a-f]{40}", args.donor_revision):
        raise UsageError(f"init: --donor-revision {args.donor_revision!r} is not a full commit id", "give the 40-hex-digit commit")
    launcher = tuple(shlex.split(args.launcher)) if args.launcher else tuple(LAUNCHER_COMMAND)
    if not launcher:
        raise UsageError("init: --launcher is empty", "give the launcher command, e.g. --launcher kvbake-launch-vllm")
    keys = tuple(signing_key_entry(path, args.out) for path in args.signing_key)
    result = init_project(list(nodes.items()), containers, args.out, args.template,
                          InitOptions(args.registry or "", args.donor_url or "", args.donor_revision or "", launcher,
                                      signing_keys=keys, capture=args.capture), args.force)
    return init_report(result)


def init_report(result) -> Result:
    from kvbake.serve.core.serve_description import privileged_line

    d = result.described
    lines = [f"{n.node}: {n.name} ({'vLLM started by docker exec' if n.serving and n.serving.execd else 'vLLM as its main process' if n.serving else 'a Ray node, no vLLM'}), "
             f"image {n.image_id[:19]}" for n in result.nodes]
    lines.append(f"base: {d.base.image} ({'registry digest' if d.base.by_digest else 'no registry digest: lock pins its config digest'})")
    lines.append(f"control: max-model-len {d.max_model_len}, arguments: {' '.join(d.launcher_args) or '(none)'}")
    if d.switches:
        shown = ",".join(f"{k}={v}" for k, v in sorted(d.switches.items()))
        lines.append(f"switches set in the serve: {shown}: " + (f"preset {result.implied}" if result.implied else "no preset has this switch set"))
    for node, changed in d.changes.items():
        lines.append(f"{node}: its writable layer changes {len(changed)} file(s) under the source root ({', '.join(changed[:3])}): the baked chain must include them")
    if d.overrides:
        lines.append(f"code overrides in the serve's environment (not carried): {', '.join(sorted(d.overrides))}")
    if d.drafter is not None:
        lines.append(f"drafter: {d.drafter.url} ({d.drafter.option}, written once: DRAFTER_ARGS) "
                     + (f"serves {d.drafter.served_positions} positions, as its /v1/models says" if d.drafter.served_positions else
                        f"did not answer /v1/models; its limit is taken as {d.drafter.limit or d.max_model_len}"))
    if d.secrets or d.ray_secrets:
        lines.append(f"secrets (by name only; export them where kvbake deploy runs): {', '.join(sorted({*d.secrets, *d.ray_secrets}))}")
    lines += [privileged_line(node, d.node_launch.get(node) or {}) for node in d.privileged]
    lines += served_lines(result)
    lines += [f"tied to its launcher: {tie}; retire the launcher before adopt ({RUNBOOK})" for tie in result.ties]
    lines.append(f"wrote {', '.join(str(p) for p in result.written)}")
    lines += [f"to fill: {p.where}: {p.fix}" for p in result.left]
    lines.append("next: python build.py config --check --deploy deploy.yaml (proves control is the serve that runs)")
    data = {"written": [str(p) for p in result.written], "base": d.base.image, "control": {"max_model_len": d.max_model_len,
            "launcher_args": list(d.launcher_args)}, "switches": dict(d.switches), "implied_preset": result.implied,
            "containers": {n.node: n.name for n in result.nodes}, "placeholders": [p.where for p in result.left],
            "changes": {k: list(v) for k, v in d.changes.items()},
            "served": [{"path": f.path, "sha256": f.sha256, "base_sha256": f.base_sha256, "how": f.how} for f in result.served.files],
            "served_record": str(result.served_record),
            "privileged": {node: {key: (d.node_launch.get(node) or {}).get(key) for key in ("devices", "cap_add", "ulimits")}
                           for node in d.privileged}, "launcher_ties": list(result.ties)}
    return data, "\n".join(lines)


def served_lines(result) -> list[str]:
    """What the serve runs over its image, file by file, and what lock will prove or bake from it."""
    served = result.served
    if not served.files:
        return [f"served: every file under {served.source_root} is the image's own (no overlay mounted or changed)"]
    lines = [f"served: {f.path} {f.how}, sha256 {f.sha256[:16]}… ({'image ' + f.base_sha256[:16] + '…' if f.base_sha256 else 'not in the image'})"
             for f in served.files]
    lines.append(f"recorded {len(served.files)} served file(s) in {result.served_record}: "
                 + ("the captured chain bakes exactly these bytes" if result.captured else
                    "lock proves the chain's result equals them byte for byte"))
    return lines


def deploy_dry_run(args: argparse.Namespace) -> Result:
    """deploy --dry-run: what every node's launcher would run for the preset; no engine is touched, nothing changes."""
    from kvbake.serve.core.presets import choose_preset
    from kvbake.ship.adapters.dry_run import dry_run, report_data, report_text
    from kvbake.ship.adapters.rollout import who_deploys
    from kvbake.ship.core.push_record import pushed_image
    from kvbake.ship.core.release import make_release

    given = [flag for flag, on in (("--resume", args.resume), ("--revert", args.revert), ("--reseat", args.reseat),
                                   ("--reset-tags", args.reset_tags), ("--break-lock", args.break_lock)) if on]
    if given or not args.preset:
        raise_usage(f"deploy --dry-run takes --preset NAME and no {', '.join(given) or '--resume or --revert'}", args.prog)
    manifest, lock, deployment = _deployment_context(args)
    chosen = choose_preset(manifest, args.preset, args.allow_held, args.allow_untested, args.reason)
    release = make_release(pushed_image(manifest, lock, args.image), chosen, manifest, args.reason or "", who_deploys())
    reports = dry_run(deployment, manifest.output.repository, release)
    return report_data(release, reports), report_text(release, reports)


def cmd_adopt(args: argparse.Namespace) -> Result:
    from kvbake.ship.adapters.adoption import adopt, release_adoption
    from kvbake.ship.adapters.rollout import recover

    check_reason(args.reason)
    if args.container:
        check_container_name(args.container, "adopt --container")
    *_, deployment, fleet = _ship_context(args, refuse_diverged=not args.revert)
    if args.resume or args.revert:
        journal = recover(fleet, "resume" if args.resume else "revert", args.break_lock, command="adopt")
        verb = "dropped" if journal.phase == "never began" else ("resumed" if args.resume else "reverted")
        return {"journal": journal.id, "action": verb}, f"{verb} adopt {journal.id} on {len(fleet.engines)} nodes"
    if args.release:
        nodes = release_adoption(fleet, args.break_lock)
        return {"released": nodes}, f"forgot the adopted serve on {', '.join(nodes)} and removed its kept containers"
    releases = adopt(fleet, args.reason, args.break_lock, args.container, args.launcher_retired)
    return adopt_report(releases)


def adopt_report(releases: dict) -> Result:
    lines = []
    for node, r in releases.items():
        a = r.adopted
        runs = ("a Ray node that runs no vLLM of its own" if a["shape"] == RAY_WORKER else
                "vLLM started by docker exec" if a["exec"] else "vLLM runs as its main process")
        lines.append(f"{node}: adopted {a['name']} ({a['container_id'][:12]}, {a['shape']} shape: {runs}) serving {r.image} "
                     f"with {dict(r.switches) or 'no switches'}, max-model-len {r.max_model_len}, as release {r.id}")
        if a.get("changes"):
            lines.append(f"{node}: its writable layer changes {len(a['changes'])} file(s) under the source root ({', '.join(a['changes'][:3])}"
                         f"{', …' if len(a['changes']) > 3 else ''}): the baked chain must include them"
                         + ("; a --rm serve comes back without them" if a["spec"]["host"].get("AutoRemove") else ""))
        if a.get("restart", "no") != "no" and not a["spec"]["host"].get("AutoRemove"):
            lines.append(f"{node}: its restart policy {a['restart']} is off now: kvbake starts and stops it (rollback --to adopted "
                         "gives the policy back); retire the launcher that started it")
    lines.append("the first deploy keeps it as previous; rollback (or rollback --to adopted) brings it back exactly, until adopt --release")
    data = {"release": next(iter(releases.values())).id,
            "nodes": {node: {"container": r.adopted["container_id"], "name": r.adopted["name"], "shape": r.adopted["shape"],
                             "changes": r.adopted["changes"]} for node, r in releases.items()}}
    return data, "\n".join(lines)


def cmd_hand_back(args: argparse.Namespace) -> Result:
    from kvbake.ship.adapters.hand_back import hand_back

    *_, deployment, fleet = _ship_context(args, refuse_diverged=True)
    handed = hand_back(fleet, args.break_lock)
    return hand_back_report(handed, deployment.path.parent)


def hand_back_report(handed: list, folder: Path) -> Result:
    """What hand-back did per node, and what the operator does next."""
    data = {"nodes": {h.node: {"serve": h.serve, "audit": str(h.audit.relative_to(folder)) if h.audit else None,
                               "removed": list(h.removed)} for h in handed}}
    if not handed:
        return data, "nothing of kvbake's is left on any node: they are your launcher's already"
    lines = []
    for h in handed:
        serve = f"{h.serve} runs on, under its own restart policy" if h.serve else "no serve of kvbake's"
        audit = f"; its audit log is in {h.audit.relative_to(folder)}" if h.audit else ""
        lines.append(f"{h.node}: {serve}; removed {', '.join(h.removed)}{audit}")
    lines.append("the nodes are your launcher's again (stop and start the serve as before kvbake); adopt works again")
    return data, "\n".join(lines)


def cmd_rollback(args: argparse.Namespace) -> Result:
    from kvbake.bake.adapters.served_proof import BEFORE_KVBAKE, restore_baseline
    from kvbake.ship.adapters.adoption import rollback_to_adopted
    from kvbake.ship.adapters.rollout import rollback

    manifest, _, deployment, fleet = _ship_context(args, refuse_diverged=True)
    journal = rollback_to_adopted(fleet, args.break_lock) if args.to == "adopted" else rollback(fleet, args.break_lock)
    data = {"journal": journal.id, "release": journal.release_id}
    text = f"rolled back every rank to release {journal.release_id} (tag swap, nothing pulled); verify-running passed"
    baseline = restore_baseline(manifest.root, BEFORE_KVBAKE if args.to == "adopted" else journal.release_id,
                                [n.name for n in deployment.nodes])
    if baseline is not None:
        data["proof_baseline"] = baseline.label()
        text += f"\nproof baseline: {baseline.label()} (a later lock is held against the files it serves)"
    return data, text


def cmd_verify_running(args: argparse.Namespace) -> Result:
    from kvbake.ship.adapters.status import verify_running
    from kvbake.ship.core.running import parse_expect

    *_, fleet = _ship_context(args)
    expect = None if args.expect is None else parse_expect(args.expect)
    reports = verify_running(fleet, expect)
    data = {"ok": True, "ranks": [{"node": r.node, "switches": r.switches} for r in reports]}
    lines = [f"{r.node}: ok, switches {','.join(f'{k}={v}' for k, v in sorted(r.switches.items())) or '(none)'}" for r in reports]
    return data, "\n".join(lines + ["all ranks agree"])


def cmd_status(args: argparse.Namespace) -> Result:
    from kvbake.ship.adapters.status import status, status_table

    *_, fleet = _ship_context(args)
    data = status(fleet)
    if getattr(args, "html", None) is not None:
        from kvbake.atomicfile import write_atomic
        from kvbake.ship.core.html_status import status_html

        write_atomic(args.html, status_html(data).encode("utf-8"))
    return data, status_table(data)


def raise_usage(message: str, prog: str) -> None:
    raise UsageError(message, f"see {prog} deploy --help")

