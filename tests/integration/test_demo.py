"""The demo works on a copy of the stand-in example: after its bake half, the checkout is as it was (git status)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.default_engine_only]  # engine-independent: the default engine is enough
REPO = Path(__file__).resolve().parents[2]


def git_status() -> str:
    return subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=all"],
                          capture_output=True, text=True, check=True).stdout


def test_the_demos_bake_half_leaves_the_checkout_clean(tmp_path: Path) -> None:
    before = git_status()
    env = {**os.environ, "KVBAKE_DEMO_DIR": str(tmp_path / "demo")}
    done = subprocess.run(["bash", str(REPO / "scripts" / "demo_standin.sh")], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=1800, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "verified" in done.stdout and "stand-in image" in done.stdout, done.stdout[-3000:]
    work = tmp_path / "demo" / "standin"
    assert (work / "manifest.lock.json").is_file() and (work / "configs" / "control" / "ranks.env").is_file()
    assert git_status() == before
