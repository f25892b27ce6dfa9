"""Tests of the offline bytecode proof: which cached files Python would run instead of the patched source."""

from __future__ import annotations

import importlib.util
import struct

import pytest

from kvbake.bake.core.bytecode import ModuleEvidence, module_failures, pyc_verdict, python_tags, shadow_candidates

SOURCE = b"A = 2\n"
MTIME = 1_700_000_000


def timestamp_pyc(mtime: int, size: int) -> bytes:
    return importlib.util.MAGIC_NUMBER + struct.pack("<III", 0, mtime, size)


def hash_pyc(source: bytes, checked: bool) -> bytes:
    return importlib.util.MAGIC_NUMBER + struct.pack("<I", 0b01 | (0b10 if checked else 0)) + importlib.util.source_hash(source)


@pytest.mark.parametrize(("header", "wins"), [
    (timestamp_pyc(MTIME, len(SOURCE)), True),            # Python trusts mtime and size: it would run this pyc
    (timestamp_pyc(MTIME - 1, len(SOURCE)), False),       # the base's pyc of the old source: rejected
    (timestamp_pyc(MTIME, len(SOURCE) + 1), False),
    (hash_pyc(b"A = 1\n", checked=True), False),          # checked against the source: rejected
    (hash_pyc(SOURCE, checked=True), True),
    (hash_pyc(b"A = 1\n", checked=False), True),          # unchecked: always wins
    (b"\x00" * 8, False),                                 # truncated: the loader rejects it
])
def test_pyc_verdicts(header: bytes, wins: bool) -> None:
    assert (pyc_verdict(header, SOURCE, MTIME) is not None) == wins


def test_module_failures_name_the_file_and_the_reason() -> None:
    evidence = ModuleEvidence("pkg/mod.py", SOURCE, MTIME, {"mod.cpython-311.pyc": hash_pyc(b"old", checked=False),
                                                             "mod.cpython-311.opt-1.pyc": timestamp_pyc(1, 1)},
                              shadows=("pkg/mod.so",))
    assert module_failures(evidence) == [
        "pkg/mod.py: pkg/mod.so exists and is imported before the patched source",
        "pkg/mod.py: mod.cpython-311.pyc is an unchecked-hash pyc, which Python runs without looking at the source",
    ]
    assert module_failures(ModuleEvidence("pkg/mod.py", SOURCE, MTIME)) == []


def test_shadow_candidates_follow_the_platform_and_the_interpreter() -> None:
    tags = python_tags(("pkg/__pycache__/mod.cpython-311.pyc", "pkg/__pycache__/mod.cpython-311.opt-1.pyc"))
    assert tags == ("cpython-311",)
    assert shadow_candidates("pkg/mod.py", tags, "arm64") == (
        "pkg/mod/__init__.py", "pkg/mod.so", "pkg/mod.abi3.so", "pkg/mod.cpython-311-aarch64-linux-gnu.so")
