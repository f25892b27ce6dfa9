"""A lock claim read from labels (with defaults for a bare lock), the renewal stamp its holder writes, and whether its
holder is known to be gone (judged only on its own machine, in its own boot)."""

from __future__ import annotations

import json
from dataclasses import replace

from kvbake.ship.core.lock_claims import HostIdentity, LockClaim, claim_from_labels, holder_is_gone, renewal_bytes, renewed_at, start_time


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


HERE = HostIdentity("m1", "boot-1", "ops-1")


def judged(claim: LockClaim, starts: dict[int, str], held: bool = False) -> bool:
    return holder_is_gone(claim, HERE, 7, held, starts.get)


def test_a_holder_is_judged_only_on_its_own_machine_in_its_own_boot():
    mine = LockClaim("t", "ops@ops-1:42", "m1", "d", 0.0, "boot-1", "ops-1", "500")
    assert judged(mine, {}) is True, "no such process here: gone"
    assert judged(mine, {42: "500"}) is False, "the very process still runs"
    assert judged(mine, {42: "999"}) is True, "another process has its PID now"
    assert judged(LockClaim("t", "ops@ops-1:42", "m1", "d", 0.0, "boot-1", "ops-1", ""), {42: "999"}) is False, "no start recorded"
    for field, value in (("machine", "m2"), ("boot", "boot-2"), ("host", "ops-2"), ("boot", ""), ("host", "")):
        assert judged(replace(mine, **{field: value}), {}) is False, f"{field}={value!r} cannot be judged here"
    assert judged(LockClaim("t", "ops@ops-1", "m1", "d", 0.0, "boot-1", "ops-1"), {}) is False, "no PID"


def test_this_very_process_is_gone_once_it_no_longer_holds_the_lock():
    own = LockClaim("t", "ops@ops-1:7", "m1", "d", 0.0, "boot-1", "ops-1", "1")
    assert judged(own, {}, held=True) is False and judged(own, {}, held=False) is True


def test_a_claims_identity_round_trips_through_its_labels():
    claim = LockClaim("t", "o:1", "m1", "d", 1.5, "boot-1", "ops-1", "500")
    assert claim_from_labels(claim.labels()) == claim


def test_the_start_time_is_field_22_counted_after_the_commands_parenthesis():
    stat = "42 (a (weird) name) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 123456 1000 200"
    assert start_time(stat) == "123456"
    assert start_time("42 (short) S 1") is None
