"""safepath's fixes and the lock's reading rules: missing, drifted, foreign format, the kept epoch, each with what to do."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from kvbake.errors import LockError, ManifestError
from kvbake.lock import LockedDir, LockedFile, check_lock_matches, locked_source_date_epoch, pinned_manifest_sha256, read_lock, write_lock
from kvbake.safepath import resolve_inside
from tests.unit.helpers_manifest import make_lock, tiny_manifest
from tests.unit.message_words import says


@pytest.mark.parametrize(("relative", "problem", "fix"), [
    ("/etc/passwd", "chain x file '/etc/passwd' is absolute", "give a path relative to the manifest's folder"),
    ("a\\b", "chain x file 'a\\\\b' contains a backslash", "use forward slashes, relative to the manifest's folder"),
    ("a/../b", "chain x file 'a/../b' contains '..'", "give a path inside the manifest's folder"),
])
def test_a_path_that_could_leave_the_folder_is_refused_with_its_fix(tmp_path: Path, relative: str, problem: str, fix: str) -> None:
    with pytest.raises(ManifestError) as caught:
        resolve_inside(tmp_path, relative, "chain x file")
    assert says(caught.value.message, problem) and says(caught.value.fix, fix)


def test_a_symlink_out_of_the_folder_is_refused_and_the_folder_itself_is_inside(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "out").symlink_to(tmp_path)
    with pytest.raises(ManifestError) as caught:
        resolve_inside(tmp_path / "root", "out/x", "chain x file")
    assert says(caught.value.message, "escapes the manifest's folder through a symlink")
    assert says(caught.value.fix, "replace the symlink with the file itself")
    assert resolve_inside(tmp_path / "root", ".", "chain x file") == (tmp_path / "root").resolve()
    assert resolve_inside(tmp_path / "root", "a/b", "chain x file") == (tmp_path / "root" / "a" / "b").resolve()


def test_a_missing_lock_says_how_to_make_it(tmp_path: Path) -> None:
    manifest = tiny_manifest(tmp_path)
    with pytest.raises(LockError) as caught:
        read_lock(manifest)
    assert says(caught.value.message, "manifest.yaml is not locked (manifest.lock.json is missing)")
    assert says(caught.value.fix, "run: python build.py lock --manifest manifest.yaml")


def test_each_format_pins_its_own_manifest_hash(tmp_path: Path) -> None:
    manifest = tiny_manifest(tmp_path)
    assert pinned_manifest_sha256(manifest, 1) == manifest.sha256
    assert pinned_manifest_sha256(manifest, 2) == manifest.image_sha256 != manifest.sha256


@pytest.mark.parametrize(("lock_format", "what"), [(1, "the manifest changed"),
                                                   (2, "its base, donor, chain, switches, forbidden names or output changed")])
def test_a_drift_says_what_changed_for_the_lock_s_format(tmp_path: Path, lock_format: int, what: str) -> None:
    manifest = tiny_manifest(tmp_path)
    with pytest.raises(LockError) as caught:
        check_lock_matches(manifest, replace(make_lock(), format=lock_format, manifest_sha256="0" * 64))
    assert says(caught.value.message, f"manifest.lock.json drifts from manifest.yaml ({what} since it was locked)")
    assert says(caught.value.fix, "review the change, then run python build.py lock")


def test_a_matching_lock_of_either_format_passes_and_a_foreign_one_is_refused(tmp_path: Path) -> None:
    manifest = tiny_manifest(tmp_path)
    assert check_lock_matches(manifest, replace(make_lock(), format=1, manifest_sha256=manifest.sha256)) is None
    assert check_lock_matches(manifest, replace(make_lock(), format=2, manifest_sha256=manifest.image_sha256)) is None
    assert check_lock_matches(manifest, replace(make_lock(), format=3, manifest_sha256=manifest.image_sha256)) is None
    with pytest.raises(LockError) as caught:
        check_lock_matches(manifest, replace(make_lock(), format=4, manifest_sha256=manifest.image_sha256))
    assert caught.value.exit_code == 4 and says(caught.value.message, "format 4") and says(caught.value.message, "writes 3")
    assert says(caught.value.fix, "run python build.py lock")


@pytest.mark.parametrize("epoch", ["1", -1, True, None, 1.5])
def test_a_kept_epoch_must_be_a_whole_number(tmp_path: Path, epoch) -> None:
    path = tmp_path / "manifest.lock.json"
    path.write_text(json.dumps({"source_date_epoch": epoch}))
    with pytest.raises(LockError) as caught:
        locked_source_date_epoch(path)
    assert says(caught.value.message, "manifest.lock.json is malformed: source_date_epoch must be a whole number ≥ 0")
    assert says(caught.value.message, "so lock cannot keep the image's timestamps")
    assert says(caught.value.fix, "restore it from version control, or set SOURCE_DATE_EPOCH")


def test_a_kept_epoch_is_read_leniently(tmp_path: Path) -> None:
    path = tmp_path / "manifest.lock.json"
    path.write_text(json.dumps({"source_date_epoch": 0, "anything": "else"}))
    assert locked_source_date_epoch(path) == 0


def test_a_written_lock_reads_back_equal(tmp_path: Path) -> None:
    manifest = tiny_manifest(tmp_path)
    files = (LockedFile("pkg/mod.py", "4" * 64, "5" * 64, 0o644, 0, 0, ("pkg/__pycache__/mod.cpython-312.pyc",)),
             LockedFile("pkg/new.py", None, "8" * 64, 0o600, 1, 2, ()))
    lock = replace(make_lock(files=files, dirs=(LockedDir("usr/lib/py/pkg", 0o755, 0, 0, 1),), new_dirs=("pkg/sub",),
                             repo_digest="kvbake-test/tiny@sha256:" + "9" * 64), format=2, manifest_sha256=manifest.image_sha256)
    write_lock(manifest.lock_path, lock)
    assert read_lock(manifest) == lock
    assert lock.file("pkg/new.py") == files[1]
    assert lock.with_derived(replace(lock.derived, image_id="x")).derived.image_id == "x"
    assert lock.core_sha256() == replace(lock, derived=replace(lock.derived, image_id="y")).core_sha256()
