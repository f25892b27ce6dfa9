"""Overlay swap details the crash tests leave open: scratch names, cleanup, recovery's report and log, plans for two swaps."""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import re
from pathlib import Path

import pytest

from kvbake.bake.core import overlayswap
from kvbake.bake.core.overlayswap import Found, discard, find_swap_folders, recover_overlay, recovery_steps, stage, swap_overlay, swap_tag
from kvbake.errors import LockError
from message_words import says

README = b"# overlay/\nkeep me\n"
OLD_TREE = {"pkg/mod.py": b"A = 1\n"}
NEW_TREE = {"pkg/mod.py": b"A = 2\n"}
OLD_LOCK, NEW_LOCK = b'{"lock": "old"}\n', b'{"lock": "new"}\n'
TAG = "0123456789abcdef-00aa11bb"
SCRATCH_NAME = re.compile(r"overlay\.tmp\.[0-9a-f]{8}")


def project(tmp_path: Path) -> Path:
    """A locked project: overlay/ with its README and the old patched file, and the old lock."""
    root = tmp_path / "project"
    write_tree(root / "overlay", {**OLD_TREE, "README.md": README})
    (root / "manifest.lock.json").write_bytes(OLD_LOCK)
    return root


def write_tree(folder: Path, tree: dict[str, bytes]) -> None:
    for path, data in tree.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(data)


def names(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


def overlay_files(root: Path) -> dict[str, bytes]:
    folder = root / "overlay"
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_discarded_folder_first_becomes_scratch_with_an_eight_hex_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "overlay.old").mkdir()
    monkeypatch.setattr(overlayswap, "_remove", lambda folder: None)  # stop right after the rename to scratch
    discard(tmp_path / "overlay.old")
    [left] = names(tmp_path)
    assert SCRATCH_NAME.fullmatch(left), left


def test_staging_builds_in_scratch_with_an_eight_hex_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built_in = []
    monkeypatch.setattr(overlayswap, "fsync_tree", lambda folder: built_in.append(folder.name))
    staged = stage(tmp_path, NEW_TREE, "overlay.new")
    assert staged == tmp_path / "overlay.new"
    assert len(built_in) == 1 and SCRATCH_NAME.fullmatch(built_in[0]), built_in


def test_a_tree_that_cannot_be_written_leaves_no_scratch_and_changes_nothing(tmp_path: Path) -> None:
    root = project(tmp_path)
    with pytest.raises(LockError) as caught:
        swap_overlay(root, {"pkg": b"a file", "pkg/mod.py": b"A = 2\n"}, root / "manifest.lock.json", NEW_LOCK)
    assert says(caught.value.fix, "nothing was changed")
    assert names(root) == ["manifest.lock.json", "overlay"]
    assert (root / "manifest.lock.json").read_bytes() == OLD_LOCK


def test_a_failure_after_scratch_was_renamed_reports_that_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def renamed_then_failed(source: Path, target: Path) -> None:
        os.rename(source, target)
        raise OSError(errno.EIO, "Input/output error", str(target))

    monkeypatch.setattr(overlayswap, "rename_durably", renamed_then_failed)
    with pytest.raises(OSError) as caught:
        stage(tmp_path, NEW_TREE, "overlay.new")
    assert caught.value.errno == errno.EIO
    assert names(tmp_path) == ["overlay.new"]


def test_a_failed_rename_after_the_lock_is_written_says_to_finish_with_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path)
    real_rename = overlayswap.rename_durably

    def retiring_fails(source: Path, target: Path) -> None:
        if target.name.startswith("overlay.old"):
            raise OSError(errno.EIO, "Input/output error", str(target))
        real_rename(source, target)

    monkeypatch.setattr(overlayswap, "rename_durably", retiring_fails)
    with pytest.raises(LockError) as caught:
        swap_overlay(root, NEW_TREE, root / "manifest.lock.json", NEW_LOCK)
    assert says(caught.value.fix, "the new lock is written")
    assert not says(caught.value.fix, "nothing was changed")
    assert (root / "manifest.lock.json").read_bytes() == NEW_LOCK


def test_the_refusal_of_a_patched_readme_tells_to_move_overlays_readme_aside(tmp_path: Path) -> None:
    root = project(tmp_path)
    with pytest.raises(LockError) as caught:
        swap_overlay(root, {"README.md": b"patched\n"}, root / "manifest.lock.json", NEW_LOCK)
    assert says(caught.value.fix, "overlay/README.md")
    assert says(caught.value.fix, "rename the patched file")


def test_a_missing_project_folder_has_no_swap_folders(tmp_path: Path) -> None:
    assert find_swap_folders(tmp_path / "missing") == Found(False, ())


@pytest.mark.parametrize(("name", "tag"), [
    (f"overlay.new.{TAG}", TAG), (f"overlay.old.{TAG}", TAG), ("overlay.new", ""), ("overlay.old", ""),
    ("overlay.backup", ""), ("overlay.new.mine", ""), ("README.md", ""),
])
def test_only_a_tagged_swap_folder_has_a_tag(name: str, tag: str) -> None:
    assert swap_tag(name) == tag


def test_a_rolled_back_swap_restores_overlay_before_a_committed_swap_is_rolled_forward() -> None:
    committed = "0123456789abcdef" + "0" * 48
    new, old = f"overlay.new.{TAG}", f"overlay.old.{TAG}"
    steps = recovery_steps(Found(False, ("overlay.old", new)), committed, "manifest.lock.json")
    assert steps == (
        ("rename", "overlay.old", "overlay"),
        ("rename", "overlay", old), ("rename", new, "overlay"), ("discard", old, ""),
    )


def test_recovery_reports_and_logs_every_rename_and_removal(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "project"
    tag = f"{hashlib.sha256(NEW_LOCK).hexdigest()[:16]}-00aa11bb"
    write_tree(root / f"overlay.new.{tag}", {**NEW_TREE, "README.md": README})
    write_tree(root / f"overlay.old.{tag}", {**OLD_TREE, "README.md": README})
    (root / "manifest.lock.json").write_bytes(NEW_LOCK)
    with caplog.at_level(logging.WARNING, logger=overlayswap.__name__):
        done = recover_overlay(root, root / "manifest.lock.json")
    assert done == (f"renamed overlay.new.{tag}/ to overlay/", f"removed overlay.old.{tag}/")
    assert names(root) == ["manifest.lock.json", "overlay"]
    assert overlay_files(root) == {**NEW_TREE, "README.md": README}
    logged = [record.getMessage() for record in caplog.records if record.name == overlayswap.__name__]
    assert len(logged) == len(done)
    for message, line in zip(logged, done):
        assert says(message, "recovered an interrupted lock") and says(message, line), message
