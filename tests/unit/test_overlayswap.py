"""Tests of the crash-safe overlay/ swap: a real SIGKILL after every step, recovery from every state, and refusals."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kvbake.bake.core import overlayswap
from kvbake.errors import LockError, ResourceError
from kvbake.bake.core.overlayswap import KILL_ENV, STEPS, Found, find_swap_folders, recover_overlay, recovery_steps, swap_overlay

REPO = Path(__file__).resolve().parents[2]
README = b"# overlay/\nkeep me\n"
OLD_TREE = {"pkg/mod.py": b"A = 1\n"}
NEW_TREE = {"pkg/mod.py": b"A = 2\n", "pkg/fresh/new.py": b"B = 1\n"}
OLD_LOCK, NEW_LOCK = b'{"lock": "old"}\n', b'{"lock": "new"}\n'
CHILD = ("import sys; from pathlib import Path; from kvbake.bake.core.overlayswap import swap_overlay; "
         "root = Path(sys.argv[1]); swap_overlay(root, {'pkg/mod.py': b'A = 2\\n', 'pkg/fresh/new.py': b'B = 1\\n'}, "
         "root / 'manifest.lock.json', b'{\"lock\": \"new\"}\\n')")
NEW_TAG = "0123456789abcdef-00aa11bb"
COMMITTED = "0123456789abcdef" + "0" * 48


def project(tmp_path: Path) -> Path:
    """A locked project: overlay/ with its README and the old patched file, and the old lock."""
    root = tmp_path / "project"
    for path, data in {**OLD_TREE, "README.md": README}.items():
        (root / "overlay" / path).parent.mkdir(parents=True, exist_ok=True)
        (root / "overlay" / path).write_bytes(data)
    (root / "manifest.lock.json").write_bytes(OLD_LOCK)
    return root


def overlay_files(root: Path) -> dict[str, bytes]:
    folder = root / "overlay"
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def killed_at(root: Path, step: str) -> subprocess.CompletedProcess:
    env = {**os.environ, KILL_ENV: step, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", CHILD, str(root)], env=env, cwd=REPO, capture_output=True, text=True, check=False)


def names(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


AFTER_KILL = {
    "building": ["manifest.lock.json", "overlay", "overlay.tmp.*"],
    "built": ["manifest.lock.json", "overlay", "overlay.tmp.*"],
    "staged": ["manifest.lock.json", "overlay", "overlay.new.*"],
    "lock-temp": [".manifest.lock.json.*.partial", "manifest.lock.json", "overlay", "overlay.new.*"],
    "locked": ["manifest.lock.json", "overlay", "overlay.new.*"],
    "retired": ["manifest.lock.json", "overlay.new.*", "overlay.old.*"],
    "placed": ["manifest.lock.json", "overlay", "overlay.old.*"],
    "done": ["manifest.lock.json", "overlay"],
}


def shape(root: Path) -> list[str]:
    """Folder names with their random parts replaced by *."""
    result = []
    for name in names(root):
        for prefix in ("overlay.tmp.", "overlay.new.", "overlay.old."):
            name = prefix + "*" if name.startswith(prefix) else name
        if name.startswith(".manifest.lock.json."):
            name = ".manifest.lock.json.*.partial"
        result.append(name)
    return sorted(result)


@pytest.mark.parametrize("step", STEPS)
def test_a_kill_after_any_step_is_recovered_and_the_readme_survives(step: str, tmp_path: Path) -> None:
    root = project(tmp_path)
    done = killed_at(root, step)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert shape(root) == AFTER_KILL[step]
    committed = STEPS.index(step) >= STEPS.index("locked")
    recover_overlay(root, root / "manifest.lock.json")
    assert names(root) == ["manifest.lock.json", "overlay"]
    assert (root / "manifest.lock.json").read_bytes() == (NEW_LOCK if committed else OLD_LOCK)
    assert overlay_files(root) == {**(NEW_TREE if committed else OLD_TREE), "README.md": README}
    swap_overlay(root, NEW_TREE, root / "manifest.lock.json", NEW_LOCK)
    assert names(root) == ["manifest.lock.json", "overlay"]
    assert overlay_files(root) == {**NEW_TREE, "README.md": README}


def test_a_swap_without_a_kill_replaces_the_files_and_keeps_the_readme(tmp_path: Path) -> None:
    root = project(tmp_path)
    (root / "overlay" / "pkg" / "gone.py").write_bytes(b"no longer in the chain\n")
    swap_overlay(root, NEW_TREE, root / "manifest.lock.json", NEW_LOCK)
    assert overlay_files(root) == {**NEW_TREE, "README.md": README}
    assert (root / "manifest.lock.json").read_bytes() == NEW_LOCK
    assert recover_overlay(root, root / "manifest.lock.json") == ()


def test_the_first_swap_creates_overlay_and_the_lock(tmp_path: Path) -> None:
    root = tmp_path / "fresh"
    root.mkdir()
    swap_overlay(root, NEW_TREE, root / "manifest.lock.json", NEW_LOCK)
    assert names(root) == ["manifest.lock.json", "overlay"]
    assert overlay_files(root) == NEW_TREE


@pytest.mark.parametrize("step", ["staged", "locked"])
def test_a_kill_during_the_first_swap_is_recovered(step: str, tmp_path: Path) -> None:
    root = tmp_path / "fresh"
    root.mkdir()
    assert killed_at(root, step).returncode == -signal.SIGKILL
    recover_overlay(root, root / "manifest.lock.json")
    assert names(root) == (["manifest.lock.json", "overlay"] if step == "locked" else [])


def test_recovery_removes_scratch_folders_and_lock_temporaries(tmp_path: Path) -> None:
    root = project(tmp_path)
    (root / "overlay.tmp.deadbeef" / "pkg").mkdir(parents=True)
    (root / ".manifest.lock.json.k3j2.partial").write_bytes(b'{"lock": "ha')
    (root / "overlay.backup").mkdir()
    done = recover_overlay(root, root / "manifest.lock.json")
    assert done == ("removed overlay.tmp.deadbeef", "removed .manifest.lock.json.k3j2.partial")
    assert names(root) == ["manifest.lock.json", "overlay", "overlay.backup"]


def steps_for(present: set[str], lock_sha256: str | None) -> list[tuple[str, str, str]]:
    folders = tuple(sorted(present - {"overlay"}))
    return list(recovery_steps(Found("overlay" in present, folders), lock_sha256, "manifest.lock.json"))


NEW, OLD = f"overlay.new.{NEW_TAG}", f"overlay.old.{NEW_TAG}"


@pytest.mark.parametrize("present,lock,expected", [
    ({"overlay", NEW}, COMMITTED, [("rename", "overlay", OLD), ("rename", NEW, "overlay"), ("discard", OLD, "")]),
    ({NEW, OLD}, COMMITTED, [("rename", NEW, "overlay"), ("discard", OLD, "")]),
    ({"overlay", OLD}, COMMITTED, [("discard", OLD, "")]),
    ({NEW}, COMMITTED, [("rename", NEW, "overlay")]),
    ({OLD}, COMMITTED, [("rename", OLD, "overlay")]),
    ({"overlay", NEW}, "f" * 64, [("discard", NEW, "")]),
    ({NEW, OLD}, "f" * 64, [("discard", NEW, ""), ("rename", OLD, "overlay")]),
    ({NEW, OLD}, None, [("discard", NEW, ""), ("rename", OLD, "overlay")]),
    ({"overlay.new", "overlay.old"}, COMMITTED, [("discard", "overlay.new", ""), ("rename", "overlay.old", "overlay")]),
    ({"overlay"}, COMMITTED, []),
])
def test_recovery_rolls_forward_what_the_lock_commits_and_back_the_rest(present: set[str], lock: str | None, expected: list) -> None:
    assert steps_for(present, lock) == expected


@pytest.mark.parametrize("present,lock,fragment", [
    ({"overlay", OLD}, "f" * 64, f"overlay/ and {OLD}/ both exist after an interrupted lock, and manifest.lock.json is not the lock"),
    ({"overlay", "overlay.old"}, COMMITTED, "overlay/ and overlay.old/ both exist after an interrupted lock"),
    ({"overlay", NEW, OLD}, COMMITTED, f"overlay/, {NEW}/ and {OLD}/ all exist after an interrupted lock"),
])
def test_recovery_refuses_a_state_it_cannot_resolve(present: set[str], lock: str, fragment: str) -> None:
    with pytest.raises(LockError) as caught:
        steps_for(present, lock)
    assert caught.value.exit_code == 4
    assert fragment in caught.value.one_line()
    assert caught.value.one_line().endswith("fix: keep the folder you want as overlay/ (with its README.md), delete the other, "
                                            "then run python build.py lock")


def test_recovery_on_disk_refuses_and_changes_nothing(tmp_path: Path) -> None:
    root = project(tmp_path)
    (root / OLD).mkdir()
    (root / OLD / "README.md").write_bytes(README)
    with pytest.raises(LockError) as caught:
        recover_overlay(root, root / "manifest.lock.json")
    assert caught.value.exit_code == 4
    assert all(field in caught.value.message for field in ("overlay/", f"{OLD}/", "interrupted lock", "manifest.lock.json"))
    assert "overlay/" in caught.value.fix and "build.py lock" in caught.value.fix
    assert names(root) == ["manifest.lock.json", "overlay", OLD]


def test_only_swap_folders_are_found(tmp_path: Path) -> None:
    for name in ("overlay", "overlay.new", f"overlay.old.{NEW_TAG}", "overlay.new.mine", "overlay.old.x-y", "overlays"):
        (tmp_path / name).mkdir()
    assert find_swap_folders(tmp_path) == Found(True, ("overlay.new", f"overlay.old.{NEW_TAG}"))


def test_a_patched_readme_at_the_source_root_is_refused(tmp_path: Path) -> None:
    root = project(tmp_path)
    with pytest.raises(LockError, match="the chain writes README.md at the source root, which would replace overlay/README.md"):
        swap_overlay(root, {"README.md": b"patched\n"}, root / "manifest.lock.json", NEW_LOCK)
    assert names(root) == ["manifest.lock.json", "overlay"]


def test_a_full_disk_while_writing_the_lock_leaves_everything_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path)

    def full(*_args, **_kwargs) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(root / "manifest.lock.json"))

    monkeypatch.setattr(overlayswap, "write_atomic", full)
    with pytest.raises(ResourceError) as caught:
        swap_overlay(root, NEW_TREE, root / "manifest.lock.json", NEW_LOCK)
    assert caught.value.exit_code == 10
    assert "No space left on device (manifest.lock.json)" in caught.value.one_line()
    assert "nothing was changed" in caught.value.one_line()
    assert names(root) == ["manifest.lock.json", "overlay"]
    assert overlay_files(root) == {**OLD_TREE, "README.md": README}
