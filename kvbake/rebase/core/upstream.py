"""The upstream change a hunk meets: the regions where two versions of a file differ that overlap the hunk's old lines."""

from __future__ import annotations

import difflib
from dataclasses import dataclass


@dataclass(frozen=True)
class UpstreamRegion:
    """One differing region: its old and new line ranges (1-based start, length) and the lines of each side."""

    old_start: int
    old_lines: tuple[str, ...]
    new_start: int
    new_lines: tuple[str, ...]

    def as_diff(self) -> str:
        head = f"@@ -{self.old_start},{len(self.old_lines)} +{self.new_start},{len(self.new_lines)} @@\n"
        return head + "".join(f"-{line}\n" for line in self.old_lines) + "".join(f"+{line}\n" for line in self.new_lines)


@dataclass(frozen=True)
class UpstreamOverlap:
    """The regions that overlap a hunk's old lines, and which of the hunk's old lines (1-based, old numbering) they
    change: the lines that stop the hunk from applying as written."""

    regions: tuple[UpstreamRegion, ...]
    conflicting_lines: tuple[int, ...]

    def as_diff(self) -> str:
        return "".join(region.as_diff() for region in self.regions)


def _lines(text: str) -> list[str]:
    return text.splitlines()


def overlapping_changes(old_text: str, new_text: str, start: int, length: int) -> UpstreamOverlap:
    """The differences between `old_text` and `new_text` that touch old lines start..start+length-1 (1-based), or an
    insertion right inside them."""
    old, new = _lines(old_text), _lines(new_text)
    first, last = start - 1, start - 1 + length  # the hunk's old lines, as a half-open 0-based range
    regions, conflicting = [], set()
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        touches = i1 < last and i2 > first  # for an insertion (i1 == i2): strictly between the hunk's first and last line
        if not touches:
            continue
        regions.append(UpstreamRegion(i1 + 1, tuple(old[i1:i2]), j1 + 1, tuple(new[j1:j2])))
        changed = range(max(i1, first), min(i2, last)) if i2 > i1 else range(i1 - 1, i1 + 1)
        conflicting.update(index + 1 for index in changed)
    return UpstreamOverlap(tuple(regions), tuple(sorted(conflicting)))
