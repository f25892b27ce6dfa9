"""Glue for the ship commands: the release from manifest + lock + push record + preset, the fleet, verify-running, status."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from kvbake.bake.core.plan import Plan
from kvbake.errors import IntegrityError, RegistryError
from kvbake.manifest import Manifest
from kvbake.operate.core.presets import ChosenPreset, preset_sha256
from kvbake.ship.adapters.fleet import Fleet
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.adapters.pusher import PUSHES_DIR
from kvbake.ship.adapters.rollout import who_deploys
from kvbake.ship.adapters.transitions import observe
from kvbake.ship.core.journal import read_diverged, read_journal
from kvbake.ship.core.release import Release
from kvbake.ship.core.running import rank_failures, switch_env, agreement_failures



def pushed_reference(manifest: Manifest, plan: Plan) -> str:
    """The `repo@sha256:…` reference recorded by `push` for this plan's tag."""
    path = manifest.root / PUSHES_DIR / f"{plan.tag}.json"
    if not path.exists():
        raise RegistryError(f"{plan.reference} has not been pushed (no push record)", "run python build.py push first")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RegistryError(f"the push record of {plan.tag} ({path.name}) is unreadable or not JSON ({err})",
                            "run python build.py push again to rewrite it") from None
    reference = record.get("pinned") if isinstance(record, dict) else None
    if not isinstance(reference, str) or "@sha256:" not in reference:
        raise RegistryError(f"the push record of {plan.tag} has no digest reference", "run python build.py push again")
    return reference


def make_release(plan: Plan, image: str, chosen: ChosenPreset, reason: str) -> Release:
    preset = chosen.preset
    return Release(
        image=image, config_digest=plan.image_id, layers=(*plan.lock.base.diff_ids, plan.layer.diff_id),
        labels=dict(plan.labels), preset=preset.name, switches=dict(preset.switches), max_model_len=preset.max_model_len,
        launcher_args=preset.launcher_args, deployed_by=who_deploys(),
        deployed_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), reason=reason, override=chosen.override,
        runtime_sha256=preset_sha256(plan.manifest, preset),
    )


@dataclass(frozen=True)
class RankReport:
    node: str
    failures: tuple[str, ...]
    switches: dict[str, str]


def verify_running(fleet: Fleet, expect: dict[str, str] | None) -> list[RankReport]:
    """Every rank against its recorded current release; the switch set is `expect` when given. Raises on any failure."""
    reports, observed = [], {}
    for node in fleet.deployment.nodes:
        release = NodeState(node.name, fleet.engines[node.name]).read().current
        container, image = observe(fleet, node.name)
        if release is not None:
            failures = fleet.rank_failures(node.name, container, image, release, expect)
        else:
            failures = [f"{node.name}: no release recorded"] + rank_failures(
                node.name, container, image, (), {}, expect or {}, fleet.switch_names, fleet.baked_paths, None, fleet.source_root)
        env = switch_env((container or {}).get("Config", {}).get("Env"), fleet.switch_names)
        observed[node.name] = (tuple((image or {}).get("RootFS", {}).get("Layers", [])), tuple(sorted(env.items())))
        reports.append(RankReport(node.name, tuple(failures), env))
    failures = [f for r in reports for f in r.failures] + agreement_failures(observed)
    if failures:
        raise IntegrityError(f"verify-running: {len(failures)} problem(s): {'; '.join(failures)}",
                             "roll back (python build.py rollback) or redeploy; never fix one rank by hand")
    return reports


def status(fleet: Fleet) -> dict[str, Any]:
    """Per node: current and previous release, what runs, the switch set; plus divergence and any pending journal, as
    this host and the nodes keep them. A recorded release whose image the node no longer holds is not shown as current."""
    rows, node_marks, node_journals = [], [], []
    for node in fleet.deployment.nodes:
        engine = fleet.engines[node.name]
        records = NodeState(node.name, engine).read()
        container, image = observe(fleet, node.name)
        env = switch_env((container or {}).get("Config", {}).get("Env"), fleet.switch_names)
        held = bool(records.current and engine.image_id_of(fleet.tag("current")))
        rows.append({
            "node": node.name, "role": node.role,
            "current": _brief(records.current) if held else None, "recorded_current_missing": bool(records.current and not held),
            "previous": _brief(records.previous),
            "running": bool((container or {}).get("State", {}).get("Running")),
            "running_layers": len((image or {}).get("RootFS", {}).get("Layers", [])),
            "running_matches_current": bool(held and image and tuple(image["RootFS"]["Layers"]) == records.current.layers),
            "switches": env,
        })
        node_marks += [dict(records.diverged)] if records.diverged else []
        node_journals += [records.transition.get("id")] if records.transition else []
    currents = {r["current"]["id"] if r["current"] else None for r in rows}
    switch_sets = {tuple(sorted(r["switches"].items())) for r in rows}
    journal = read_journal(fleet.deployment.state_dir)
    pending = journal.id if journal else (node_journals[0] if node_journals else None)
    disagree = len(currents) > 1 or len(switch_sets) > 1 or any(r["recorded_current_missing"] for r in rows)
    return {"nodes": rows, "diverged": disagree or not all(r["running_matches_current"] for r in rows if r["current"]),
            "marked_diverged": read_diverged(fleet.deployment.state_dir) or (node_marks[0] if node_marks else None),
            "pending_journal": pending}


def _brief(release: Release | None) -> dict[str, Any] | None:
    if release is None:
        return None
    return {"id": release.id, "preset": release.preset, "image": release.image, "max_model_len": release.max_model_len,
            "deployed_at": release.deployed_at, "deployed_by": release.deployed_by, "reason": release.reason}


def status_table(data: dict[str, Any]) -> str:
    lines = [f"{'node':<10} {'role':<7} {'current':<30} {'previous':<30} {'running':<8} switches"]
    for row in data["nodes"]:
        cur = f"{row['current']['id']} ({row['current']['preset']})" if row["current"] else "-"
        prev = f"{row['previous']['id']} ({row['previous']['preset']})" if row["previous"] else "-"
        run = ("yes" if row["running"] else "no") + ("" if row["running_matches_current"] or not row["current"] else "!")
        switches = ",".join(f"{k}={v}" for k, v in sorted(row["switches"].items())) or "(none)"
        lines.append(f"{row['node']:<10} {row['role']:<7} {cur:<30} {prev:<30} {run:<8} {switches}")
    if data["diverged"] or data["marked_diverged"]:
        lines.append("DIVERGED: the ranks do not agree" + (f"; repair: {data['marked_diverged']['repair']}" if data["marked_diverged"] else ""))
    if data["pending_journal"]:
        lines.append(f"interrupted: {data['pending_journal']}; run deploy --resume or deploy --revert")
    return "\n".join(lines)
