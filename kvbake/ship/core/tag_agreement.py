"""Whether a node's `current` and `previous` tags point at the images its settled release records name."""

# A host whose lock was broken may still land the one engine call it had begun, such as a `tag`: the tags then point
# elsewhere than the records say, and every later step would build on that image. Only a settled node counts: one that
# keeps a transition or a diverged mark is mid-change, and resume, revert or the repair move its tags anyway.

from __future__ import annotations

from dataclasses import dataclass

from kvbake.ship.core.noderecords import NodeRecords
from kvbake.ship.core.release import Release

TAG_KINDS = ("current", "previous")
RESET_COMMAND = "python build.py deploy --reset-tags"


@dataclass(frozen=True)
class StrayTag:
    """One tag that disagrees with its node's record: the image it points at and the one the record names (None: none)."""

    node: str
    kind: str
    points_at: str
    record_names: str | None

    def describe(self) -> str:
        said = f"its {self.kind} record names {short(self.record_names)}" if self.record_names else f"its records name no {self.kind} release"
        return f"node {self.node}: tag {self.kind} points at {short(self.points_at)}, but {said}"


def short(image: str) -> str:
    return image[:19]


def record_identity(release: Release | None) -> str | None:
    """What a record says its tag points at: the adopted serve's image ID, or a kvbake release's config digest."""
    if release is None:
        return None
    return str(release.adopted["image_id"]) if release.adopted else release.config_digest


def compared_by_image_id(release: Release | None) -> bool:
    """A tag under an adopted record (or under none) is compared by image ID; under a kvbake release by config digest."""
    return release is None or bool(release.adopted)


def keeps_settled_records(records: NodeRecords) -> bool:
    """A node whose records were written at least once and that is not in the middle of a change."""
    return records.slot is not None and not records.transition and not records.diverged


def stray_tag(node: str, kind: str, release: Release | None, tagged_id: str | None, tagged_identity: str | None) -> StrayTag | None:
    """The tag `kind`, when it points elsewhere than `release` says, or exists while no record names one. A missing tag
    is no stray: the transitions refuse a recorded release without its image on their own."""
    if tagged_id is None:
        return None
    expected = record_identity(release)
    if expected is not None and tagged_identity == expected:
        return None
    return StrayTag(node, kind, tagged_id, expected)


def refusal_text(strays: list[StrayTag]) -> str:
    return "; ".join(stray.describe() for stray in strays) + " (a late write of a host whose lock was broken)"
