"""verify-running and status: what every rank runs, against the release records its node keeps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvbake.errors import IntegrityError
from kvbake.ship.adapters.fleet import Fleet
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.adapters.other_serves import other_serves
from kvbake.ship.adapters.stray_tags import stray_tags
from kvbake.ship.core.journal import read_diverged, read_journal
from kvbake.ship.core.release import Release
from kvbake.ship.core.running import agreement_failures, rank_failures, switch_env
from kvbake.ship.core.tag_agreement import RESET_COMMAND


@dataclass(frozen=True)
class RankReport:
    node: str
    failures: tuple[str, ...]
    switches: dict[str, str]


def verify_running(fleet: Fleet, expect: dict[str, str] | None) -> list[RankReport]:
    """Every rank against its recorded current release; the switch set is `expect` when given. Raises on any failure."""
    reports, observed, failures = [], {}, []
    for node in fleet.deployment.nodes:
        release = NodeState(node.name, fleet.engines[node.name]).read().current
        if release is None:  # always a failure: the rank has no switch set to report
            container, image = fleet.observe(node.name)
            failures += [f"{node.name}: no release recorded"] + rank_failures(
                node.name, container, image, (), {}, fleet.baked_paths, None, fleet.source_root)
            continue
        check = fleet.check_rank(node.name, release, expect)
        failures += check.failures
        observed[node.name] = check.signature
        reports.append(RankReport(node.name, tuple(check.failures), check.switches))
    failures += agreement_failures(observed)
    failures += [stray.describe() for node in fleet.deployment.nodes
                 for stray in stray_tags(fleet, node.name, NodeState(node.name, fleet.engines[node.name]).read())]
    failures += [f"{node.name}: a second vLLM serve runs in {name} (neither kvbake's nor the adopted one)"
                 for node in fleet.deployment.nodes for name in other_serves(fleet, node.name, NodeState(node.name, fleet.engines[node.name]).read())]
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
        container, image = fleet.observe(node.name, records.current)
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
            "stray_tags": [stray.describe() for stray in stray_tags(fleet, node.name, records)],
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
            "pending_journal": pending, "stray_tags": [line for r in rows for line in r["stray_tags"]]}


def _brief(release: Release | None) -> dict[str, Any] | None:
    if release is None:
        return None
    return {"id": release.id, "preset": release.preset, "image": release.image, "max_model_len": release.max_model_len,
            "deployed_at": release.deployed_at, "deployed_by": release.deployed_by, "reason": release.reason,
            "signed_by": dict(release.signed_by) if release.signed_by else None}


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
    for line in data["stray_tags"]:
        lines.append(f"STRAY TAG: {line}; reset it from the records: {RESET_COMMAND}")
    if data["pending_journal"]:
        lines.append(f"interrupted: {data['pending_journal']}; run deploy --resume or deploy --revert")
    return "\n".join(lines)
