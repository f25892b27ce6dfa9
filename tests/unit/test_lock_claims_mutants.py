"""A lock claim read from labels (with defaults for a bare lock) and the renewal stamp its holder writes."""

from __future__ import annotations

import json

from kvbake.ship.core.lock_claims import LockClaim, claim_from_labels, renewal_bytes, renewed_at


def test_a_renewal_keeps_the_node_time_to_the_millisecond():
    stamp = json.loads(renewal_bytes("mine", 150.4567))
    assert stamp["at"] == 150.457
    assert renewed_at(LockClaim("mine", "o", "m", "d", 100.0), renewal_bytes("mine", 150.4567)) == 150.457


def test_a_renewal_writes_its_fields_in_sorted_order_on_one_line():
    data = renewal_bytes("mine", 12.5)
    assert list(json.loads(data)) == ["at", "token"]
    assert data.endswith(b"}\n") and data.count(b"\n") == 1


def test_a_lock_without_labels_is_claimed_by_an_unknown_owner_since_the_epoch():
    assert claim_from_labels(None) == LockClaim("", "unknown", "", "", 0.0)
    assert claim_from_labels({}) == LockClaim("", "unknown", "", "", 0.0)


def test_an_unreadable_lock_time_counts_as_the_epoch():
    claim = claim_from_labels({"kvbake.lock.owner": "ops@h:1", "kvbake.lock.since": "yesterday"})
    assert claim.since == 0.0 and isinstance(claim.since, float)
