"""A lock's holder is judged gone only when its claim names all of machine id, boot id, host name and PID namespace: on a
host that cannot read its own ids either, a claim missing any of them is never judged from here. A process's start time is
the twentieth field after its command, read only when the stat line holds it."""

from __future__ import annotations

import pytest

from kvbake.ship.core.lock_claims import HostIdentity, LockClaim, holder_is_gone, start_time


@pytest.mark.parametrize(("machine", "boot", "host"), [("", "", "ops-1"), ("m1", "", ""), ("", "b1", ""), ("m1", "b1", "")],
                         ids=["host-only", "machine-only", "boot-only", "no-host"])
def test_a_claim_missing_an_id_is_not_judged_even_where_the_same_ids_are_missing(machine, boot, host):
    here = HostIdentity(machine, boot, host)
    claim = LockClaim("t", "ops@ops-1:4242", machine, "deploy", 1.0, boot, host, "100")
    assert holder_is_gone(claim, here, 7, False, lambda pid: None) is False


def test_a_claim_naming_all_four_ids_of_this_host_is_judged_by_its_process():
    here = HostIdentity("m1", "b1", "ops-1", "pid:[4026531836]")
    claim = LockClaim("t", "ops@ops-1:4242", "m1", "deploy", 1.0, "b1", "ops-1", "100", "pid:[4026531836]")
    assert holder_is_gone(claim, here, 7, False, lambda pid: None) is True


def test_a_start_time_is_read_from_a_stat_line_that_ends_with_it_and_not_from_a_shorter_one():
    after = " ".join(str(n) for n in range(3, 22))  # fields 3 to 21: state, ppid, ... (19 of them)
    assert start_time(f"42 (python3 (x) y) {after} 987654") == "987654"
    assert start_time(f"42 (python3 (x) y) {after}") is None
