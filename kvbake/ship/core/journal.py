"""The write-ahead journal of a deploy or rollback, and the diverged marker; both live in the deployment's state folder."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from kvbake.atomicfile import write_atomic
from kvbake.errors import DivergedError, RolloutError
from kvbake.secretscan import withhold_credentials
from kvbake.ship.core.withheld_records import SCRUBBED, withhold_journal_data

log = logging.getLogger(__name__)

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


@dataclass(frozen=True)
class Scope:
    """The nodes one walk retags and restarts."""

    retagged: frozenset[str]
    restarted: frozenset[str]


def full_scope(journal: Journal) -> Scope:
    names = frozenset(plan.node for plan in journal.nodes)
    return Scope(names, names)


def undo_scope(journal: Journal) -> Scope:
    """What a revert must walk back: the nodes whose forward steps were journalled (each step is written before it
    runs, so a journalled step may have run; one never journalled did not). The copy the nodes keep was written before
    any step and says nothing of progress: then every node is walked back."""
    if journal.phase == "planned":
        return full_scope(journal)
    retagged, restarted = set(), set()
    for step in journal.done:
        side, _, rest = step.partition(":")
        kind, _, names = rest.partition(":")
        if side != "after":
            continue
        (retagged if kind == "retag" else restarted).update(names.split("+"))
    return Scope(frozenset(retagged), frozenset(restarted))


def from_node_copy(journal: Journal) -> Journal:
    """The copy the nodes keep, as a recovery starts from it: written before any step, it says nothing of progress, so
    every forward step is journalled as one that may have run. A resume or revert interrupted in turn then leaves a
    journal whose revert still walks back every node, not only those its own steps reached."""
    if journal.phase != "planned":
        return journal
    steps = tuple(f"after:{kind}:{plan.node}" for plan in journal.nodes for kind in ("retag", "restart"))
    return replace(journal, done=(*journal.done, *steps), phase="forward")


def node_copy(journal: Journal) -> dict[str, Any]:
    """What every node keeps while a transition runs: its plan, as before any step (a resume republishes a journal that
    has progress of its own, which the nodes would otherwise take as all that may have run)."""
    return journal_to_dict(replace(journal, done=(), phase="planned"))


def write_journal(folder: Path, journal: Journal) -> None:
    """The journal copies the release records the nodes keep: a string in them that looks like a credential (a reason an
    earlier kvbake recorded, say) is written as a note of what was withheld, so that no journal write can stop a
    transition or its revert. What a deploy adds is refused before it starts (rollout.deploy). An adopted serve's secrets
    are written by name only: a value an older kvbake wrote into this journal in clear goes, and the command says so."""
    in_clear = journal_in_clear(folder / JOURNAL)
    data = withhold_credentials(withhold_journal_data(journal_to_dict(journal)))
    write_atomic(folder / JOURNAL, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())
    if in_clear:
        log.warning(SCRUBBED.format(what="the journal", where="this host"))


def journal_in_clear(path: Path) -> bool:
    """Whether the journal file holds an adopted serve's secret value in clear (an older kvbake wrote it)."""
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and withhold_journal_data(data) != data


def journal_to_dict(journal: Journal) -> dict[str, Any]:
    return asdict(journal)


def journal_from_dict(data: Any) -> Journal:
    """A journal from its JSON form; ValueError names what is wrong."""
    try:
        fields = dict(data)
        fields["nodes"] = tuple(NodePlan(**n) for n in fields["nodes"])
        fields["done"] = tuple(fields.get("done", ()))
        journal = Journal(**fields)
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"not a journal ({err.__class__.__name__}: {err})") from None
    if not isinstance(journal.id, str) or not journal.nodes:
        raise ValueError("not a journal (no id or no nodes)")
    return journal


def read_journal(folder: Path) -> Journal | None:
    path = folder / JOURNAL
    if not path.exists():
        return None
    try:
        return journal_from_dict(json.loads(path.read_bytes().decode("utf-8")))
    except (UnicodeDecodeError, ValueError) as err:
        raise RolloutError(f"the deploy journal {path} is corrupt ({err})",
                           "move it aside; python build.py deploy --revert (or --resume) then reads the copy every node keeps") from None


def clear_journal(folder: Path) -> None:
    (folder / JOURNAL).unlink(missing_ok=True)


def mark_diverged(folder: Path, details: dict[str, Any]) -> None:
    """The mark is never lost: a string that looks like a credential (a launcher's last line in the cause, say) is
    written as a note of what was withheld, as in every journal."""
    write_atomic(folder / DIVERGED, (json.dumps(withhold_credentials(details), indent=1, sort_keys=True) + "\n").encode())


def read_diverged(folder: Path) -> dict[str, Any] | None:
    path = folder / DIVERGED
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        data = None
        reason = err.__class__.__name__
    else:
        reason = "not an object"
    if not isinstance(data, dict):
        raise DivergedError(f"the diverged marker {path} is corrupt ({reason}); the deployment was marked diverged",
                            "move it aside and run python build.py deploy --revert (the nodes keep the journal and their own mark)")
    return data


def clear_diverged(folder: Path) -> None:
    (folder / DIVERGED).unlink(missing_ok=True)


def recovery_command(kind: str) -> str:
    """The command whose --resume and --revert finish or undo a transition of this kind."""
    return "adopt" if kind == "adopt" else "deploy"
