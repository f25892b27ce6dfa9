"""Adapter: move every node from its before state to its after state (retag, records, restart, verify), or back."""

from __future__ import annotations

import logging
import json
import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kvbake.atomicfile import write_atomic
from kvbake.deployfile import Deployment, Node
from kvbake.engine import Engine
from kvbake.errors import DivergedError, KvbakeError, RolloutError
from kvbake.journal import Journal, NodePlan, clear_diverged, clear_journal, journal_to_dict, mark_diverged, write_journal
from kvbake.nodestate import NodeState, who
from kvbake.release import Release, release_from_json, release_to_json
from kvbake.running import agreement_failures, expected_image_id, rank_failures, switch_env

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Fleet:
    """The nodes of a deployment with one engine each, and what a rank must never diverge on."""

    deployment: Deployment
    engines: dict[str, Engine]
    repository: str
    switch_names: tuple[str, ...]
    baked_paths: tuple[str, ...]
    source_root: str = ""

    def node(self, name: str) -> Node:
        return next(n for n in self.deployment.nodes if n.name == name)

    def tag(self, kind: str) -> str:
        return f"{self.repository}:{kind}"

    def expected_id(self, name: str, release: Release) -> tuple[str, str]:
        """The Id this node's store gives the release's image, and its meaning."""
        return expected_image_id(self.engines[name].profile().store, release.config_digest, release.image)


def records_of(current: Release | None, previous: Release | None) -> dict:
    return {"current": json.loads(release_to_json(current)) if current else None,
            "previous": json.loads(release_to_json(previous)) if previous else None}


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


