"""Adapter: commit the adopted serve's writable layer as its copy on the node, and remove copies no record names."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from kvbake.engines.adapters.client import Engine
from kvbake.ship.core.adopted_copy import COPY_REPOSITORY, copies_named, copy_record, copy_reference, stray_copies


def commit_copy(engine: Engine, container: Mapping[str, Any]) -> dict[str, str]:
    """`docker commit --pause=false` of the serving container (the serve goes on while its layer is read): the record
    of its copy."""
    reference = copy_reference(str(container["Id"]))
    image_id = engine.commit(str(container["Id"]), reference)
    base = engine.require_image(str(container["Image"]))["RootFS"]["Layers"]
    return copy_record(reference, engine.require_image(image_id), base)


def remove_stray_copies(engine: Engine, records: Iterable[Any]) -> list[str]:
    """Untag every copy on the node that none of these records (its current, previous and adopted releases) names;
    a copy a serve still runs from stays on the node, untagged, until that container goes. The names removed."""
    stray = stray_copies(engine.tags_of_repository(COPY_REPOSITORY), copies_named(records))
    for reference in stray:
        engine.untag(reference, in_use_too=True)
    return stray
