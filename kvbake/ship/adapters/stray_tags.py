"""Adapter: the `current` and `previous` tags of a node that point elsewhere than its settled records say."""

from __future__ import annotations

from kvbake.errors import RolloutError
from kvbake.ship.adapters.fleet import Fleet
from kvbake.ship.adapters.node_identity import config_digest_on, repository_of
from kvbake.ship.core.noderecords import NodeRecords
from kvbake.ship.core.tag_agreement import (RESET_COMMAND, TAG_KINDS, StrayTag, compared_by_image_id, keeps_settled_records,
                                            refusal_text, stray_tag)


def stray_tags(fleet: Fleet, name: str, records: NodeRecords) -> list[StrayTag]:
    """Each tag of the node that disagrees with its record; none on a node that keeps no records yet (or lost them
    all) or that is in the middle of a change."""
    if not keeps_settled_records(records):
        return []
    engine, found = fleet.engines[name], []
    for kind in TAG_KINDS:
        release = getattr(records, kind)
        image = engine.inspect_image(fleet.tag(kind))
        if image is None:
            continue
        identity = image["Id"] if compared_by_image_id(release) else config_digest_on(engine, image, repository_of(release.image))
        stray = stray_tag(name, kind, release, image["Id"], identity)
        found += [stray] if stray else []
    return found


def refuse_stray_tags(fleet: Fleet, records: dict[str, NodeRecords]) -> None:
    """A transition builds on the tags: one that disagrees with its record stops it before anything changes."""
    strays = [stray for name, kept in records.items() for stray in stray_tags(fleet, name, kept)]
    if strays:
        raise RolloutError(refusal_text(strays), f"point the tags back at the records: {RESET_COMMAND}; nothing was changed")
