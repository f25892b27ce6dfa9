"""Tests of the lock: its bytes round trip, its core identity, and refusing a missing, malformed or drifted lock."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from kvbake.errors import LockError
from kvbake.lock import Derived, LockedDir, lock_bytes, lock_from_dict, read_lock, write_lock
from tests.unit.helpers_manifest import locked_file, make_lock, tiny_manifest


def full_lock(manifest_sha256: str = "0" * 64):
    return make_lock(
        manifest_sha256=manifest_sha256,
        files=(locked_file("pkg/mod.py", b"new\n", stale=("pkg/__pycache__/mod.cpython-311.pyc",)),
               locked_file("pkg/fresh/helper.py", b"helper\n", base=None, mode=0o600, uid=1000, gid=1001)),
        dirs=(LockedDir("usr/lib/py/pkg", 0o775, 1000, 1001, 1_600_000_000),),
        new_dirs=("pkg/fresh",), repo_digest="sha256:" + "f" * 64,
    )


def test_lock_bytes_round_trip() -> None:
    lock = full_lock()
    again = lock_from_dict(json.loads(lock_bytes(lock)))
    assert again == lock
    assert lock_bytes(again) == lock_bytes(lock)


def test_lock_bytes_are_sorted_indented_and_newline_terminated() -> None:
    data = lock_bytes(full_lock())
    assert data.endswith(b"}\n")
    assert data == (json.dumps(json.loads(data), sort_keys=True, indent=1, ensure_ascii=False) + "\n").encode()


def test_core_sha256_ignores_the_derived_section() -> None:
    lock = full_lock()
    other = lock.with_derived(Derived(layer_diff_id="sha256:" + "8" * 64, image_id="sha256:" + "9" * 64))
    assert other.derived != lock.derived
    assert other.core_sha256() == lock.core_sha256()


@pytest.mark.parametrize("change", [
    {"source_date_epoch": 1}, {"overlay_tree_sha256": "f" * 64}, {"new_dirs": ()}, {"manifest_sha256": "e" * 64},
])
def test_core_sha256_follows_everything_else(change: dict) -> None:
    lock = full_lock()
    assert replace(lock, **change).core_sha256() != lock.core_sha256()


def test_file_finds_a_locked_file_by_path() -> None:
    assert full_lock().file("pkg/fresh/helper.py").base_sha256 is None


def test_write_lock_writes_the_bytes_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "manifest.lock.json"
    write_lock(target, full_lock())
    assert target.read_bytes() == lock_bytes(full_lock())
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.lock.json"]


def test_read_lock_returns_the_matching_lock(tmp_path: Path) -> None:
    manifest = tiny_manifest(tmp_path)
    write_lock(manifest.lock_path, full_lock(manifest.sha256))
    assert read_lock(manifest) == full_lock(manifest.sha256)


def test_a_missing_lock_names_the_command_that_creates_it(tmp_path: Path) -> None:
    manifest = tiny_manifest(tmp_path)
    with pytest.raises(LockError) as caught:
        read_lock(manifest)
    assert caught.value.exit_code == 4
    text = caught.value.one_line()
    assert "manifest.lock.json is missing" in text
    assert "python build.py lock" in text


def test_a_drifted_manifest_is_refused(tmp_path: Path) -> None:
    manifest = tiny_manifest(tmp_path)
    write_lock(manifest.lock_path, full_lock("d" * 64))
    with pytest.raises(LockError, match="manifest.lock.json drifts from manifest.yaml") as caught:
        read_lock(manifest)
    assert caught.value.exit_code == 4


def test_another_format_is_refused(tmp_path: Path) -> None:
    manifest = tiny_manifest(tmp_path)
    write_lock(manifest.lock_path, replace(full_lock(manifest.sha256), format=2))
    with pytest.raises(LockError, match="has format 2, this kvbake writes 1"):
        read_lock(manifest)


@pytest.mark.parametrize("text", ["{not json", "{}", '{"format": 1}', "[]"])
def test_a_malformed_lock_is_a_lock_error(text: str, tmp_path: Path) -> None:
    manifest = tiny_manifest(tmp_path)
    manifest.lock_path.write_text(text, encoding="utf-8")
    with pytest.raises(LockError, match="manifest.lock.json is malformed") as caught:
        read_lock(manifest)
    assert "\n" not in caught.value.one_line()
