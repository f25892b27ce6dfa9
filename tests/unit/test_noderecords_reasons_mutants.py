"""A node whose every copy of its state record is corrupt is refused with each copy's own reason, copy by copy: not
JSON, another format, no sequence number, a malformed release, a transition that is no object."""

from __future__ import annotations

import json

import pytest

from kvbake.digests import canonical_json, sha256_hex
from kvbake.errors import RolloutError
from kvbake.ship.core.noderecords import FORMAT, SLOTS, decode
from message_words import says


def signed(body: dict) -> bytes:
    """A copy whose checksum holds: only its content is wrong."""
    return json.dumps({**body, "sha256": sha256_hex(canonical_json(body))}).encode()


GOOD = {"format": FORMAT, "seq": 1, "current": None, "previous": None, "transition": None, "diverged": None, "adopted": None}


@pytest.mark.parametrize(("copy", "reason"), [
    (signed({**GOOD, "format": 1}), f"not a format-{FORMAT} state record"),
    (signed({**GOOD, "seq": "1"}), "no sequence number"),
    (signed({**GOOD, "current": {"image": "x"}}), "a release entry is malformed"),
    (signed({**GOOD, "transition": ["deploy-1"]}), "a transition or diverged entry is not an object"),
])
def test_each_corrupt_copy_is_refused_with_its_reason(copy, reason):
    with pytest.raises(RolloutError) as refused:
        decode("a", {SLOTS[0]: copy})
    assert says(refused.value.message, f"{SLOTS[0]}: {reason}")


def test_the_reasons_of_both_copies_are_listed_one_after_the_other():
    with pytest.raises(RolloutError) as refused:
        decode("a", {SLOTS[0]: b"{", SLOTS[1]: signed({**GOOD, "seq": None})})
    assert says(refused.value.message, f"; {SLOTS[1]}: no sequence number")
