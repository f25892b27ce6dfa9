"""The pure parts of `lock`'s pinning: SOURCE_DATE_EPOCH, which registry digest pins a base on each store, the
directories above the chain's files, which of them the base has, and each locked file's entry."""

from __future__ import annotations

import pytest

from kvbake.bake.adapters.extract import BaseFile
from kvbake.bake.adapters.pinning import (BaseSnapshot, locked_files, names_registry_host, registry_digest_of, source_date_epoch,
                                          split_dirs, wanted_dirs)
from kvbake.digests import sha256_hex
from kvbake.engines.core.savefile import DirMeta
from kvbake.errors import BaseImageError, LockError
from kvbake.lock import LockedDir

ROOT = "/usr/lib/py"
B, C = "sha256:" + "b" * 64, "sha256:" + "c" * 64


class Unlocked:
    lock_path = type("Absent", (), {"exists": staticmethod(lambda: False)})()


def test_source_date_epoch_is_the_environments_digits_or_now(monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert source_date_epoch(Unlocked()) == 1700000000
    for bad in ("-5", "17e8", "１２"):
        monkeypatch.setenv("SOURCE_DATE_EPOCH", bad)
        with pytest.raises(LockError) as caught:
            source_date_epoch(Unlocked())
        assert caught.value.exit_code == 4 and "SOURCE_DATE_EPOCH" in caught.value.message
    monkeypatch.delenv("SOURCE_DATE_EPOCH")
    monkeypatch.setattr("kvbake.bake.adapters.pinning.time.time", lambda: 1234.9)
    assert source_date_epoch(Unlocked()) == 1234


@pytest.mark.parametrize(("repository", "named"), [("ghcr.io/x/y", True), ("127.0.0.1:5000/y", True), ("localhost/y", True),
                                                    ("x/y", False), ("y", False), ("localhost", False),
                                                    ("registry:5000/y", True), ("team/v1.2/app", False)])
def test_a_repository_names_a_registry_host_by_a_dot_a_port_or_localhost(repository, named):
    assert names_registry_host(repository) is named


def test_the_base_is_pinned_by_its_own_repositorys_digest_only():
    digests = [f"other/repo@{C}", f"ghcr.io/x/img@{B}"]
    assert registry_digest_of("ghcr.io/x/img:v5", digests, "classic") == B
    assert registry_digest_of(f"ghcr.io/x/img@{B}", digests, "classic") == B
    assert registry_digest_of("ghcr.io/x/other:v5", digests, "classic") is None
    assert registry_digest_of("img:1", ["img@" + B], "classic") == B, "classic lists a digest only for a pulled image"
    assert registry_digest_of("img:1", ["img@" + B], "containerd") is None, "containerd lists one for a loaded image too"
    assert registry_digest_of("ghcr.io/x/img:v5", digests, "containerd") == B


def test_the_wanted_directories_are_every_parent_of_a_file_or_a_stale_bytecode_file():
    wanted = wanted_dirs(ROOT, {"pkg/a/x.py": "modify"}, {"pkg/a/x.py": ("pkg/a/__pycache__/x.cpython-311.pyc",)})
    assert wanted == frozenset({"usr", "usr/lib", "usr/lib/py", "usr/lib/py/pkg", "usr/lib/py/pkg/a", "usr/lib/py/pkg/a/__pycache__"})


def test_the_directories_split_into_the_bases_with_their_metadata_and_the_ones_the_chain_creates():
    wanted = frozenset({"usr", "usr/lib", "usr/lib/py", "usr/lib/py/pkg", "usr/lib/py/pkg/new", "usr/lib/py/pkg/new/deeper"})
    found = {d: DirMeta(0o755, 0, 0, 100) for d in ("usr", "usr/lib", "usr/lib/py")} | {"usr/lib/py/pkg": DirMeta(0o750, 1, 2, 3)}
    existing, created = split_dirs(ROOT, wanted, found)
    assert existing == (LockedDir("usr", 0o755, 0, 0, 100), LockedDir("usr/lib", 0o755, 0, 0, 100),
                        LockedDir("usr/lib/py", 0o755, 0, 0, 100), LockedDir("usr/lib/py/pkg", 0o750, 1, 2, 3))
    assert created == ("pkg/new", "pkg/new/deeper")


def test_a_missing_directory_above_the_source_root_is_refused():
    with pytest.raises(BaseImageError) as caught:
        split_dirs(ROOT, frozenset({"usr", "usr/lib", "usr/lib/py", "usr/lib/py/pkg"}), {"usr": DirMeta(0o755, 0, 0, 1)})
    assert caught.value.exit_code == 6 and "usr/lib" in caught.value.message


def test_each_locked_file_keeps_the_bases_hash_owner_and_mode_and_a_created_file_gets_the_defaults():
    snapshot = BaseSnapshot({"pkg/x.py": BaseFile("pkg/x.py", b"old", 0o640, 10, 20)}, {"pkg/x.py": ("pkg/__pycache__/x.pyc",)})
    files = locked_files(snapshot, {"pkg/x.py": b"new", "pkg/n.py": b"created"})
    assert [(f.path, f.base_sha256, f.overlay_sha256, f.mode, f.uid, f.gid, f.stale_bytecode) for f in files] == [
        ("pkg/n.py", None, sha256_hex(b"created"), 0o644, 0, 0, ()),
        ("pkg/x.py", sha256_hex(b"old"), sha256_hex(b"new"), 0o640, 10, 20, ("pkg/__pycache__/x.pyc",))]
