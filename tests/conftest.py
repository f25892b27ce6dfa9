"""Shared fixtures: the real engine of the selected profile (a missing engine fails in CI, never skips)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from kvbake.engine import Engine
from kvbake.errors import EngineError, KvbakeError
from kvbake.rig.recipes import PROFILE_ENV, selected_profile

STANDIN_BASE = "kvbake-standin/vllm-base:0.33.0"
STANDIN_BASES = (STANDIN_BASE, STANDIN_BASE + "-arm64")


def docker_required() -> bool:
    return os.environ.get("CI", "").lower() == "true" or os.environ.get("KVBAKE_REQUIRE_DOCKER") == "1"


def pytest_report_header(config: pytest.Config) -> str:
    name = os.environ.get(PROFILE_ENV) or "the default engine (DOCKER_HOST or the local socket)"
    return f"kvbake engine profile under test: {name}"


def _fail_or_skip(message: str) -> None:
    if docker_required():
        pytest.fail(f"docker is required here but {message}")
    pytest.skip(message)


def _copy_standin_bases(default: Engine, target: Engine) -> None:
    """Give the profile's engine the stand-in bases by save | load: their config digests stay the same."""
    for base in STANDIN_BASES:
        if target.inspect_image(base) is None and default.inspect_image(base) is not None:
            target.client.image.load(default.client.image.save(base))


@pytest.fixture(scope="session")
def engine() -> Iterator[Engine]:
    """The engine under test. With $KVBAKE_TEST_PROFILE set, a private engine of that profile is started for the
    session, DOCKER_HOST points every command at it, and it gets the stand-in base from the default engine."""
    try:
        recipe = selected_profile()
    except KvbakeError as err:
        _fail_or_skip(f"its profile is unavailable: {err.one_line()}")
    if recipe is None:
        local = Engine()
        try:
            local.ping()
        except EngineError as err:
            _fail_or_skip(f"unreachable: {err.one_line()}")
        yield local
        return
    from kvbake.rig import NodeEngine

    root = Path(tempfile.mkdtemp(prefix="kvbake-build-engine-"))
    with NodeEngine(root / "engine", name="build", recipe=recipe) as build_engine, pytest.MonkeyPatch.context() as patch:
        patch.setenv("DOCKER_HOST", build_engine.host)
        target = Engine()
        profile = target.profile()
        assert profile.name.startswith(recipe.name.rsplit("-", 1)[0]) and profile.store == ("containerd" if recipe.containerd_store else "classic")
        _copy_standin_bases(Engine("unix:///var/run/docker.sock"), target)
        yield target
    root.rmdir()
