"""A lock claim read from labels (with defaults for a bare lock), the renewal stamp its holder writes, and whether its
holder is known to be gone (judged only on its own machine, in its own boot and PID namespace)."""

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


NS = "pid:[4026531836]"
HERE = HostIdentity("m1", "boot-1", "ops-1", NS)


def judged(claim: LockClaim, starts: dict[int, str], held: bool = False, here: HostIdentity = HERE) -> bool:
    return holder_is_gone(claim, here, 7, held, starts.get)


def test_a_holder_is_judged_only_on_its_own_machine_in_its_own_boot():
    mine = LockClaim("t", "ops@ops-1:42", "m1", "d", 0.0, "boot-1", "ops-1", "500", NS)
    assert judged(mine, {}) is True, "no such process here: gone"
    assert judged(mine, {42: "500"}) is False, "the very process still runs"
    assert judged(mine, {42: "999"}) is True, "another process has its PID now"
    assert judged(replace(mine, started=""), {42: "999"}) is False, "no start recorded"
    for field, value in (("machine", "m2"), ("boot", "boot-2"), ("host", "ops-2"), ("boot", ""), ("host", "")):
        assert judged(replace(mine, **{field: value}), {}) is False, f"{field}={value!r} cannot be judged here"
    assert judged(replace(mine, owner="ops@ops-1"), {}) is False, "no PID"


# A container of this machine shares its boot id (often its machine id and, with --network host, its host name too):
# only the PID namespace tells whether the holder's PID names the same process here.

def test_a_dead_holder_in_this_pid_namespace_is_gone():
    assert judged(LockClaim("t", "ops@ops-1:42", "m1", "d", 0.0, "boot-1", "ops-1", "500", NS), {}) is True


def test_a_holder_in_another_pid_namespace_is_not_judged_by_its_pid():
    theirs = LockClaim("t", "ops@ops-1:42", "m1", "d", 0.0, "boot-1", "ops-1", "500", "pid:[4026532175]")
    assert judged(theirs, {}) is False, "its PID is dead here"
    assert judged(theirs, {42: "999"}) is False, "another process has its PID here"


def test_a_claim_of_an_older_kvbake_naming_no_pid_namespace_is_not_judged_by_its_pid():
    old = claim_from_labels({"kvbake.lock.owner": "ops@ops-1:42", "kvbake.lock.machine": "m1", "kvbake.lock.boot": "boot-1",
                             "kvbake.lock.host": "ops-1", "kvbake.lock.started": "500"})
    assert old.pid == 42 and old.pid_namespace == ""
    assert judged(old, {}) is False


def test_a_holder_is_not_judged_where_this_pid_namespace_cannot_be_read():
    mine = LockClaim("t", "ops@ops-1:42", "m1", "d", 0.0, "boot-1", "ops-1", "500", NS)
    assert judged(mine, {}, here=replace(HERE, pid_namespace="")) is False
    assert judged(replace(mine, pid_namespace=""), {}, here=replace(HERE, pid_namespace="")) is False, "both unknown"


def test_this_very_process_is_gone_once_it_no_longer_holds_the_lock():
    own = LockClaim("t", "ops@ops-1:7", "m1", "d", 0.0, "boot-1", "ops-1", "1", NS)
    assert judged(own, {}, held=True) is False and judged(own, {}, held=False) is True
    assert judged(replace(own, pid_namespace="pid:[4026532175]"), {}, held=False) is False, "PID 7 of another namespace"


def test_a_claims_identity_round_trips_through_its_labels():
    claim = LockClaim("t", "o:1", "m1", "d", 1.5, "boot-1", "ops-1", "500", NS)
    assert claim.labels()["kvbake.lock.pidns"] == NS
    assert claim_from_labels(claim.labels()) == claim


def test_the_start_time_is_field_22_counted_after_the_commands_parenthesis():
    stat = "42 (a (weird) name) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 123456 1000 200"
    assert start_time(stat) == "123456"
    assert start_time("42 (short) S 1") is None
