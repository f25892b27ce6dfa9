"""A bare pytest without an engine fails the docker tests as CI does; skipping them must be asked for and is shouted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
A_DOCKER_TEST = "tests/integration/test_rig.py"


def run_without_engine(tmp_path: Path, **extra: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items()
           if key not in {"CI", "KVBAKE_REQUIRE_DOCKER", "KVBAKE_TEST_PROFILE", "KVBAKE_ALLOW_DOCKER_SKIP"}}
    env.update(DOCKER_HOST=f"unix://{tmp_path}/no-engine.sock", **extra)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-x", A_DOCKER_TEST],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_a_bare_pytest_without_an_engine_fails_and_names_the_fix(tmp_path):
    result = run_without_engine(tmp_path)
    assert result.returncode == 1, result.stdout[-2000:]
    assert "docker is required here but unreachable" in result.stdout
    assert "KVBAKE_ALLOW_DOCKER_SKIP=1" in result.stdout


def test_skipping_must_be_asked_for_and_is_said_loudly(tmp_path):
    result = run_without_engine(tmp_path, KVBAKE_ALLOW_DOCKER_SKIP="1")
    assert result.returncode == 0, result.stdout[-2000:]
    assert "DOCKER TESTS SKIPPED (KVBAKE_ALLOW_DOCKER_SKIP=1): this run is NOT a pass" in result.stdout
    assert " passed" not in result.stdout.splitlines()[-1]
