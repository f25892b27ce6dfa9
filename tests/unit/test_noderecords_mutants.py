"""Legacy per-record files: both records and the audit log come back, and damage names the node's reseat fix."""

from __future__ import annotations

import pytest

from kvbake.errors import RolloutError
from kvbake.ship.core.noderecords import decode
from kvbake.ship.core.release import release_to_json

from message_words import says
from test_noderecords import release


def test_legacy_records_bring_back_current_previous_and_the_audit_log():
    files = {"current.json": release_to_json(release("packing")).encode(), "previous.json": release_to_json(release("control")).encode()}
    got = decode("a", files, audit="line one\n")
    assert (got.current.preset, got.previous.preset, got.audit) == ("packing", "control", "line one\n")


def test_a_damaged_legacy_record_tells_how_to_reseat_the_node():
    with pytest.raises(RolloutError) as caught:
        decode("spark-b", {"previous.json": b"\xff"})
    assert says(caught.value.fix, "--reseat spark-b")
