"""`build.py adopt`: the serve every node runs (kvbake did not deploy it) becomes its current release, through the journal."""

# The adopted serve is recorded as it runs, process by process: its image, the switch set and length its vLLM serve
# runs with, its create spec, and in the exec shape the `docker exec` command line that started vLLM. Its writable
# layer is committed as a local copy on its node (a launcher's mods live there). It stays restorable (kept stopped, or
# recreated from its spec on that copy) until `adopt --release` or `hand-back`.

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, replace

from kvbake.errors import KvbakeError, RolloutError
from kvbake.serve.core.presets import check_reason
from kvbake.secret_env import withhold_args
from kvbake.secretscan import refuse_credentials
from kvbake.ship.adapters.fleet import Fleet
from kvbake.ship.adapters import adopted_serve
from kvbake.ship.adapters.adopted_copy import commit_copy, remove_stray_copies
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.adapters.other_serves import refuse_other_serves
from kvbake.ship.adapters.stray_tags import refuse_stray_tags
from kvbake.ship.adapters.rollout import NodeView, check_views, fenced, locked, new_journal_id, refuse_marks, refuse_pending, view, who_deploys
from kvbake.serve.core.launcher_ties import RUNBOOK, launcher_ties, trap_ties
from kvbake.ship.adapters.serve_reader import RankServe, read_rank, serving_container
from kvbake.ship.adapters.served_files import layer_digests, refuse_foreign_hooks
from kvbake.ship.adapters.transitions import records_of, run_transition
from kvbake.ship.core.create_spec import create_spec, unrestorable
from kvbake.ship.core.journal import Journal, NodePlan
from kvbake.ship.core.process_checks import changed_files, handed_switches, ray_worker_switches, switch_set, worker_switch_problems
from kvbake.ship.core.release import Release, release_to_json, runtime_config
from kvbake.serve.core.serve_reading import RAY_WORKER, ServingProcess, exec_command, ray_exec_command
from kvbake.serve.core.serve_description import refuse_second_serves

log = logging.getLogger(__name__)

ADOPTED_PRESET = "adopted"
KEPT_SUFFIX = "-kvbake-adopted"


@dataclass(frozen=True)
class FoundServe:
    """A node's serve as adopt finds it: its container, what its processes run, and its writable layer's changes."""

    node: str
    container: dict
    serve: RankServe


def serve_name(fleet: Fleet, node: str, override: str | None) -> str:
    """Which container serves on a node: --container, else the node's own `container`, else the launcher's."""
    return override or fleet.node(node).container or fleet.deployment.launcher.container


def running_serve_name(fleet: Fleet, node: str, override: str | None) -> str:
    """The serving container's name: --container, else the node's named one while it runs; once that is gone (a
    launcher that names every run anew: run_cluster.sh's `node-<random>`), the one running container with a vLLM serve or
    a Ray node, found by its processes as init finds it."""
    name = serve_name(fleet, node, override)
    if override or ((fleet.engines[node].container_inspect(name) or {}).get("State") or {}).get("Running"):
        return name
    try:
        return serving_container(fleet.engines[node], node, None)
    except RolloutError:
        return name  # none, or several: refused below, naming the container the deployment file names


def find_serves(fleet: Fleet, override: str | None = None) -> dict[str, FoundServe]:
    """Each node's running serving container and its vLLM serve; a node without either stops `adopt` before any change."""
    found, missing = {}, []
    for node, engine in fleet.engines.items():
        name = running_serve_name(fleet, node, override)
        container = engine.container_inspect(name)
        if not (container and (container.get("State") or {}).get("Running")):
            missing.append((node, name))
            continue
        found[node] = FoundServe(node, container, read_rank(engine, container))
    if missing:
        nodes, names = ", ".join(node for node, _ in missing), ", ".join(sorted({name for _, name in missing}))
        raise RolloutError(f"adopt: {nodes} {'runs' if len(missing) == 1 else 'run'} no serve (no running container {names})",
                           "adopt records a running serve: start it there first, name its "
                           "container with --container or the node's container: in the deployment file, or deploy a release instead; "
                           "nothing was changed")
    serving = any(s.serve.reading.serving for s in found.values())
    idle = [f"{s.node} ({str(s.container.get('Name', '')).lstrip('/')}: its main process is {' '.join(s.serve.reading.main.argv)[:60] if s.serve.reading.main else 'gone'})"
            for s in found.values() if not s.serve.reading.serving and not (serving and s.serve.reading.ray)]
    if idle:
        raise RolloutError(f"adopt: no vLLM serve runs in {'; '.join(idle)}",
                           "start vLLM in it as you do (docker exec … vllm serve …), then adopt; nothing was changed")
    refuse_second_serves("adopt", {s.node: s.serve.reading for s in found.values()})
    refuse_foreign_hooks("adopt", [(s.node, fleet.engines[s.node], s.container, s.serve) for s in found.values()])
    return found


