"""`lock` killed (SIGKILL) after every step of the overlay/ swap, on the real engine: the next `lock` recovers, and
overlay/ ends complete with its README.md, the lock matches it, and no temporary folder or file is left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kvbake.digests import sha256_hex
from kvbake.lock import read_lock
from kvbake.manifest import load_manifest
from kvbake.bake.core.overlayswap import KILL_ENV, STEPS
from kvbake.bake.core.plan import read_overlay

from conftest import leftover_containers, run
from tiny import MOD_V2, MOD_V3, NEW, diff

# The overlay/ swap and its recovery are this host's file operations: the default engine runs them, not every profile.
pytestmark = [pytest.mark.docker, pytest.mark.default_engine_only]
REPO = Path(__file__).resolve().parents[2]
README = "# overlay/\n\nWritten by python build.py lock; kept across every lock.\n"
NEW_V2 = NEW + "\nVERSION = 2\n"


def change_the_chain(manifest: Path) -> None:
    """A new version of the feature patch, so the killed lock has a different lock and overlay to write."""
    patch = manifest.with_name("patches") / "0002-new-module.patch"
    patch.write_text(diff("pkg/mod.py", MOD_V2, MOD_V3) + diff("pkg/new.py", None, NEW_V2))


def lock_killed_at(manifest: Path, step: str) -> subprocess.CompletedProcess:
    env = {**os.environ, KILL_ENV: step, "TMPDIR": tempfile.gettempdir()}
    return subprocess.run([sys.executable, "build.py", "lock", "--manifest", str(manifest)], cwd=REPO, env=env,
                          capture_output=True, text=True, check=False)


def assert_locked_and_complete(manifest_path: Path) -> None:
    """overlay/ holds exactly the locked files (by hash) and the README; nothing else lies beside it."""
    root = manifest_path.parent
    manifest = load_manifest(manifest_path)
    lock = read_lock(manifest)
    shipped = read_overlay(manifest, lock)
    assert {path: sha256_hex(data) for path, data in shipped.items()} == {f.path: f.overlay_sha256 for f in lock.files}
    assert shipped["pkg/new.py"] == NEW_V2.encode()
    on_disk = sorted(p.relative_to(root / "overlay").as_posix() for p in (root / "overlay").rglob("*") if p.is_file())
    assert on_disk == sorted([f.path for f in lock.files] + ["README.md"])
    assert (root / "overlay" / "README.md").read_text() == README
    assert sorted(p.name for p in root.iterdir()) == ["manifest.lock.json", "manifest.yaml", "overlay", "patches"]
    assert list(Path(tempfile.gettempdir()).iterdir()) == []


@pytest.mark.parametrize("step", STEPS)
def test_lock_killed_after_a_step_is_recovered_by_the_next_lock(capsys, engine, tiny, step):
    (tiny.with_name("overlay") / "README.md").write_text(README)
    change_the_chain(tiny)
    killed = lock_killed_at(tiny, step)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    code, _, err = run(capsys, "lock", "--manifest", str(tiny))
    assert code == 0, err
    assert_locked_and_complete(tiny)
    assert leftover_containers(engine) == []


def test_a_build_between_the_kill_and_the_next_lock_names_the_fix(capsys, engine, tiny):
    (tiny.with_name("overlay") / "README.md").write_text(README)
    change_the_chain(tiny)
    assert lock_killed_at(tiny, "retired").returncode == -signal.SIGKILL
    code, _, err = run(capsys, "plan", "--manifest", str(tiny))
    assert code == 7 and err.count("\n") == 1, err
    assert "overlay/pkg/mod.py is missing; fix: run python build.py lock" in err
    assert run(capsys, "lock", "--manifest", str(tiny))[0] == 0
    assert_locked_and_complete(tiny)
