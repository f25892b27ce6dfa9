"""Adapter: `deploy --reset-tags`: point every stray `current` or `previous` tag back at what its node's record names."""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvbake.errors import RolloutError
from kvbake.ship.adapters.fleet import Fleet
from kvbake.ship.adapters.node_identity import config_digest_on, repository_of
from kvbake.ship.adapters.nodestate import STATE_NAME, NodeState
from kvbake.ship.adapters.rollout import fenced, locked, new_journal_id, refuse_marks, refuse_pending, view
from kvbake.ship.adapters.stray_tags import stray_tags
from kvbake.ship.core.release import Release
from kvbake.ship.core.tag_agreement import StrayTag, short


@dataclass(frozen=True)
class TagReset:
    """One stray tag and the image its record names (None: the tag goes)."""

    stray: StrayTag
    target: str | None

    def describe(self) -> str:
        where = f"back at {short(self.target)}" if self.target else "removed (no record names one)"
        return f"node {self.stray.node}: tag {self.stray.kind} {where}, was {short(self.stray.points_at)}"


def reset_tags(fleet: Fleet, break_lock: bool) -> list[TagReset]:
    """Under every node's lock and through its fence: the stray tags found on settled nodes, each put back; a second
    run finds none and changes nothing. Every target is found before the first tag moves."""
    refuse_pending(fleet.deployment)
    markers = {name: image for name in fleet.engines if (image := held_image(fleet, name))}
    scope = replace(fleet, engines={name: fleet.engines[name] for name in markers})  # a node holding no image has no tag
    held = locked(scope, new_journal_id("reset-tags"), break_lock, markers)
    try:
        views = [view(scope, name) for name in scope.engines]
        refuse_marks(views)
        resets = [TagReset(stray, reset_target(scope, stray, getattr(v.records, stray.kind)))
                  for v in views for stray in stray_tags(scope, v.name, v.records)]
        apply_resets(fenced(scope, held), resets, markers)
    finally:
        held.release()
    return resets


def held_image(fleet: Fleet, name: str) -> str | None:
    """An image the node surely holds, to create its lock from: its current or previous tag, else its state's image."""
    engine = fleet.engines[name]
    for kind in ("current", "previous"):
        if engine.image_id_of(fleet.tag(kind)):
            return fleet.tag(kind)
    return (engine.container_inspect(STATE_NAME) or {}).get("Image")


def reset_target(fleet: Fleet, stray: StrayTag, release: Release | None) -> str | None:
    """The image ID the record names, as the node holds it; a record whose image the node lost cannot be reset from."""
    if release is None:
        return None
    engine = fleet.engines[stray.node]
    if release.adopted:
        found = engine.image_id_of(str(release.adopted["image_id"]))
    else:  # pulled by digest: the pull reference names it on either store; on the classic store the config digest too
        held = [image for reference in (release.image, release.config_digest) if (image := engine.inspect_image(reference))]
        found = next((image["Id"] for image in held if config_digest_on(engine, image, repository_of(release.image)) == release.config_digest), None)
    if found is None:
        raise RolloutError(f"node {stray.node} no longer holds the image its {stray.kind} record names ({short(stray.record_names or '')})",
                           f"re-create its records with: python build.py deploy --preset NAME --reseat {stray.node}; nothing was changed")
    return found


def apply_resets(fleet: Fleet, resets: list[TagReset], markers: dict[str, str]) -> None:
    """Each tag moved (or removed) and one audit line per node, every write through the node's fence."""
    for reset in resets:
        engine = fleet.engines[reset.stray.node]
        if reset.target:
            engine.tag(reset.target, fleet.tag(reset.stray.kind))
        else:
            engine.untag(fleet.tag(reset.stray.kind), in_use_too=True)  # a stray tag goes even when a container runs its image
    for node in sorted({reset.stray.node for reset in resets}):
        lines = "; ".join(reset.describe() for reset in resets if reset.stray.node == node)
        NodeState(node, fleet.engines[node]).append_audit(markers[node], f"deploy --reset-tags: {lines}")
