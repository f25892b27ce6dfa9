"""Property tests of the lock reader: whatever the document or the bytes, a Lock or a one-line LockError, nothing else."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kvbake.errors import LockError
from kvbake.lock import Lock, lock_bytes, lock_from_dict
from kvbake.json_fields import parse_document
from tests.unit.test_lock import full_lock

VALID = lock_bytes(full_lock())
SCALARS = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=8)
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                    max_leaves=8)
KEYS = st.sampled_from(["format", "base", "files", "path", "mode", "derived", "change", "config", "x"]) | st.text(max_size=6)


def value_or_lock_error(read, *args: Any) -> Lock | None:
    """Run a reader; a LockError must be exit code 4 and one line. Any other exception fails the property."""
    try:
        lock = read(*args)
    except LockError as err:
        assert err.exit_code == 4
        assert "\n" not in err.one_line() and err.one_line().strip()
        return None
    assert isinstance(lock, Lock)
    return lock


def places(document: Any) -> list[tuple[Any, Any]]:
    """Every (container, key or index) inside a JSON document, the root's children first."""
    found, pending = [], [document]
    while pending:
        item = pending.pop(0)
        pairs = item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else ()
        for key, child in pairs:
            found.append((item, key))
            pending.append(child)
    return found


@st.composite
def mutated_locks(draw: st.DrawFn) -> Any:
    """A valid lock document with one to three random edits: a value replaced, a key or item removed, a key added."""
    document = json.loads(VALID)
    for _ in range(draw(st.integers(1, 3))):
        container, key = draw(st.sampled_from(places(document)))
        action = draw(st.sampled_from(["replace", "remove", "add"]))
        if action == "replace":
            container[key] = draw(JSON)
        elif action == "remove":
            del container[key]
        elif isinstance(container, dict):
            container[draw(KEYS)] = draw(JSON)
        else:
            container.append(draw(JSON))
        if not places(document):
            break
    return document


@settings(max_examples=150, deadline=None)
@given(JSON)
def test_any_json_document_is_a_lock_or_a_lock_error(document: Any) -> None:
    value_or_lock_error(lock_from_dict, document, "manifest.lock.json")


@settings(max_examples=150, deadline=None)
@given(mutated_locks())
def test_a_mutated_lock_is_a_lock_or_a_lock_error_and_a_lock_writes_back_the_same(document: Any) -> None:
    lock = value_or_lock_error(lock_from_dict, document, "manifest.lock.json")
    if lock is not None:
        assert lock_from_dict(json.loads(lock_bytes(lock))) == lock


def from_bytes(data: bytes) -> Lock:
    """What load_lock_file does with a file's bytes."""
    return lock_from_dict(parse_document("manifest.lock.json", data), "manifest.lock.json")


@settings(max_examples=150, deadline=None)
@given(cut=st.integers(0, len(VALID)), splice=st.binary(max_size=8), at=st.integers(0, len(VALID)))
def test_a_truncated_or_spliced_lock_file_is_a_lock_or_a_lock_error(cut: int, splice: bytes, at: int) -> None:
    data = VALID[:cut] if at >= cut else VALID[:at] + splice + VALID[at:cut]
    lock = value_or_lock_error(from_bytes, data)
    if data == VALID:
        assert lock == full_lock()


@settings(max_examples=150, deadline=None)
@given(data=st.binary(max_size=64))
def test_random_bytes_are_a_lock_error(data: bytes) -> None:
    assert value_or_lock_error(from_bytes, data) is None
