"""Tests of the thin layer tar: determinism, order, metadata, directory entries, whiteouts and the diff_id."""

from __future__ import annotations

import hashlib
import io
import tarfile

import pytest

from kvbake.bake.core.thin_layer import LayerDir, LayerFile, build_layer, in_image, parent_dirs, whiteout_path

EPOCH = 1_700_000_000
BASE_DIR_MTIME = 1_600_000_000
ROOT = "usr/lib/py"
WHITEOUTS = [f"{ROOT}/pkg/__pycache__/alpha.cpython-311.pyc", f"{ROOT}/pkg/__pycache__/zeta.cpython-311.pyc"]


def sample_files() -> list[LayerFile]:
    return [
        LayerFile(f"{ROOT}/pkg/zeta.py", b"Z = 1\n", 0o644, 0, 0),
        LayerFile(f"{ROOT}/pkg/alpha.py", b"A = 1\n", 0o755, 1000, 1001),
        LayerFile(f"{ROOT}/pkg/fresh/helper.py", b"def helper():\n    return 1\n", 0o640, 33, 44),
    ]


def sample_dirs() -> list[LayerDir]:
    return [
        LayerDir(f"{ROOT}/pkg", 0o775, 1000, 1001, BASE_DIR_MTIME),
        LayerDir(f"{ROOT}/pkg/__pycache__", 0o755, 0, 0, BASE_DIR_MTIME + 5),
        LayerDir(f"{ROOT}/pkg/fresh", 0o755, 0, 0, EPOCH),
    ]


def sample_layer(mtime: int = EPOCH):
    return build_layer(sample_files(), list(WHITEOUTS), sample_dirs(), mtime)


def members(data: bytes) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        return tar.getmembers()


def contents(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_the_same_input_gives_the_same_bytes_and_diff_id() -> None:
    first, second = sample_layer(), sample_layer()
    assert first.data == second.data
    assert first.diff_id == second.diff_id
    assert first.entries == second.entries


def test_input_order_does_not_change_the_bytes() -> None:
    reordered = build_layer(list(reversed(sample_files())), list(reversed(WHITEOUTS)), list(reversed(sample_dirs())), EPOCH)
    assert reordered.data == sample_layer().data


def test_another_epoch_gives_another_diff_id() -> None:
    assert sample_layer(EPOCH + 1).diff_id != sample_layer().diff_id


def test_diff_id_is_the_sha256_of_the_tar_bytes() -> None:
    layer = sample_layer()
    assert layer.diff_id == "sha256:" + hashlib.sha256(layer.data).hexdigest()


def test_entries_are_sorted_in_the_tar_and_in_the_listing() -> None:
    layer = sample_layer()
    names = [m.name for m in members(layer.data)]
    assert names == sorted(names)
    assert list(layer.entries) == sorted(layer.entries)
    assert [n.rstrip("/") for n in names] == list(layer.entries)


def test_files_and_whiteouts_carry_the_given_mtime() -> None:
    regular = [m for m in members(sample_layer().data) if m.isfile()]
    assert len(regular) == len(sample_files()) + len(WHITEOUTS)
    assert {m.mtime for m in regular} == {EPOCH}


def test_every_member_has_empty_owner_names() -> None:
    for member in members(sample_layer().data):
        assert (member.uname, member.gname) == ("", "")


def test_files_keep_their_mode_uid_gid_and_bytes() -> None:
    by_name = {m.name: m for m in members(sample_layer().data)}
    for item in sample_files():
        member = by_name[item.path]
        assert member.isfile()
        assert (member.mode, member.uid, member.gid) == (item.mode, item.uid, item.gid)
    assert {f.path: f.data for f in sample_files()}.items() <= contents(sample_layer().data).items()


def test_directories_are_exactly_the_given_ones_with_their_own_metadata() -> None:
    dirs = {m.name.rstrip("/"): m for m in members(sample_layer().data) if m.isdir()}
    assert sorted(dirs) == sorted(d.path for d in sample_dirs())
    for given in sample_dirs():
        entry = dirs[given.path]
        assert (entry.mode, entry.uid, entry.gid, entry.mtime) == (given.mode, given.uid, given.gid, given.mtime)


def test_no_directory_entries_at_all_without_dirs() -> None:
    layer = build_layer(sample_files(), [], [], EPOCH)
    assert not [m for m in members(layer.data) if m.isdir()]
    assert len(members(layer.data)) == len(sample_files())


def test_whiteouts_are_empty_files_next_to_the_stale_bytecode() -> None:
    by_name = {m.name: m for m in members(sample_layer().data)}
    for module in ("alpha", "zeta"):
        member = by_name[f"{ROOT}/pkg/__pycache__/.wh.{module}.cpython-311.pyc"]
        assert member.isfile()
        assert member.size == 0
    assert f"{ROOT}/pkg/__pycache__/alpha.cpython-311.pyc" not in by_name


def test_whiteout_path_prefixes_the_file_name() -> None:
    assert whiteout_path("dir/__pycache__/mod.cpython-311.pyc") == "dir/__pycache__/.wh.mod.cpython-311.pyc"


def test_in_image_drops_the_leading_slash() -> None:
    assert in_image("/usr/lib/py", "pkg/mod.py") == "usr/lib/py/pkg/mod.py"


def test_parent_dirs_lists_every_ancestor_once_shallowest_first() -> None:
    assert parent_dirs(["usr/lib/py/pkg/a.py", "usr/lib/py/pkg/__pycache__/.wh.a.pyc", "usr/lib/other.py"]) == [
        "usr", "usr/lib", "usr/lib/py", "usr/lib/py/pkg", "usr/lib/py/pkg/__pycache__",
    ]


@pytest.mark.parametrize("dirs", [[], [LayerDir("a", 0o755, 0, 0, EPOCH), LayerDir("a", 0o700, 0, 0, EPOCH)]])
def test_a_duplicate_entry_is_refused(dirs: list[LayerDir]) -> None:
    files = [LayerFile("a/x.py", b"1", 0o644, 0, 0)] + ([LayerFile("a/x.py", b"2", 0o644, 0, 0)] if not dirs else [])
    with pytest.raises(ValueError, match="duplicate entries"):
        build_layer(files, [], dirs, EPOCH)
