"""Exact-value tests of thin_layer.py (was layer.py) that the mutation run showed were missing: every tar member's full metadata, every whiteout."""

from __future__ import annotations

import io
import tarfile

import pytest

from kvbake.bake.core.thin_layer import NEW_DIR_MODE, NEW_FILE_MODE, WHITEOUT_PREFIX, LayerDir, LayerFile, build_layer, in_image, parent_dirs, whiteout_path

EPOCH = 1_700_000_000
ROOT = "usr/lib/py"


def listing(data: bytes) -> list[tuple]:
    """Every member as (name, kind, mode, uid, gid, mtime, size, uname, gname, bytes)."""
    rows = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for m in tar.getmembers():
            body = tar.extractfile(m).read() if m.isfile() else None
            rows.append((m.name, m.type, m.mode, m.uid, m.gid, m.mtime, m.size, m.uname, m.gname, body))
    return rows


def test_the_constants_are_the_overlay_conventions() -> None:
    assert (WHITEOUT_PREFIX, NEW_DIR_MODE, NEW_FILE_MODE) == (".wh.", 0o755, 0o644)


@pytest.mark.parametrize(("stale", "whiteout"), [
    (f"{ROOT}/pkg/__pycache__/mod.cpython-311.pyc", f"{ROOT}/pkg/__pycache__/.wh.mod.cpython-311.pyc"),
    (f"{ROOT}/pkg/__pycache__/mod.cpython-311.opt-1.pyc", f"{ROOT}/pkg/__pycache__/.wh.mod.cpython-311.opt-1.pyc"),
    (f"{ROOT}/pkg/__pycache__/mod.cpython-311.opt-2.pyc", f"{ROOT}/pkg/__pycache__/.wh.mod.cpython-311.opt-2.pyc"),
    ("mod.pyc", ".wh.mod.pyc"),
])
def test_whiteout_path_covers_every_bytecode_flavour(stale: str, whiteout: str) -> None:
    assert whiteout_path(stale) == whiteout


@pytest.mark.parametrize(("root", "relative", "member"), [
    ("/usr/lib/py", "pkg/mod.py", "usr/lib/py/pkg/mod.py"),
    ("usr/lib/py", "pkg/mod.py", "usr/lib/py/pkg/mod.py"),
    ("//srv/", "a.py", "srv/a.py"),
    ("/XX/lib", "a.py", "XX/lib/a.py"),
])
def test_in_image_names_a_member_without_a_leading_slash(root: str, relative: str, member: str) -> None:
    assert in_image(root, relative) == member


@pytest.mark.parametrize(("paths", "parents"), [
    ([], []),
    (["top.py"], []),
    (["b/x.py", "a/y/z.py", "a/y/w.py"], ["a", "b", "a/y"]),
    (["z/a/b/c.py", "a/b.py"], ["a", "z", "z/a", "z/a/b"]),
])
def test_parent_dirs_are_unique_and_ordered_by_depth_then_name(paths: list[str], parents: list[str]) -> None:
    assert parent_dirs(paths) == parents


def test_every_member_carries_exactly_its_metadata() -> None:
    files = [LayerFile(f"{ROOT}/pkg/b.py", b"B = 2\n", 0o640, 1000, 1001), LayerFile(f"{ROOT}/pkg/a.py", b"", 0o755, 0, 0)]
    whiteouts = [f"{ROOT}/pkg/__pycache__/b.cpython-311.opt-1.pyc", f"{ROOT}/pkg/__pycache__/b.cpython-311.pyc"]
    dirs = [LayerDir(f"{ROOT}/pkg/__pycache__", 0o700, 5, 6, 1_600_000_123), LayerDir(f"{ROOT}/pkg", 0o751, 7, 8, 1_500_000_000)]
    layer = build_layer(files, whiteouts, dirs, EPOCH)
    reg, dirtype = tarfile.REGTYPE, tarfile.DIRTYPE
    assert listing(layer.data) == [
        (f"{ROOT}/pkg", dirtype, 0o751, 7, 8, 1_500_000_000, 0, "", "", None),
        (f"{ROOT}/pkg/__pycache__", dirtype, 0o700, 5, 6, 1_600_000_123, 0, "", "", None),
        (f"{ROOT}/pkg/__pycache__/.wh.b.cpython-311.opt-1.pyc", reg, 0o644, 0, 0, EPOCH, 0, "", "", b""),
        (f"{ROOT}/pkg/__pycache__/.wh.b.cpython-311.pyc", reg, 0o644, 0, 0, EPOCH, 0, "", "", b""),
        (f"{ROOT}/pkg/a.py", reg, 0o755, 0, 0, EPOCH, 0, "", "", b""),
        (f"{ROOT}/pkg/b.py", reg, 0o640, 1000, 1001, EPOCH, 6, "", "", b"B = 2\n"),
    ]
    assert layer.entries == (
        f"{ROOT}/pkg", f"{ROOT}/pkg/__pycache__", f"{ROOT}/pkg/__pycache__/.wh.b.cpython-311.opt-1.pyc",
        f"{ROOT}/pkg/__pycache__/.wh.b.cpython-311.pyc", f"{ROOT}/pkg/a.py", f"{ROOT}/pkg/b.py")
    assert layer.diff_id.startswith("sha256:") and len(layer.diff_id) == 71


def test_an_empty_layer_is_a_valid_empty_tar() -> None:
    layer = build_layer([], [], [], EPOCH)
    assert listing(layer.data) == []
    assert layer.entries == ()


@pytest.mark.parametrize(("files", "whiteouts", "dirs"), [
    ([LayerFile("a/x.py", b"1", 0o644, 0, 0), LayerFile("a/x.py", b"1", 0o644, 0, 0)], [], []),
    ([], ["a/__pycache__/x.pyc", "a/__pycache__/x.pyc"], []),
    ([LayerFile("a/.wh.x.pyc", b"", 0o644, 0, 0)], ["a/x.pyc"], []),
    ([LayerFile("a", b"", 0o644, 0, 0)], [], [LayerDir("a", 0o755, 0, 0, EPOCH)]),
])
def test_any_duplicate_name_is_refused_with_the_exact_error(files, whiteouts, dirs) -> None:
    with pytest.raises(ValueError) as caught:
        build_layer(files, whiteouts, dirs, EPOCH)
    assert type(caught.value) is ValueError
    assert "duplicate" in str(caught.value)
