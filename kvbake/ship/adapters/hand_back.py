"""Adapter: `hand-back`: every node back to the operator's own launcher once it serves the adopted serve again."""

# After `rollback --to adopted` the nodes run the serve kvbake found, under its own names, but kvbake still holds them:
# the serve's restart policy is off (kvbake starts and stops it), the node keeps kvbake's records and audit log in its
# state container, and the release tags name kvbake's images. hand-back gives all of that back, under the nodes' locks:
# on each node the serve's own restart policy, then kvbake's tags, the serve's copies and containers removed, its
# audit log copied to this host first, the state container last (while it is there, a second run knows the node is
# kvbake's and finishes). The serve itself is never stopped. The write fence (an empty container that never runs)
# stays: a host paused before hand-back, whose lock was broken meanwhile, must never find its generation again when
# kvbake comes back.

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kvbake.atomicfile import write_atomic
from kvbake.engines.adapters.client import Engine
from kvbake.errors import EngineError, RolloutError
from kvbake.ship.adapters import adopted_serve
from kvbake.ship.adapters.adopted_copy import remove_stray_copies
from kvbake.ship.adapters.fleet import Fleet
from kvbake.ship.adapters.nodestate import STATE_NAME, NodeState
from kvbake.ship.adapters.rollout import NodeView, fenced, locked, new_journal_id, refuse_marks, refuse_pending, view
from kvbake.ship.core.adopted_copy import COPY_REPOSITORY
from kvbake.ship.core.fencing import FENCE_IMAGE

HOME_DIR = Path(".kvbake") / "home"
TAG_KINDS = ("current", "previous", "staged")


@dataclass(frozen=True)
class HandedBack:
    """One node given back: the serve that runs there, where its audit log is now, and what kvbake removed."""

    node: str
    serve: str | None
    audit: Path | None
    removed: tuple[str, ...]


def traces_of(fleet: Fleet, name: str) -> list[str]:
    """What of kvbake's a node holds that hand-back removes: its state container, the release tags and the adopted
    serve's copies."""
    engine = fleet.engines[name]
    found = [STATE_NAME] if engine.container_inspect(STATE_NAME) is not None else []
    return (found + [fleet.tag(kind) for kind in TAG_KINDS if engine.image_id_of(fleet.tag(kind)) is not None]
            + engine.tags_of_repository(COPY_REPOSITORY))


def refuse_kvbake_serving(views: list[NodeView]) -> None:
    """A node that serves one of kvbake's releases is not handed back: its launcher would find kvbake's serve."""
    serving = [f"{v.name} ({v.records.current.preset}, release {v.records.current.id})" for v in views
               if v.records.current is not None and not v.records.current.adopted]
    if serving:
        raise RolloutError(f"hand-back: {', '.join(serving)} {'serves' if len(serving) == 1 else 'serve'} a kvbake release, "
                           "not the serve adopt recorded", "run python build.py rollback --to adopted first, then hand-back; "
                           "nothing was changed")


def adopted_serves(fleet: Fleet, views: list[NodeView]) -> dict[str, dict]:
    """Every node's adopted serve, running: the container each hands back (a node without one has none to give)."""
    serves, stopped = {}, []
    for v in views:
        adopted = v.records.current
        if adopted is None:
            continue
        found = adopted_serve.find(fleet.engines[v.name], adopted, fleet.deployment.launcher.container)
        if found is None or not (found.get("State") or {}).get("Running"):
            stopped.append(f"{v.name} ({adopted_serve.serve_name(adopted, fleet.deployment.launcher.container)})")
        else:
            serves[v.name] = found
    if stopped:
        raise RolloutError(f"hand-back: the adopted serve does not run on {', '.join(stopped)}",
                           "run python build.py rollback --to adopted (it brings it back), then hand-back; nothing was changed")
    return serves


def save_audit(folder: Path, node: str, audit: str) -> Path | None:
    """The node's audit log, written on this host before its state container goes (None when it has none)."""
    if not audit:
        return None
    path = folder / HOME_DIR / f"{node}.audit.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, audit.encode("utf-8"))
    return path


def untag(engine: Engine, reference: str) -> bool:
    """Remove one release tag; False when the engine keeps it (the serve runs an image no other name holds)."""
    if engine.image_id_of(reference) is None:
        return False
    try:
        engine.untag(reference)
    except EngineError:
        return False
    return True


def hand_back_node(fleet: Fleet, v: NodeView, serve: dict | None, folder: Path) -> HandedBack:
    """One node, in an order a second run finishes: restart policy, tags, kvbake's containers, audit log, state."""
    engine = fleet.engines[v.name]
    removed: list[str] = []
    if serve is not None:
        adopted_serve.restore_restart_policy(engine, serve, v.records.current.adopted)
    removed += [reference for reference in (fleet.tag(kind) for kind in TAG_KINDS) if untag(engine, reference)]
    removed += remove_stray_copies(engine, ())  # the serve may run its copy: the image then stays, untagged, until it goes
    kept = v.records.adopted.kept_as if v.records.adopted else None  # a copy set aside under kvbake's own name
    found = engine.container_inspect(kept) if kept else None
    if found is not None and (serve is None or found.get("Id") != serve.get("Id")):
        engine.remove_container(kept)
        removed.append(kept)
    audit = save_audit(folder, v.name, v.records.audit)
    engine.remove_container(STATE_NAME)
    removed.append(STATE_NAME)
    name = str(serve.get("Name", "")).lstrip("/") if serve is not None else None
    return HandedBack(v.name, name, audit, tuple(removed))


def hand_back(fleet: Fleet, break_lock: bool) -> list[HandedBack]:
    """Give every node back to the operator's launcher (see the module comment); nodes with nothing of kvbake's are
    left alone, so a second run changes nothing."""
    refuse_pending(fleet.deployment)
    holding = [name for name in fleet.engines if traces_of(fleet, name)]
    if not holding:
        return []
    for name in fleet.engines:
        fleet.engines[name].ensure_empty_image(FENCE_IMAGE)  # the lock's marker: kvbake's own empty image, no serve's
    held = locked(fleet, new_journal_id("hand-back"), break_lock, FENCE_IMAGE)
    try:
        views = [view(fleet, name) for name in fleet.engines]
        refuse_marks(views)
        refuse_kvbake_serving(views)
        serves = adopted_serves(fleet, views)
        writing = fenced(fleet, held)
        return [hand_back_node(writing, v, serves.get(v.name), fleet.deployment.path.parent) for v in views if v.name in holding]
    finally:
        held.release()
