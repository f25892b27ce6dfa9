"""`build.py adopt`: the serve every node runs (kvbake did not deploy it) becomes its current release."""

# The first deploy keeps it as `previous`, and the first rollback brings that very container back.

from __future__ import annotations

import json
import logging
import time

from kvbake.errors import KvbakeError, RolloutError
from kvbake.operate.core.presets import check_reason
from kvbake.secretscan import refuse_credentials
from kvbake.ship.adapters.fleet import Fleet
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.adapters.rollout import locked, new_journal_id, refuse_marks, refuse_pending, view, who_deploys
from kvbake.ship.core.release import Release, release_to_json
from kvbake.ship.core.running import switch_env

log = logging.getLogger(__name__)
ADOPTED_PRESET = "adopted"


def serving_containers(fleet: Fleet) -> dict[str, dict]:
    """Each node's running serving container; a node without one stops `adopt` before any change."""
    name = fleet.deployment.launcher.container
    found = {node: engine.container_inspect(name) for node, engine in fleet.engines.items()}
    missing = [node for node, container in found.items() if not (container and (container.get("State") or {}).get("Running"))]
    if missing:
        raise RolloutError(f"adopt: {', '.join(missing)} {'runs' if len(missing) == 1 else 'run'} no serve (no running container {name})",
                           "adopt records a running serve; start it there first, or deploy a release instead; nothing was changed")
    return found


def adopted_release(fleet: Fleet, node: str, container: dict, reason: str) -> Release:
    """The record of a serve kvbake did not deploy: its image, layers, switch set and max-model-len, and the container
    itself, which rollback brings back."""
    engine = fleet.engines[node]
    image = engine.require_image(container["Image"])
    argv = list((container.get("Config") or {}).get("Cmd") or [])
    length = argv[argv.index("--max-model-len") + 1] if "--max-model-len" in argv[:-1] else "0"
    name = str(container.get("Name", fleet.deployment.launcher.container)).lstrip("/")
    return Release(
        image=(container.get("Config") or {}).get("Image") or container["Image"], config_digest=engine.config_digest_of(image, container["Image"]),
        layers=tuple(image["RootFS"]["Layers"]), labels=dict(image["Config"]["Labels"] or {}), preset=ADOPTED_PRESET,
        switches=switch_env((container.get("Config") or {}).get("Env"), fleet.switch_names),
        max_model_len=int(length) if length.isdigit() else 0, launcher_args=(), deployed_by=who_deploys(),
        deployed_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), reason=reason, override=None,
        adopted={"container_id": container["Id"], "kept_as": f"{name}-kvbake-adopted", "image_id": container["Image"]})


def adopt(fleet: Fleet, reason: str, break_lock: bool) -> dict[str, Release]:
    """Record every node's running serve as its current release, so that the first deploy keeps it as `previous` and
    the first rollback restores it exactly. Every rank must run the same image with the same switch set. Neither the
    reason nor the adopted image's record (its labels, say) may hold anything that looks like a credential."""
    check_reason(reason)
    refuse_pending(fleet.deployment)
    containers = serving_containers(fleet)
    journal_id = new_journal_id("adopt")
    markers = {node: container["Image"] for node, container in containers.items()}
    held = locked(fleet, journal_id, break_lock, markers)
    try:
        views = [view(fleet, name) for name in fleet.engines]
        refuse_marks(views)
        known = [f"{v.name} ({v.records.current.id})" for v in views if v.records.current]
        if known:
            raise RolloutError(f"adopt: {', '.join(known)} already {'runs' if len(known) == 1 else 'run'} a kvbake release",
                               "adopt is for a serve kvbake did not deploy; deploy or roll back instead; nothing was changed")
        releases = {node: adopted_release(fleet, node, containers[node], reason) for node in fleet.engines}
        for node, release in releases.items():
            refuse_credentials(json.loads(release_to_json(release)), f"adopt: the release record of {node}")
        if len({r.id for r in releases.values()}) > 1:
            shown = "; ".join(f"{n}: {r.image} with {dict(r.switches) or 'no switches'}" for n, r in releases.items())
            raise RolloutError(f"adopt: the ranks run different serves ({shown})", "adopt needs one image and one switch set on every "
                               "rank; bring the ranks into line first; nothing was changed")
        record_adopted(fleet, releases, journal_id)
    finally:
        held.release()
    return releases


def record_adopted(fleet: Fleet, releases: dict[str, Release], journal_id: str) -> None:
    """Tag each node's serving image as `current` and write its record; on a failure the nodes written are cleared."""
    written: list[str] = []
    try:
        for node, release in releases.items():
            engine, image = fleet.engines[node], release.adopted["image_id"]
            engine.tag(image, fleet.tag("current"))
            written.append(node)
            NodeState(node, engine).update(image, f"adopt {journal_id}: current={release.id} ({release.image})", current=release)
    except KvbakeError:
        for node in written:
            try:
                fleet.engines[node].untag(fleet.tag("current"))
                NodeState(node, fleet.engines[node]).update(releases[node].adopted["image_id"], f"adopt {journal_id} undone", current=None)
            except KvbakeError as err:
                log.warning("node %s: could not undo the adoption (%s)", node, err.one_line())
        raise