def adopted_release(fleet: Fleet, found: FoundServe, reason: str, lead: ServingProcess) -> Release:
    """The record of a serve kvbake did not deploy, from what its vLLM serve runs; per node, how to bring it back. A
    Ray worker rank runs no vLLM process: its record carries the serve of the rank that does (`lead`)."""
    engine, container = fleet.engines[found.node], found.container
    if (container.get("HostConfig") or {}).get("AutoRemove") and unrestorable(container):
        raise RolloutError(f"adopt: {found.node}'s serve runs with --rm and sets {', '.join(unrestorable(container))}, which kvbake cannot "
                           "give a container it recreates", "start the serve without --rm (its container is then kept), or without those "
                           "settings; nothing was changed")
    image = engine.require_image(container["Image"])
    own = found.serve.reading.serving[0] if found.serve.reading.serving else None
    serving = own or lead
    name = str(container.get("Name", "")).lstrip("/")
    changes = changed_files(found.serve.changes, fleet.source_root)
    length = serving.serve.args.value("--max-model-len") or "0"
    return Release(
        image=(container.get("Config") or {}).get("Image") or container["Image"],
        config_digest=engine.config_digest_of(image, container["Image"]),  # never a request to the image's own registry
        layers=tuple(image["RootFS"]["Layers"]), labels=dict(image["Config"]["Labels"] or {}), preset=ADOPTED_PRESET,
        switches=rank_switches(found, lead, fleet.switch_names), max_model_len=int(length) if length.isdigit() else 0,
        launcher_args=(), deployed_by=who_deploys(), deployed_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), reason=reason,
        override=None, image_config=runtime_config(image["Config"]),
        adopted={"container_id": container["Id"], "kept_as": f"{name}{KEPT_SUFFIX}", "image_id": container["Image"], "name": name,
                 "shape": found.serve.reading.shape if own else RAY_WORKER, "spec": create_spec(container),
                 "restart": ((container.get("HostConfig") or {}).get("RestartPolicy") or {}).get("Name") or "no",
                 "exec": exec_command(own, (container.get("Config") or {}).get("Env") or ()) if own and own.execd else None,
                 "ray_exec": ray_exec_command(found.serve.reading.ray, (container.get("Config") or {}).get("Env") or ()),
                 "serve_argv": withhold_args(own.process.argv)[0] if own else [],
                 "changes": [path for path, _ in changes],
                 "change_sha256": layer_digests(engine, container["Id"], [path for path, kind in changes if kind != "D"])})


def rank_switches(found: FoundServe, lead: ServingProcess, names: tuple[str, ...]) -> dict[str, str]:
    """The switch set a rank's own vLLM runs with: its serve's environment, or on a Ray worker rank its Ray node's
    environment, with the switches the head's serve (`lead`) hands its workers where the node sets none."""
    reading = found.serve.reading
    if reading.serving:
        return switch_set(reading.serving[0].process.env, names)
    problems = worker_switch_problems(reading.ray.env, lead.process.env, names)
    if problems:
        raise RolloutError(f"adopt: {found.node}: {'; '.join(problems)}",
                           "give the switch one value on the worker's Ray node and the head's serve (or leave it unset on the node), "
                           "restart the cluster, then adopt; nothing was changed")
    return ray_worker_switches(reading.ray.env, handed_switches(lead.process.env, names), names)


