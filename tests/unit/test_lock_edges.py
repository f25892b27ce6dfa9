"""Lock edges: non-ASCII text written as UTF-8, a folder's mode bounded, every listed path kept relative."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from kvbake.errors import LockError
from kvbake.lock import LockedDir, lock_bytes, lock_from_dict
from tests.unit.helpers_manifest import locked_file, make_lock
from tests.unit.message_words import says


def document() -> dict[str, Any]:
    lock = make_lock(files=(locked_file("pkg/mod.py", b"new\n", stale=("pkg/__pycache__/mod.cpython-311.pyc",)),),
                     dirs=(LockedDir("usr/lib/py/pkg", 0o755, 0, 0, 1_600_000_000),), new_dirs=("pkg/fresh",))
    return json.loads(lock_bytes(lock))


def refusal(document: dict[str, Any]) -> LockError:
    with pytest.raises(LockError) as caught:
        lock_from_dict(document)
    assert caught.value.exit_code == 4
    return caught.value


def test_non_ascii_text_is_written_as_utf8_not_escaped() -> None:
    data = lock_bytes(replace(make_lock(), donor_url="https://example.invalid/café.git"))
    assert "café".encode("utf-8") in data and b"\\u00e9" not in data
    assert lock_from_dict(json.loads(data)).donor_url == "https://example.invalid/café.git"


def test_a_folder_mode_is_bounded_like_a_file_mode() -> None:
    top = document()
    top["dirs"][0]["mode"] = 0o7777
    assert lock_from_dict(top).dirs[0].mode == 0o7777
    top["dirs"][0]["mode"] = 0o10000
    assert says(refusal(top).message, "dirs[0].mode must be a whole number ≥ 0 and ≤ 4095")


@pytest.mark.parametrize("path", ["../outside.pyc", "/usr/lib/py/pkg/mod.pyc"])
def test_stale_bytecode_must_be_a_relative_path(path: str) -> None:
    top = document()
    top["files"][0]["stale_bytecode"] = [path]
    assert says(refusal(top).message, "files[0].stale_bytecode[0] must be a relative path")


@pytest.mark.parametrize("path", ["../outside", "/etc"])
def test_a_new_folder_must_be_a_relative_path(path: str) -> None:
    top = document()
    top["new_dirs"] = ["pkg/fresh", path]
    assert says(refusal(top).message, "new_dirs[1] must be a relative path")


def test_the_edge_document_reads_back_whole() -> None:
    assert json.loads(lock_bytes(lock_from_dict(document()))) == document()
