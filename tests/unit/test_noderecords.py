"""The node's state document: written whole in two slots, the newest intact one wins, damage is a typed error."""

from __future__ import annotations

import pytest

from kvbake.errors import RolloutError
from kvbake.ship.core.noderecords import SLOTS, NodeRecords, decode, encode, next_slot
from kvbake.ship.core.release import Release, release_to_json


def release(preset: str) -> Release:
    return Release(image=f"reg/x@sha256:{'1' * 64}", config_digest="sha256:" + "2" * 64, layers=("sha256:a",), labels={"k": "v"},
                   preset=preset, switches={"S": "1"} if preset != "control" else {}, max_model_len=4096, launcher_args=("--x", "a b"),
                   deployed_by="ops", deployed_at="2026-12-01T00:00:00Z", reason="r", override=None)


def test_a_cleared_field_reads_back_as_none():
    full = NodeRecords(current=release("packing"), previous=release("control"), transition={"id": "deploy-1"})
    cleared = NodeRecords(current=release("control"), previous=None, transition=None)
    files = {SLOTS[0]: encode(full, 1), SLOTS[1]: encode(cleared, 2)}
    got = decode("a", files)
    assert got.current.preset == "control" and got.previous is None and got.transition is None and got.seq == 2 and got.slot == SLOTS[1]


def test_the_next_write_goes_to_the_other_slot():
    assert next_slot(NodeRecords()) == SLOTS[0]
    assert next_slot(NodeRecords(slot=SLOTS[0])) == SLOTS[1]
    assert next_slot(NodeRecords(slot=SLOTS[1])) == SLOTS[0]


@pytest.mark.parametrize("damage", [b"", b"{", b"\xff\xfe", b"[]", b'{"format": 2}'])
def test_a_torn_newest_slot_falls_back_to_the_older_copy(damage):
    older = encode(NodeRecords(current=release("control")), 4)
    got = decode("a", {SLOTS[0]: older, SLOTS[1]: damage})
    assert got.current.preset == "control" and got.seq == 4


def test_an_edited_slot_fails_its_checksum():
    good = encode(NodeRecords(current=release("control")), 1)
    edited = good.replace(b'"control"', b'"packing"')
    with pytest.raises(RolloutError, match=r"node a: every copy of its state record is corrupt \(state-a.json: checksum mismatch"):
        decode("a", {SLOTS[0]: edited})


def test_every_copy_damaged_names_the_node_and_the_reseat_fix():
    with pytest.raises(RolloutError) as caught:
        decode("spark-b", {SLOTS[0]: b"garbage", SLOTS[1]: b"\x00"})
    assert caught.value.exit_code == 12
    assert "state-a.json: not JSON" in caught.value.message and "state-b.json: not JSON" in caught.value.message
    assert caught.value.fix.endswith("--reseat spark-b")


def test_a_malformed_release_entry_is_damage_not_a_traceback():
    doc = encode(NodeRecords(current=release("control")), 1).replace(b'"preset"', b'"preset_"')
    with pytest.raises(RolloutError, match="every copy of its state record is corrupt"):
        decode("a", {SLOTS[0]: doc})


def test_legacy_records_are_read_and_damaged_legacy_is_typed():
    legacy = {"current.json": release_to_json(release("control")).encode()}
    assert decode("a", legacy).current.preset == "control" and decode("a", legacy).previous is None
    with pytest.raises(RolloutError, match="node a: its release record is corrupt"):
        decode("a", {"current.json": b"{"})


def test_no_files_is_an_empty_node():
    assert decode("a", {}) == NodeRecords()
