"""The files copied out of a running container: every regular file below a folder by its relative path, a single file
as itself, links left out."""

from __future__ import annotations

from pathlib import Path

from kvbake.ship.adapters.served_files import regular_files


def test_every_regular_file_below_a_folder_is_read_by_its_relative_path_and_links_are_left_out(tmp_path: Path):
    folder = tmp_path / "mount-0"
    (folder / "vllm" / "ops").mkdir(parents=True)
    (folder / "fix.py").write_bytes(b"fixed = True\n")
    (folder / "vllm" / "ops" / "a.py").write_bytes(b"a = 1\n")
    (folder / "link.py").symlink_to(folder / "fix.py")
    assert sorted(regular_files(folder)) == [("fix.py", b"fixed = True\n"), ("vllm/ops/a.py", b"a = 1\n")]


def test_a_copied_out_file_is_read_as_itself(tmp_path: Path):
    copied = tmp_path / "changed-0"
    copied.write_bytes(b"b = 'edited'\n")
    assert list(regular_files(copied)) == [("", b"b = 'edited'\n")]


def test_a_copied_out_link_to_a_file_gives_nothing(tmp_path: Path):
    (tmp_path / "target.py").write_bytes(b"x = 1\n")
    link = tmp_path / "changed-0"
    link.symlink_to(tmp_path / "target.py")
    assert list(regular_files(link)) == []
