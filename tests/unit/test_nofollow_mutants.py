"""read_regular refusals: which path they name, what they say the path is, and reads larger than one chunk."""

from __future__ import annotations

import errno
import os
import socket
import stat
from pathlib import Path

import pytest

from kvbake.bake.core.nofollow import NotRegularFile, read_regular
from tests.unit.message_words import says


def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "outer" / "inner").mkdir(parents=True)
    (root / "outer" / "inner" / "file.py").write_text("inside\n")
    return root


def refusal(root: Path, relative: str) -> NotRegularFile:
    with pytest.raises(NotRegularFile) as caught:
        read_regular(root, relative)
    return caught.value


@pytest.mark.parametrize("relative", ["", ".", "/etc/hostname", "../secret", "outer/../../secret"])
def test_a_path_that_leaves_the_folder_is_refused_and_named(tmp_path: Path, relative: str) -> None:
    (tmp_path / "secret").write_text("registry password\n")
    error = refusal(tree(tmp_path), relative)
    assert error.relative == relative and says(error.kind, "not a path inside the folder")


def test_a_socket_that_cannot_be_opened_is_unreadable_and_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tree(tmp_path)
    monkeypatch.chdir(root / "outer")
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind("sock")
        error = refusal(root, "outer/sock")
    assert error.relative == "outer/sock"
    assert says(error.kind, "unreadable") and says(error.kind, "outer/sock") and says(error.kind, os.strerror(errno.ENXIO))


def test_a_root_that_is_not_a_folder_is_refused_before_anything_below_it_is_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind("sock")
        with pytest.raises(NotADirectoryError):
            read_regular(tmp_path / "sock", "file.py")


def test_a_symlinked_file_is_named_as_a_symlink(tmp_path: Path) -> None:
    root = tree(tmp_path)
    (root / "outer" / "inner" / "link.py").symlink_to("file.py")
    error = refusal(root, "outer/inner/link.py")
    assert (error.relative, error.kind) == ("outer/inner/link.py", "a symlink")


def test_a_symlinked_folder_two_levels_down_names_the_folder(tmp_path: Path) -> None:
    root = tree(tmp_path)
    (root / "outer" / "inner").rename(root / "moved")
    (root / "outer" / "inner").symlink_to(root / "moved")
    error = refusal(root, "outer/inner/file.py")
    assert error.relative == "outer/inner/file.py" and says(error.kind, "below a symlink (outer/inner)")


def test_a_file_used_as_a_folder_is_named_as_not_a_folder(tmp_path: Path) -> None:
    root = tree(tmp_path)
    error = refusal(root, "outer/inner/file.py/more.py")
    assert error.relative == "outer/inner/file.py/more.py"
    assert says(error.kind, "below a file that is not a folder (outer/inner/file.py)") and not says(error.kind, "symlink")


def test_a_symlink_replaced_by_a_file_after_the_open_is_not_called_a_symlink(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The open refuses the link (ELOOP); a regular file takes its place before the refusal looks at what it was."""
    root = tree(tmp_path)
    link = root / "outer" / "inner" / "link.py"
    link.symlink_to("file.py")
    real_open = os.open

    def open_then_replace(path, flags, *args, **kwargs):
        try:
            return real_open(path, flags, *args, **kwargs)
        except OSError as err:
            if path == "link.py" and err.errno == errno.ELOOP:
                link.unlink()
                link.write_text("now a file\n")
            raise

    monkeypatch.setattr(os, "open", open_then_replace)
    error = refusal(root, "outer/inner/link.py")
    assert error.relative == "outer/inner/link.py"
    assert error.kind != "a symlink" and says(error.kind, "not a regular file")


def test_a_directory_at_the_path_is_named_as_a_directory(tmp_path: Path) -> None:
    error = refusal(tree(tmp_path), "outer/inner")
    assert (error.relative, error.kind) == ("outer/inner", "a directory")


def test_a_file_of_a_type_no_kind_names_is_still_not_a_regular_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pipe that fstat reports as another type (a Solaris door, 0o150000) matches none of the named kinds."""
    root = tree(tmp_path)
    os.mkfifo(root / "outer" / "pipe")
    real_fstat = os.fstat

    def door_for_a_pipe(fd):
        found = real_fstat(fd)
        if not stat.S_ISFIFO(found.st_mode):
            return found
        fields = list(found)
        fields[stat.ST_MODE] = 0o150000 | stat.S_IMODE(found.st_mode)
        return os.stat_result(fields)

    monkeypatch.setattr(os, "fstat", door_for_a_pipe)
    error = refusal(root, "outer/pipe")
    assert (error.relative, error.kind) == ("outer/pipe", "not a regular file")


def test_a_file_larger_than_one_read_comes_back_whole(tmp_path: Path) -> None:
    root = tree(tmp_path)
    data = bytes(range(256)) * (4096 * 3 + 1)  # a little over three MiB: several reads of one MiB
    (root / "outer" / "big.bin").write_bytes(data)
    assert read_regular(root, "outer/big.bin") == data
