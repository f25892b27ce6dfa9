"""The write-ahead journal of a deploy or rollback, and the diverged marker; both live in the deployment's state folder."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from kvbake.atomicfile import write_atomic

JOURNAL = "journal.json"
DIVERGED = "DIVERGED.json"


@dataclass(frozen=True)
class NodePlan:
    """One node's before and after: image IDs for `current`/`previous` and the release records that go with them."""

    node: str
    before_current: str | None
    before_previous: str | None
    after_current: str
    after_previous: str | None
    before_records: dict[str, Any]
    after_records: dict[str, Any]


@dataclass(frozen=True)
class Journal:
    """What a transition intends, and how far it got; written before every step."""

    id: str
    kind: str
    release_id: str
    nodes: tuple[NodePlan, ...]
    done: tuple[str, ...] = field(default=())
    phase: str = "planned"

    def with_step(self, step: str) -> "Journal":
        return replace(self, done=(*self.done, step))

    def with_phase(self, phase: str) -> "Journal":
        return replace(self, phase=phase)


def write_journal(folder: Path, journal: Journal) -> None:
    write_atomic(folder / JOURNAL, (json.dumps(asdict(journal), indent=1, sort_keys=True) + "\n").encode())


def read_journal(folder: Path) -> Journal | None:
    path = folder / JOURNAL
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    data["nodes"] = tuple(NodePlan(**n) for n in data["nodes"])
    data["done"] = tuple(data["done"])
    return Journal(**data)


def clear_journal(folder: Path) -> None:
    (folder / JOURNAL).unlink(missing_ok=True)


def mark_diverged(folder: Path, details: dict[str, Any]) -> None:
    write_atomic(folder / DIVERGED, (json.dumps(details, indent=1, sort_keys=True) + "\n").encode())


def read_diverged(folder: Path) -> dict[str, Any] | None:
    path = folder / DIVERGED
    return json.loads(path.read_text()) if path.exists() else None


def clear_diverged(folder: Path) -> None:
    (folder / DIVERGED).unlink(missing_ok=True)
