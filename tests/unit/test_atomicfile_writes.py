"""atomicfile: a write lands whole or not at all, leaves no temporary file behind, and finds an interrupted one's leftovers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvbake.atomicfile import fsync_folder, fsync_tree, partial_files, rename_durably, write_atomic


class Interrupted(BaseException):
    """Stands for a kill between the complete temporary file and its rename."""


def test_a_write_creates_missing_folders_and_replaces_the_old_bytes(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "record.json"
    write_atomic(target, b"first")
    write_atomic(target, b"second")
    assert target.read_bytes() == b"second"
    assert sorted(p.name for p in target.parent.iterdir()) == ["record.json"]


def test_the_temporary_file_is_complete_and_hidden_beside_the_target_before_the_rename(tmp_path: Path) -> None:
    target = tmp_path / "record.json"
    seen: list[tuple[str, bytes]] = []
    write_atomic(target, b"data", before_rename=lambda: seen.extend((p.name, p.read_bytes()) for p in partial_files(target)))
    ((name, data),) = seen
    assert name.startswith(".record.json.") and name.endswith(".partial") and data == b"data"
    assert partial_files(target) == []


def test_an_interrupted_write_keeps_the_old_bytes_and_removes_its_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "record.json"
    write_atomic(target, b"old")

    def die() -> None:
        raise Interrupted()

    with pytest.raises(Interrupted):
        write_atomic(target, b"new", before_rename=die)
    assert target.read_bytes() == b"old" and partial_files(target) == []


def test_leftovers_of_a_killed_write_are_found_and_nothing_else(tmp_path: Path) -> None:
    target = tmp_path / "record.json"
    assert partial_files(tmp_path / "absent" / "record.json") == []
    for name in (".record.json.b1.partial", ".record.json.a2.partial", ".other.json.c3.partial", "record.json.partial"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / ".record.json.dir.partial").mkdir()
    assert [p.name for p in partial_files(target)] == [".record.json.a2.partial", ".record.json.b1.partial"]


def test_a_folder_is_synced_and_a_file_is_not_a_folder(tmp_path: Path) -> None:
    assert fsync_folder(tmp_path) is None
    (tmp_path / "plain").write_bytes(b"x")
    with pytest.raises(NotADirectoryError):
        fsync_folder(tmp_path / "plain")


def test_a_whole_tree_is_synced(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "one").write_bytes(b"1")
    (tmp_path / "a" / "b" / "two").write_bytes(b"2")
    assert fsync_tree(tmp_path) is None
    assert (tmp_path / "a" / "b" / "two").read_bytes() == b"2"


def test_a_durable_rename_moves_the_file(tmp_path: Path) -> None:
    (tmp_path / "old").write_bytes(b"x")
    rename_durably(tmp_path / "old", tmp_path / "new")
    assert [p.name for p in tmp_path.iterdir()] == ["new"]


def test_every_file_and_folder_of_a_tree_is_synced_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "one").write_bytes(b"1")
    (tmp_path / "a" / "b" / "two").write_bytes(b"2")
    synced: list[int] = []
    real_fsync = os.fsync

    def recording_fsync(handle: int) -> None:
        synced.append(os.fstat(handle).st_ino)
        real_fsync(handle)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    fsync_tree(tmp_path)
    every = [tmp_path, tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "one", tmp_path / "a" / "b" / "two"]
    assert sorted(synced) == sorted(p.stat().st_ino for p in every)


def test_an_interruption_after_the_temporary_file_was_cleaned_away_still_propagates(tmp_path: Path) -> None:
    target = tmp_path / "record.json"

    def cleaned_then_killed() -> None:
        for leftover in partial_files(target):
            leftover.unlink()
        raise Interrupted()

    with pytest.raises(Interrupted):
        write_atomic(target, b"new", before_rename=cleaned_then_killed)
    assert not target.exists() and partial_files(target) == []