def adopt_plan(v: NodeView, release: Release) -> NodePlan:
    """Tag the serving image as `current` and record the serve as current and adopted; nothing restarts."""
    return NodePlan(v.name, v.current_id, v.previous_id, release.adopted["image_id"], v.previous_id,
                    records_of(v.records.current, v.records.previous, v.records.adopted), records_of(release, None, release))


def refuse_launcher_ties(found: dict[str, FoundServe]) -> None:
    """A serve still tied to the launcher that started it is not adopted until the operator says it is retired."""
    ties = [tie for serve in found.values() for tie in launcher_ties(serve.node, serve.container, serve.serve.reading)]
    if ties:
        raise RolloutError(f"adopt: the serve is still tied to its launcher: {'; '.join(ties)}",
                           f"retire the launcher ({RUNBOOK}), then run adopt --launcher-retired; nothing was changed")
    for serve in found.values():
        for tie in trap_ties(serve.node, serve.container):
            log.warning("adopt: %s; make sure no run of it is left before the first deploy (%s)", tie, RUNBOOK)


def adopt(fleet: Fleet, reason: str, break_lock: bool, container: str | None = None, launcher_retired: bool = False) -> dict[str, Release]:
    """Record every node's running serve as its current release, through the journal (a kill at any step is finished by
    `adopt --resume` or undone by `adopt --revert`), so that the first deploy keeps it as `previous` and a rollback
    restores it exactly. Every rank must run the same image with the same switch set."""
    check_reason(reason)
    refuse_pending(fleet.deployment)
    found = find_serves(fleet, container)
    if not launcher_retired:
        refuse_launcher_ties(found)
    journal_id = new_journal_id("adopt")
    held = locked(fleet, journal_id, break_lock, {node: serve.container["Image"] for node, serve in found.items()})
    try:
        views = [view(fleet, name) for name in fleet.engines]
        refuse_marks(views)
        known = [f"{v.name} ({v.records.current.id})" for v in views if v.records.current]
        if known:
            raise RolloutError(f"adopt: {', '.join(known)} already {'runs' if len(known) == 1 else 'run'} a kvbake release",
                               "adopt is for a serve kvbake did not deploy; deploy or roll back instead; nothing was changed")
        lead = next(s.serve.reading.serving[0] for s in found.values() if s.serve.reading.serving)
        releases = {node: adopted_release(fleet, serve, reason, lead) for node, serve in found.items()}
        refuse_disagreement(releases)
        writing = fenced(fleet, held)
        releases = with_copies(writing, found, releases, views)
        journal = Journal(journal_id, "adopt", next(iter(releases.values())).id, tuple(adopt_plan(v, releases[v.name]) for v in views))
        run_transition(writing, journal, fleet.deployment.state_dir, held.check)
    finally:
        held.release()
    return releases


def with_copies(fleet: Fleet, found: dict[str, FoundServe], releases: dict[str, Release], views: list[NodeView]) -> dict[str, Release]:
    """Each node's serve with the copy of its writable layer committed (a launcher's mods kept for every way back);
    when one node cannot commit, the copies made so far go again and adopt stops before any other change."""
    copied: dict[str, Release] = {}
    try:
        for node, serve in found.items():
            copy = commit_copy(fleet.engines[node], serve.container)
            copied[node] = replace(releases[node], adopted={**releases[node].adopted, "copy": copy})
    except KvbakeError as err:
        for v in views:
            remove_stray_copies(fleet.engines[v.name], (v.records.current, v.records.previous, v.records.adopted))
        raise RolloutError(f"adopt: the writable layer of {node}'s serve could not be kept ({err.one_line()})",
                           "free disk space on that node (docker commit writes the layer as a local image), then adopt again; "
                           "nothing was changed") from None
    return copied


def refuse_disagreement(releases: dict[str, Release]) -> None:
    """The ranks must run one serve: one image, one switch set, one length; no record may hold a credential."""
    for node, release in releases.items():
        refuse_credentials(json.loads(release_to_json(release)), f"adopt: the release record of {node}")
    if len({r.id for r in releases.values()}) > 1:
        shown = "; ".join(f"{n}: {r.image} with {dict(r.switches) or 'no switches'}, max-model-len {r.max_model_len}" for n, r in releases.items())
        raise RolloutError(f"adopt: the ranks run different serves ({shown})", "adopt needs one image and one switch set on every "
                           "rank; bring the ranks into line first; nothing was changed")


