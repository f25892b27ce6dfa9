"""Why a cached pyc could run instead of the patched source, for each kind of pyc header."""

from __future__ import annotations

import importlib.util
import struct

from kvbake.bake.core.bytecode import FLAG_CHECK_SOURCE, FLAG_HASH_BASED, PYC_HEADER, pyc_verdict
from tests.unit.message_words import says

SOURCE = b"X = 1\n"
CODE = b"\xe3" + b"\0" * 40  # whatever follows the header in a pyc


def header(flags: int, rest: bytes, magic: bytes = importlib.util.MAGIC_NUMBER) -> bytes:
    return magic + struct.pack("<I", flags) + rest


def test_a_checked_hash_pyc_of_the_patched_source_wins_with_or_without_its_code():
    pyc = header(FLAG_HASH_BASED | FLAG_CHECK_SOURCE, importlib.util.source_hash(SOURCE))
    assert len(pyc) == PYC_HEADER
    for data in (pyc, pyc + CODE):
        assert says(pyc_verdict(data, SOURCE, 0), "a checked-hash pyc that matches the patched source")
    assert pyc_verdict(header(FLAG_HASH_BASED | FLAG_CHECK_SOURCE, importlib.util.source_hash(b"old\n")) + CODE, SOURCE, 0) is None


def test_a_checked_hash_pyc_of_another_python_cannot_be_checked():
    pyc = header(FLAG_HASH_BASED | FLAG_CHECK_SOURCE, b"\1" * 8, magic=b"\x01\x02\r\n")
    assert says(pyc_verdict(pyc, SOURCE, 0), "a checked-hash pyc of another Python version")
    assert says(pyc_verdict(pyc, SOURCE, 0), "cannot be checked offline")


def test_an_unchecked_hash_pyc_always_wins():
    assert "runs without looking at the source" in pyc_verdict(header(FLAG_HASH_BASED, b"\0" * 8), SOURCE, 0)


def test_a_timestamp_pyc_matching_the_sources_time_and_size_is_trusted_also_after_2038():
    for mtime in (1_700_000_000, 3_000_000_000):
        pyc = header(0, struct.pack("<II", mtime, len(SOURCE)))
        assert says(pyc_verdict(pyc, SOURCE, mtime), "a timestamp pyc") and says(pyc_verdict(pyc, SOURCE, mtime), "so Python trusts it")
        assert "so Python trusts it" in pyc_verdict(pyc + CODE, SOURCE, mtime)
        assert pyc_verdict(pyc, SOURCE, mtime + 1) is None and pyc_verdict(pyc, SOURCE + b"#", mtime) is None


def test_a_truncated_pyc_is_rejected_by_python():
    assert pyc_verdict(header(FLAG_HASH_BASED, b"")[:PYC_HEADER - 1], SOURCE, 0) is None
