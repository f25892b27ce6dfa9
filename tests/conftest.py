"""Shared fixtures: the real engine (a missing engine fails in CI, never skips) and small project builders."""

from __future__ import annotations

import os

import pytest

from kvbake.engine import Engine
from kvbake.errors import EngineError


def docker_required() -> bool:
    return os.environ.get("CI", "").lower() == "true" or os.environ.get("KVBAKE_REQUIRE_DOCKER") == "1"


@pytest.fixture(scope="session")
def engine() -> Engine:
    """The local engine; in CI an unreachable engine fails the run instead of skipping."""
    local = Engine()
    try:
        local.ping()
    except EngineError as err:
        if docker_required():
            pytest.fail(f"docker is required here but unreachable: {err.one_line()}")
        pytest.skip(f"no docker engine: {err.one_line()}")
    return local