def back_to_adopted_plan(v: NodeView) -> NodePlan:
    """`current` becomes the adopted serve, `previous` what served until now; the adopted record stays."""
    adopted = v.records.adopted
    return NodePlan(v.name, v.current_id, v.previous_id, adopted.adopted["image_id"], v.current_id,
                    records_of(v.records.current, v.records.previous, adopted), records_of(adopted, v.records.current, adopted))


def rollback_to_adopted(fleet: Fleet, break_lock: bool) -> Journal:
    """`rollback --to adopted`: from any release, back to the serve `adopt` recorded, on every rank; a rollback then
    returns to the release that served before."""
    refuse_pending(fleet.deployment)
    journal_id = new_journal_id("rollback")
    held = locked(fleet, journal_id, break_lock, fleet.tag("current"))
    try:
        views = [view(fleet, name) for name in fleet.engines]
        check_views(views)
        refuse_stray_tags(fleet, {v.name: v.records for v in views})
        refuse_other_serves(fleet, {v.name: v.records for v in views})
        adopted_serve.refuse_missing_secrets({v.name: v.records.adopted for v in views})
        without = [v.name for v in views if v.records.adopted is None]
        if without:
            raise RolloutError(f"rollback --to adopted: {', '.join(without)} keeps no adopted serve (none was adopted, or adopt --release "
                               "forgot it)", "roll back to the previous release instead (python build.py rollback); nothing was changed")
        serving = [v.name for v in views if v.records.current and v.records.current.adopted]
        if serving:
            raise RolloutError(f"rollback --to adopted: {', '.join(serving)} already serves the adopted serve", "nothing to do; nothing was changed")
        journal = Journal(journal_id, "rollback", views[0].records.adopted.id, tuple(back_to_adopted_plan(v) for v in views))
        run_transition(fenced(fleet, held), journal, fleet.deployment.state_dir, held.check)
    finally:
        held.release()
    return journal


def release_adoption(fleet: Fleet, break_lock: bool) -> list[str]:
    """`adopt --release`: forget the adopted serve on every node and remove its kept container. Refused while it serves;
    when it is `previous`, that rollback target goes too. Each node's container goes before its record, so a kill in
    between leaves a record that can still recreate the serve from its spec, and a second --release finishes."""
    refuse_pending(fleet.deployment)
    held = locked(fleet, new_journal_id("release"), break_lock, fleet.tag("current"))
    try:
        views = [view(fleet, name) for name in fleet.engines]
        refuse_marks(views)
        serving = [v.name for v in views if v.records.current and v.records.current.adopted]
        if serving:
            raise RolloutError(f"adopt --release: the adopted serve runs now on {', '.join(serving)}",
                               "deploy a kvbake release first (python build.py deploy --preset NAME); nothing was changed")
        kept = [v for v in views if v.records.adopted is not None]
        if not kept:
            raise RolloutError("adopt --release: no node keeps an adopted serve", "nothing to do")
        for v in kept:
            forget_adopted(fenced(fleet, held), v)
    finally:
        held.release()
    return [v.name for v in kept]


def forget_adopted(fleet: Fleet, v: NodeView) -> None:
    engine, adopted = fleet.engines[v.name], v.records.adopted
    adopted_serve.release_kept(engine, adopted, fleet.deployment.launcher.container)
    remove_stray_copies(engine, (v.records.current,))  # its copy too (the adopted serve is never current here)
    drops_previous = v.records.previous is not None and v.records.previous.adopted is not None
    if drops_previous:
        engine.untag(fleet.tag("previous"))
    NodeState(v.name, engine).update(adopted.adopted["image_id"], f"adopt --release: forgot the adopted serve {adopted.id}"
                                     + (" (it was the rollback target)" if drops_previous else ""),
                                     adopted=None, **({"previous": None} if drops_previous else {}))
