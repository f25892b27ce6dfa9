"""A counted stream's detail is the exact number of bytes read so far, starting from none."""

from __future__ import annotations

from kvbake.terminal import progress


def test_the_detail_counts_exactly_the_bytes_of_the_chunks_read_so_far():
    shown: list[str] = []
    chunks = list(progress.counted(iter([b"abc", b"", b"de"]), shown.append))
    assert chunks == [b"abc", b"", b"de"]
    assert shown == ["3 bytes read", "3 bytes read", "5 bytes read"]


def test_a_single_byte_reads_as_one_byte():
    shown: list[str] = []
    assert list(progress.counted([b"x"], shown.append)) == [b"x"]
    assert shown == ["1 byte read"]


def test_an_empty_stream_shows_no_detail():
    shown: list[str] = []
    assert list(progress.counted([], shown.append)) == [] and shown == []