def restart(fleet: Fleet, name: str, release: Release | None) -> None:
    """Run the operator's launcher for one node with the release's switch set; it recreates the serving container.
    With no release (the revert of a first deploy) there is nothing to launch: the serving container is removed."""
    launcher = fleet.deployment.launcher
    if release is None:
        fleet.engines[name].remove_container(launcher.container)
        return
    env_dir = fleet.deployment.state_dir / "env"
    env_dir.mkdir(parents=True, exist_ok=True)
    env_file = env_dir / f"{name}.env"
    write_atomic(env_file, "".join(f"{item}\n" for item in release.env()).encode())
    env = {**os.environ, **launcher_env(fleet, name, release, env_file)}
    try:
        done = subprocess.run(list(launcher.command), env=env, capture_output=True, text=True, timeout=launcher.timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise RolloutError(f"launcher on {name} did not run ({type(err).__name__}: {err})", "check launcher.command in the deployment file") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RolloutError(f"launcher on {name} exited {done.returncode} ({last})", "fix the launcher, then deploy again (every node was reverted)")


def launcher_env(fleet: Fleet, name: str, release: Release, env_file: Path) -> dict[str, str]:
    """What the launcher is told. The arguments come twice, each keeping every argument whole: shell-quoted (for
    `eval set -- "$KVBAKE_LAUNCHER_ARGS"`) and as a JSON array."""
    node = fleet.node(name)
    return {"DOCKER_HOST": node.host, "KVBAKE_NODE": name, "KVBAKE_ROLE": node.role, "KVBAKE_IMAGE": fleet.tag("current"),
            "KVBAKE_CONTAINER": fleet.deployment.launcher.container, "KVBAKE_ENV_FILE": str(env_file),
            "KVBAKE_MAX_MODEL_LEN": str(release.max_model_len), "KVBAKE_LAUNCHER_ARGS": shlex.join(release.launcher_args),
            "KVBAKE_LAUNCHER_ARGS_JSON": json.dumps(list(release.launcher_args))}


def observe(fleet: Fleet, name: str) -> tuple[dict | None, dict | None]:
    engine = fleet.engines[name]
    container = engine.container_inspect(fleet.deployment.launcher.container)
    image = engine.inspect_image(container["Image"]) if container else None
    return container, image


def verify_ranks(fleet: Fleet, releases: dict[str, Release | None]) -> list[str]:
    """Every rank runs its release exactly, and all ranks agree."""
    failures: list[str] = []
    observed = {}
    for name, release in sorted(releases.items()):
        if release is None:
            continue
        container, image = observe(fleet, name)
        failures += rank_failures(name, container, image, release.layers, release.labels, release.switches, fleet.switch_names, fleet.baked_paths,
                                  fleet.expected_id(name, release), fleet.source_root)
        env = switch_env((container or {}).get("Config", {}).get("Env"), fleet.switch_names)
        observed[name] = (tuple((image or {}).get("RootFS", {}).get("Layers", [])), tuple(sorted(env.items())))
    return failures + agreement_failures(observed)


def apply_side(fleet: Fleet, journal: Journal, folder: Path, side: str) -> Journal:
    """Walk every node to one side of the plan ('after' or 'before'), journalling each step first."""
    for plan in journal.nodes:
        current, previous, records = _side(plan, side)
        journal = journal.with_step(f"{side}:retag:{plan.node}")
        write_journal(folder, journal)
        retag(fleet, plan.node, current, previous)
        NodeState(plan.node, fleet.engines[plan.node]).update(
            marker_image(fleet, plan), f"{journal.kind} {journal.id} {side}: current={_short(current)} previous={_short(previous)}",
            current=release_of(records, "current"), previous=release_of(records, "previous"))
    for plan in journal.nodes:
        journal = journal.with_step(f"{side}:restart:{plan.node}")
        write_journal(folder, journal)
        restart(fleet, plan.node, release_of(_side(plan, side)[2], "current"))
    return journal


def marker_image(fleet: Fleet, plan: NodePlan) -> str:
    """An image the node surely holds, to create its state container from."""
    return plan.after_current or plan.before_current or fleet.tag("staged")


def publish(fleet: Fleet, journal: Journal) -> None:
    """Every node keeps the journal while the transition runs, so that any operator host sees it and can finish it."""
    for plan in journal.nodes:
        NodeState(plan.node, fleet.engines[plan.node]).update(marker_image(fleet, plan), f"{journal.kind} {journal.id} begins",
                                                              transition=journal_to_dict(journal))


def settle(fleet: Fleet, journal: Journal, folder: Path, outcome: str) -> None:
    """The transition is over and every rank verified: drop the journal and any diverged mark, nodes first."""
    for plan in journal.nodes:
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


def run_transition(fleet: Fleet, journal: Journal, folder: Path) -> None:
    """Forward; on any failure revert every node; if the revert fails, mark the deployment diverged."""
    try:
        publish(fleet, journal)
        write_journal(folder, journal.with_phase("forward"))
        journal = apply_side(fleet, journal.with_phase("forward"), folder, "after")
        failures = verify_ranks(fleet, {p.node: release_of(p.after_records, "current") for p in journal.nodes})
        if failures:
            raise RolloutError(f"verify-running failed after {journal.kind}: {'; '.join(failures)}", "every node was reverted; see the audit log")
    except KvbakeError as err:
        revert(fleet, journal, folder, cause=err)
        raise
    settle(fleet, journal, folder, "done")


def revert(fleet: Fleet, journal: Journal, folder: Path, cause: KvbakeError | None = None) -> None:
    try:
        journal = apply_side(fleet, journal.with_phase("reverting"), folder, "before")
        failures = verify_ranks(fleet, {p.node: release_of(p.before_records, "current") for p in journal.nodes})
        if failures:
            raise RolloutError(f"after the revert: {'; '.join(failures)}", "see below")
    except KvbakeError as err:
        details = {"journal": journal.id, "kind": journal.kind, "cause": cause.one_line() if cause else None, "revert_error": err.one_line(),
                   "repair": f"python build.py deploy --revert --deploy {fleet.deployment.path.name}", "by": who()}
        mark_diverged(folder, details)
        mark_nodes_diverged(fleet, journal, details)
        raise DivergedError(f"DIVERGED: {journal.kind} {journal.id} failed ({cause.one_line() if cause else 'interrupted'}) and the revert failed too "
                            f"({err.one_line()})", f"bring the nodes back, then run: {details['repair']}") from None
    settle(fleet, journal, folder, "reverted")
