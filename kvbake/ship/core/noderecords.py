"""The node's state document: current and previous release, a transition in progress and a diverged mark, in two slots."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from kvbake.digests import canonical_json, sha256_hex
from kvbake.errors import RolloutError
from kvbake.ship.core.release import Release, release_from_json, release_to_json

FORMAT = 2
SLOTS = ("state-a.json", "state-b.json")
LEGACY = ("current.json", "previous.json")


@dataclass(frozen=True)
class NodeRecords:
    """Everything a node records about its releases; written whole, so a cleared field is cleared on the node."""

    current: Release | None = None
    previous: Release | None = None
    audit: str = ""
    transition: Mapping[str, Any] | None = None
    diverged: Mapping[str, Any] | None = None
    seq: int = 0
    slot: str | None = None
    # The serve `adopt` recorded: restorable (kept or recreated from its spec) until `adopt --release`, whether or not
    # it is `current` or `previous` now.
    adopted: Release | None = None


def encode(records: NodeRecords, seq: int) -> bytes:
    """One slot's bytes: the fields, their sequence number and a checksum over both."""
    body = {"format": FORMAT, "seq": seq, "current": _release_dict(records.current), "previous": _release_dict(records.previous),
            "transition": records.transition, "diverged": records.diverged, "adopted": _release_dict(records.adopted)}
    return (json.dumps({**body, "sha256": sha256_hex(canonical_json(body))}, indent=1, sort_keys=True) + "\n").encode()


def next_slot(records: NodeRecords) -> str:
    """The slot that does not hold the newest state: a torn write then costs only the older copy."""
    return SLOTS[1] if records.slot == SLOTS[0] else SLOTS[0]


def decode(node: str, files: Mapping[str, bytes], audit: str = "") -> NodeRecords:
    """The newest intact slot; legacy per-record files when no slot exists; a typed error when every copy is corrupt."""
    present = {name: files[name] for name in SLOTS if name in files}
    if not present:
        return _legacy(node, files, audit)
    intact, problems = [], []
    for name, data in sorted(present.items()):
        try:
            intact.append(_slot(name, data, audit))
        except ValueError as err:
            problems.append(f"{name}: {err}")
    if not intact:
        raise RolloutError(f"node {node}: every copy of its state record is corrupt ({'; '.join(problems)})",
                           f"re-create the node's records with: python build.py deploy --preset NAME --reseat {node}")
    return max(intact, key=lambda r: r.seq)


def _slot(name: str, data: bytes, audit: str) -> NodeRecords:
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"not JSON ({err.__class__.__name__})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"not a format-{FORMAT} state record")
    claimed = doc.pop("sha256", None)
    if claimed != sha256_hex(canonical_json(doc)):
        raise ValueError("checksum mismatch (a torn or edited write)")
    if not isinstance(doc.get("seq"), int):
        raise ValueError("no sequence number")
    return NodeRecords(_release(doc.get("current")), _release(doc.get("previous")), audit, _mapping(doc.get("transition")),
                       _mapping(doc.get("diverged")), doc["seq"], name, _release(doc.get("adopted")))


def _legacy(node: str, files: Mapping[str, bytes], audit: str) -> NodeRecords:
    try:
        current, previous = (release_from_json(files[name].decode()) if name in files else None for name in LEGACY)
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as err:
        raise RolloutError(f"node {node}: its release record is corrupt ({err.__class__.__name__})",
                           f"re-create the node's records with: python build.py deploy --preset NAME --reseat {node}") from None
    return NodeRecords(current, previous, audit)


def _release(data: Any) -> Release | None:
    if data is None:
        return None
    try:
        return release_from_json(json.dumps(data))
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"a release entry is malformed ({err.__class__.__name__})") from None


def _release_dict(release: Release | None) -> dict[str, Any] | None:
    return json.loads(release_to_json(release)) if release else None


def _mapping(value: Any) -> Mapping[str, Any] | None:
    if value is not None and not isinstance(value, dict):
        raise ValueError("a transition or diverged entry is not an object")
    return value
