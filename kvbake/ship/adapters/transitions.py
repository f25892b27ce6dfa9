"""Adapter: move every node from its before state to its after state (retag, records, restart, verify), or back."""

from __future__ import annotations

import logging
import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from kvbake.atomicfile import write_atomic
from kvbake.deployfile import Deployment
from kvbake.errors import DivergedError, KvbakeError, LockLost, RolloutError
from kvbake.serve.core.runtime_config import ARGS_FILE, ENV_FILE, RankSettings, settings_of_release
from kvbake.ship.adapters import adopted_serve
from kvbake.ship.adapters.adopted_copy import remove_stray_copies
from kvbake.ship.adapters.fleet import Fleet
from kvbake.ship.adapters.node_fence import before_write
from kvbake.ship.adapters.node_locks import who
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.adapters.readiness import wait_until_ready
from kvbake.ship.core.launcher_variables import launcher_variables, node_rank  # noqa: F401 (node_rank is read through this module)
from kvbake.ship.core.journal import (Journal, NodePlan, Scope, clear_diverged, clear_journal, full_scope, mark_diverged, node_copy,
                                      read_journal, recovery_command, undo_scope, write_journal)
from kvbake.ship.core.release import Release, release_from_json, release_to_json
from kvbake.ship.core.running import agreement_failures, switch_env
from kvbake.ship.core.serve_logs import TAIL_LINES, telling_line
from kvbake.serve.core.serve_reading import RAY_WORKER

log = logging.getLogger(__name__)


def records_of(current: Release | None, previous: Release | None, adopted: Release | None = None) -> dict:
    """A side of a node's plan: its current and previous release, and the adopted serve it keeps restorable."""
    return {key: json.loads(release_to_json(release)) if release else None
            for key, release in (("current", current), ("previous", previous), ("adopted", adopted))}


def release_of(records: dict, key: str) -> Release | None:
    data = records.get(key)
    return release_from_json(json.dumps(data)) if data else None


def retag(fleet: Fleet, name: str, current_id: str | None, previous_id: str | None) -> None:
    """Point `current` and `previous` at image IDs; no byte moves."""
    engine = fleet.engines[name]
    for kind, image_id in (("current", current_id), ("previous", previous_id)):
        if image_id:
            engine.tag(image_id, fleet.tag(kind))
        else:
            engine.untag(fleet.tag(kind))


def restart(fleet: Fleet, name: str, release: Release | None, replacing: Release | None = None) -> None:
    """Run the operator's launcher for one node with the release's switch set; it recreates the serving container.
    With no release (the revert of a first deploy) there is nothing to launch: the serving container is removed. An
    adopted serve is never launched: its own container is set aside (stopped, renamed) and later brought back."""
    launcher = fleet.deployment.launcher
    if release is not None and release.adopted:
        bring_back_adopted(fleet, name, release)
        return
    if replacing is not None and replacing.adopted:
        set_adopted_aside(fleet, name, replacing)
    if release is None:
        fleet.engines[name].remove_container(launcher.container)
        return
    launch(fleet, name, release)


