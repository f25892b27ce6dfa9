"""The SLSA predicate takes a base digest's hex only from a sha256 digest, and names one it refuses."""

from __future__ import annotations

import pytest

from kvbake.attest.core.slsa import hex_of


@pytest.mark.parametrize("digest", ["sha512:" + "a" * 64, "sha256:" + "a" * 63, "a" * 64, "sha256:" + "g" * 64,
                                    "sha256:" + "A" * 64, "sha256:" + "a" * 30 + ":" + "a" * 33])
def test_a_digest_that_is_no_sha256_is_refused_by_name(digest):
    with pytest.raises(ValueError) as caught:
        hex_of(digest)
    assert repr(digest) in str(caught.value)


def test_a_sha256_digest_gives_its_hex():
    assert hex_of("sha256:" + "0123456789abcdef" * 4) == "0123456789abcdef" * 4
