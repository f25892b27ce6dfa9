"""Read `git apply -v --reject` output into one outcome per hunk: applied as stated, moved by an offset, or rejected."""

from __future__ import annotations

import re
from dataclasses import dataclass

CLEAN, OFFSET, REJECTED = "clean", "offset", "rejected"
CHECKING = re.compile(r"^Checking patch (?P<path>.+)\.\.\.$")
APPLYING = re.compile(r"^Applying patch (?P<path>.+) with \d+ rejects?\.\.\.$")
MOVED = re.compile(r"^Hunk #(?P<number>\d+) succeeded at (?P<line>\d+) \(offset (?P<offset>-?\d+) lines?\)\.$")
REFUSED = re.compile(r"^Rejected hunk #(?P<number>\d+)\.$")


@dataclass(frozen=True)
class HunkApplied:
    """How one hunk of one file section applied to the new tree: its status, and for an offset where and by how much."""

    status: str
    offset: int = 0
    line: int | None = None


def read_apply_report(output: str) -> dict[tuple[str, int], HunkApplied]:
    """(path, hunk number) -> outcome, for every hunk git apply named; a hunk it did not name applied as stated."""
    outcomes: dict[tuple[str, int], HunkApplied] = {}
    path = ""
    for line in (raw.strip() for raw in output.splitlines()):
        section = CHECKING.match(line) or APPLYING.match(line)
        if section:
            path = section.group("path")
            continue
        moved = MOVED.match(line)
        if moved:
            outcomes[(path, int(moved.group("number")))] = HunkApplied(OFFSET, int(moved.group("offset")), int(moved.group("line")))
            continue
        refused = REFUSED.match(line)
        if refused:
            outcomes[(path, int(refused.group("number")))] = HunkApplied(REJECTED)
    return outcomes


def outcome_of(outcomes: dict[tuple[str, int], HunkApplied], path: str, number: int) -> HunkApplied:
    return outcomes.get((path, number), HunkApplied(CLEAN))