def launch(fleet: Fleet, name: str, release: Release) -> None:
    """The operator's launcher for one node and one kvbake release; a new serving container must be running after it."""
    launcher = fleet.deployment.launcher
    settings = settings_of_release(release)
    files = write_rank_files(fleet.deployment.state_dir / "runtime" / name, settings)
    env = {**os.environ, **launcher_env(fleet, name, release, settings, files)}
    replaced = (fleet.engines[name].container_inspect(launcher.container) or {}).get("Id")
    before_write(fleet.engines[name])  # the launcher writes to the node too
    try:
        done = subprocess.run(list(launcher.command), env=env, capture_output=True, text=True, timeout=launcher.timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise RolloutError(f"launcher on {name} did not run ({type(err).__name__}: {err})", "check launcher.command in the deployment file") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RolloutError(f"launcher on {name} exited {done.returncode} ({last})", "fix the launcher, then deploy again (every node was reverted)")
    stopped = not_running(fleet, name, replaced)
    if stopped:
        raise RolloutError(f"launcher on {name} exited 0 but {stopped}",
                           "make the launcher (re)create the serving container $KVBAKE_CONTAINER (docker run -d --name ...); "
                           "every node was reverted")


def not_running(fleet: Fleet, name: str, replaced: str | None = None, container: str | None = None, own_policy: bool = False) -> str | None:
    """Why the node's serving container (the launcher's unless named) is not running (absent, still the container
    `replaced`, exited with its code and last log line, or restarted: a crash of a new release), or None. With
    `own_policy` (the adopted serve brought back, under its own restart policy) a policy restart is no dead rank."""
    engine, container = fleet.engines[name], container or fleet.deployment.launcher.container
    found = engine.container_inspect(container)
    if found is None:
        return f"the serving container {container} does not exist on {name}"
    if replaced is not None and found.get("Id") == replaced:
        return f"the serving container {container} on {name} is still the old one (it was not recreated)"
    state = found.get("State") or {}
    restarted = state.get("Restarting") or found.get("RestartCount")
    if state.get("Running") and not restarted:
        return None
    if own_policy and (state.get("Running") or state.get("Restarting")):
        return None  # the adopted serve's own policy restarts it (an old Ray worker waiting for its head): it comes back
    why = telling_line(engine.container_log_tail(container, TAIL_LINES))
    how = "keeps restarting" if restarted else "is not running"
    return f"the serving container {container} on {name} {how} (exit code {state.get('ExitCode')}: {why})"


def start_group(fleet: Fleet, steps: dict[str, tuple[Release | None, Release | None]]) -> None:
    """Restart the nodes of one start group (each: the release to run, the release it replaces); several at once when
    the group has several nodes. Every failure is named."""
    if len(steps) == 1:
        name, (release, replacing) = next(iter(steps.items()))
        restart(fleet, name, release, replacing)
        return
    failures = []
    with ThreadPoolExecutor(max_workers=len(steps)) as pool:
        futures = {name: pool.submit(restart, fleet, name, release, replacing) for name, (release, replacing) in steps.items()}
        for name, future in futures.items():
            try:
                future.result()
            except KvbakeError as err:
                failures.append(err)
    if failures:
        raise RolloutError("; ".join(err.message for err in failures), failures[0].fix)


def await_readiness(fleet: Fleet, releases: dict[str, Release | None]) -> None:
    """Wait for the deployment's readiness probe once every rank of this side was started; a side that serves
    nothing (the revert of a first deploy) has nothing to wait for."""
    readiness = fleet.deployment.readiness
    if readiness is None or all(release is None for release in releases.values()):
        return

    def dead_rank() -> str | None:
        return next((reason for name, release in releases.items()
                     if release is not None and (reason := not_running(fleet, name, container=fleet.serving_container_name(release),
                                                                       own_policy=bool(release.adopted)))), None)

    def last_words() -> str:
        """What the head's serving container logged last (vLLM's exception, when it failed while starting)."""
        head = next((name for name in releases if fleet.node(name).role == "head" and releases[name] is not None), None)
        if head is None:
            return ""
        log = fleet.engines[head].container_log_tail(fleet.serving_container_name(releases[head]), TAIL_LINES)
        return telling_line(log) if log.strip() else ""

    waited = wait_until_ready(readiness, dead_rank, last_words=last_words)
    log.info("the serve answered %s after %.1f s", readiness.url, waited)


def set_adopted_aside(fleet: Fleet, name: str, adopted: Release) -> None:
    """Stop the adopted serve and keep it under its kept name, never started at boot (nothing to do when it is gone)."""
    adopted_serve.set_aside(fleet.engines[name], name, adopted, fleet.deployment.launcher.container)


def bring_back_adopted(fleet: Fleet, name: str, adopted: Release) -> None:
    """Replace the serving container by the adopted serve exactly as it ran (kept, or recreated from its spec)."""
    adopted_serve.bring_back(fleet.engines[name], name, adopted, fleet.deployment.launcher.container, fleet.deployment.launcher.container)


def write_rank_files(folder: Path, settings: RankSettings) -> dict[str, Path]:
    """ranks.env and launcher.args exactly as `config` writes them for the same preset."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {ENV_FILE: folder / ENV_FILE, ARGS_FILE: folder / ARGS_FILE}
    write_atomic(files[ENV_FILE], settings.env_text().encode())
    write_atomic(files[ARGS_FILE], settings.args_text().encode())
    return files


def launcher_env(fleet: Fleet, name: str, release: Release, settings: RankSettings, files: dict[str, Path]) -> dict[str, str]:
    """What the launcher is told (ship/core/launcher_variables.py)."""
    return launcher_variables(fleet.deployment, fleet.repository, name, release, settings, files)


def verify_ranks(fleet: Fleet, releases: dict[str, Release | None]) -> list[str]:
    """Every rank runs its release exactly, and all ranks agree."""
    failures: list[str] = []
    observed = {}
    for name, release in sorted(releases.items()):
        if release is None:
            continue
        check = fleet.check_rank(name, release)
        failures += check.failures
        observed[name] = check.signature
    return failures + agreement_failures(observed)


def no_guard() -> None:
    """A transition run without node locks (tests of a single step) checks nothing."""


def apply_side(fleet: Fleet, journal: Journal, folder: Path, side: str, guard: Callable[[], None] = no_guard,
               scope: Scope | None = None) -> Journal:
    """Walk the nodes of `scope` (default: every node) to one side of the plan ('after' or 'before'), journalling each
    step first; `guard` proves the node locks are still this host's before every step."""
    scope = scope or full_scope(journal)
    for plan in journal.nodes:
        if plan.node not in scope.retagged:
            continue
        current, previous, records = _side(plan, side)
        journal = journal.with_step(f"{side}:retag:{plan.node}")
        guard()
        write_journal(folder, journal)
        retag(fleet, plan.node, current, previous)
        NodeState(plan.node, fleet.engines[plan.node]).update(
            marker_image(fleet, plan), f"{journal.kind} {journal.id} {side}: current={_short(current)} previous={_short(previous)}",
            **{key: release_of(records, key) for key in ("current", "previous", "adopted") if key in records})
        if journal.kind == "adopt":
            adopted_serve.hand_over_restart_policy(fleet.engines[plan.node], release_of(plan.after_records, "adopted"),
                                                   fleet.deployment.launcher.container, to_kvbake=side == "after")
    releases = {plan.node: release_of(_side(plan, side)[2], "current") for plan in journal.nodes if plan.node in scope.restarted}
    replaced = {plan.node: release_of(_side(plan, "before" if side == "after" else "after")[2], "current") for plan in journal.nodes}
    if journal.kind == "adopt":  # an adoption records what serves; it starts nothing
        return journal
    if releases and is_ray_gang(fleet, [*releases.values(), *replaced.values()]):
        stop_old_gang(fleet, {name: replaced[name] for name in releases})
    for group in fleet.deployment.start_groups():
        members = [name for name in group if name in releases]
        if not members:
            continue
        journal = journal.with_step(f"{side}:restart:{'+'.join(members)}")
        guard()
        write_journal(folder, journal)
        start_group(fleet, {name: (releases[name], replaced[name]) for name in members})
    if releases:
        await_readiness(fleet, releases)
    return journal


def is_ray_gang(fleet: Fleet, releases: list[Release | None]) -> bool:
    """Whether the ranks form a Ray cluster on either side: kvbake's launcher starts the ray shape, or an adopted serve's
    workers are Ray nodes."""
    adopted_ray = any(r is not None and r.adopted and r.adopted.get("shape") == RAY_WORKER for r in releases)
    return adopted_ray or fleet.deployment.launcher.env.get("SHAPE") == "ray"


def stop_old_gang(fleet: Fleet, replaced: dict[str, Release | None]) -> None:
    """A Ray cluster does not survive its head (no GCS fault tolerance): every old Ray node stops before the first new one
    starts, so that no new node joins the old head's cluster and no old node outlives its head."""
    for name, release in replaced.items():
        if release is not None and release.adopted:
            set_adopted_aside(fleet, name, release)
            continue
        container = fleet.engines[name].container_inspect(fleet.deployment.launcher.container)
        if container is not None and (container.get("State") or {}).get("Running"):
            fleet.engines[name].stop(str(container["Id"]))


def marker_image(fleet: Fleet, plan: NodePlan) -> str:
    """An image the node surely holds, to create its state container from."""
    return plan.after_current or plan.before_current or fleet.tag("staged")


def publish(fleet: Fleet, journal: Journal, folder: Path, note: str = "") -> None:
    """Every node keeps the journal while the transition runs, so that any operator host sees it and can finish it.
    When a node cannot take it, nothing has changed yet: the nodes that took it drop it again and the transition stops
    without walking any node back."""
    published = []
    try:
        for plan in journal.nodes:
            NodeState(plan.node, fleet.engines[plan.node]).update(marker_image(fleet, plan), f"{journal.kind} {journal.id} begins{f': {note}' if note else ''}",
                                                                  transition=node_copy(journal))
            published.append(plan)
    except KvbakeError as err:
        kept = unpublish(fleet, journal, published)
        if not kept:
            clear_journal(folder)
        raise RolloutError(f"{journal.kind} {journal.id} could not begin: {err.one_line()}",
                           "nothing was changed on any node" + ("" if not kept else f"; {', '.join(kept)} still keep the journal: "
                                                                "run python build.py deploy --revert once they answer")) from None


def unpublish(fleet: Fleet, journal: Journal, plans: list[NodePlan]) -> list[str]:
    """Drop the journal from the nodes that took it; the names of those that still keep it."""
    kept = []
    for plan in plans:
        try:
            NodeState(plan.node, fleet.engines[plan.node]).update(marker_image(fleet, plan), f"{journal.kind} {journal.id} did not begin",
                                                                  transition=None)
        except KvbakeError:
            kept.append(plan.node)
    return kept


def settle(fleet: Fleet, journal: Journal, folder: Path, outcome: str) -> None:
    """The transition is over and every rank verified: drop the journal and any diverged mark, nodes first. An
    adoption that was undone leaves no copy of its serve's writable layer behind."""
    for plan in journal.nodes:
        if journal.kind == "adopt":
            records = plan.after_records if outcome == "done" else plan.before_records
            remove_stray_copies(fleet.engines[plan.node], [release_of(records, key) for key in ("current", "previous", "adopted")])
        NodeState(plan.node, fleet.engines[plan.node]).update(marker_image(fleet, plan), f"{journal.kind} {journal.id} {outcome}",
                                                              transition=None, diverged=None)
    clear_journal(folder)
    clear_diverged(folder)


def mark_nodes_diverged(fleet: Fleet, journal: Journal, details: dict) -> None:
    """Best effort: a node that cannot be reached now learns of the divergence from the journal it keeps."""
    for plan in journal.nodes:
        try:
            NodeState(plan.node, fleet.engines[plan.node]).update(marker_image(fleet, plan), f"{journal.kind} {journal.id} DIVERGED",
                                                                  diverged=details)
        except KvbakeError as err:
            log.warning("node %s: could not record the divergence (%s)", plan.node, err.one_line())


def _side(plan: NodePlan, side: str) -> tuple[str | None, str | None, dict]:
    if side == "after":
        return plan.after_current, plan.after_previous, plan.after_records
    return plan.before_current, plan.before_previous, plan.before_records


def _short(image_id: str | None) -> str:
    return image_id[7:19] if image_id else "none"


def run_transition(fleet: Fleet, journal: Journal, folder: Path, guard: Callable[[], None] = no_guard, note: str = "") -> None:
    """Forward; on any failure revert every node; if the revert fails, mark the deployment diverged. A host that lost
    its locks stops at once, reverts nothing and drops its own copy of the journal: the host holding them now owns the
    transition, whose journal the nodes keep. `note` goes in the nodes' audit line of its beginning (which key signed
    the release)."""
    try:
        guard()  # before the first write: a host whose locks were broken while it paused writes down nothing
        write_journal(folder, journal.with_phase("forward"))
    except LockLost:
        clear_journal(folder)  # the host holding the lock now owns the transition; the nodes keep its journal
        raise
    except KvbakeError:
        clear_journal(folder)
        raise
    publish(fleet, journal, folder, note)
    try:
        journal = apply_side(fleet, journal.with_phase("forward"), folder, "after", guard)
        failures = verify_ranks(fleet, {p.node: release_of(p.after_records, "current") for p in journal.nodes})
        if failures:
            raise RolloutError(f"verify-running failed after {journal.kind}: {'; '.join(failures)}", "every node was reverted; see the audit log")
    except LockLost:
        clear_journal(folder)  # the host holding the lock now owns the transition; the nodes keep its journal
        raise
    except KvbakeError as err:
        revert(fleet, read_journal(folder) or journal, folder, cause=err, guard=guard)  # the steps journalled so far
        raise
    guard()
    settle(fleet, journal, folder, "done")


def serve_down(fleet: Fleet, name: str, release: Release | None) -> bool:
    """Whether a node that should serve `release` has no running serving container for it."""
    if release is None:
        return False
    container, _ = fleet.observe(name, release)
    return not (container and (container.get("State") or {}).get("Running"))


def gang_scope(fleet: Fleet, journal: Journal, scope: Scope) -> Scope:
    """The scope with every rank restarting when one must: a rank restarted alone can never rejoin its peers."""
    if journal.kind == "adopt":
        return scope
    down = {plan.node for plan in journal.nodes if serve_down(fleet, plan.node, release_of(plan.before_records, "current"))}
    if scope.restarted or down:
        return Scope(scope.retagged, frozenset(plan.node for plan in journal.nodes))
    return scope


def revert(fleet: Fleet, journal: Journal, folder: Path, cause: KvbakeError | None = None, guard: Callable[[], None] = no_guard) -> None:
    """Walk back what the journal says may have run (every node, for the copy the nodes keep), verify those ranks, then
    settle; if that fails, mark the deployment diverged here and on every node it can reach. Tensor-parallel ranks
    restart as a gang: when any rank must restart (its restart was journalled, or its serve is down, say after its node
    rebooted), every rank restarts."""
    scope = undo_scope(journal)
    try:
        scope = gang_scope(fleet, journal, scope)
        journal = apply_side(fleet, journal.with_phase("reverting"), folder, "before", guard, scope)
        touched = scope.retagged | scope.restarted
        failures = verify_ranks(fleet, {p.node: release_of(p.before_records, "current") for p in journal.nodes if p.node in touched})
        if failures:
            raise RolloutError(f"after the revert: {'; '.join(failures)}", "see below")
    except LockLost:
        clear_journal(folder)  # the host holding the lock now owns the transition; the nodes keep its journal
        raise
    except KvbakeError as err:
        details = {"journal": journal.id, "kind": journal.kind, "cause": cause.one_line() if cause else None, "revert_error": err.one_line(),
                   "repair": f"python build.py {recovery_command(journal.kind)} --revert --deploy {fleet.deployment.path.name}", "by": who()}
        mark_diverged(folder, details)
        mark_nodes_diverged(fleet, journal, details)
        raise DivergedError(f"DIVERGED: {journal.kind} {journal.id} failed ({cause.one_line() if cause else 'interrupted'}) and the revert failed too "
                            f"({err.one_line()})", f"bring the nodes back, then run: {details['repair']}") from None
    settle(fleet, journal, folder, "reverted")
