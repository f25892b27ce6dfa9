"""Tests of resolve_inside: manifest-relative paths that must stay inside the manifest's folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbake.errors import ManifestError
from kvbake.safepath import resolve_inside


def test_a_plain_relative_path_resolves_inside(tmp_path: Path) -> None:
    assert resolve_inside(tmp_path, "patches/0001.patch", "chain 0001 file") == tmp_path.resolve() / "patches" / "0001.patch"


def test_the_root_itself_is_inside(tmp_path: Path) -> None:
    assert resolve_inside(tmp_path, ".", "overlay") == tmp_path.resolve()


@pytest.mark.parametrize("relative,reason", [("/etc/passwd", "is absolute"), ("C:\\patches\\x.patch", "contains a backslash"),
                                             ("patches\\x.patch", "contains a backslash")])
def test_absolute_or_backslash_paths_are_refused(relative: str, reason: str, tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=reason) as caught:
        resolve_inside(tmp_path, relative, "chain 0001 file")
    assert caught.value.exit_code == 3
    assert repr(relative) in caught.value.one_line()


@pytest.mark.parametrize("relative", ["../x.patch", "patches/../x.patch", "a/b/../../../x.patch"])
def test_dot_dot_is_refused_even_when_it_would_stay_inside(relative: str, tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as caught:
        resolve_inside(tmp_path, relative, "chain 0001 file")
    assert caught.value.exit_code == 3
    assert all(field in caught.value.message for field in ("chain 0001 file", repr(relative), "'..'"))
    assert "inside the manifest's folder" in caught.value.fix


def test_a_symlinked_folder_pointing_outside_is_refused(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "patches").symlink_to(outside, target_is_directory=True)
    with pytest.raises(ManifestError, match="escapes the manifest's folder through a symlink") as caught:
        resolve_inside(root, "patches/0001.patch", "chain 0001 file")
    assert "chain 0001 file 'patches/0001.patch'" in caught.value.one_line()


def test_a_symlink_to_the_parent_itself_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "up").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(ManifestError) as caught:
        resolve_inside(root, "up", "overlay")
    assert caught.value.exit_code == 3
    assert "overlay 'up'" in caught.value.message and "symlink" in caught.value.message
    assert "symlink" in caught.value.fix


def test_a_sibling_folder_sharing_the_root_name_prefix_is_outside(tmp_path: Path) -> None:
    root, sibling = tmp_path / "root", tmp_path / "root-other"
    root.mkdir()
    sibling.mkdir()
    (root / "link").symlink_to(sibling, target_is_directory=True)
    with pytest.raises(ManifestError) as caught:
        resolve_inside(root, "link/x.patch", "chain 0001 file")
    assert caught.value.exit_code == 3
    assert "chain 0001 file 'link/x.patch'" in caught.value.message and "symlink" in caught.value.message
    assert "symlink" in caught.value.fix


def test_a_symlink_that_stays_inside_is_followed(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to("real", target_is_directory=True)
    assert resolve_inside(tmp_path, "alias/x.patch", "chain 0001 file") == tmp_path.resolve() / "real" / "x.patch"
