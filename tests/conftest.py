"""Shared fixtures: the real engine of the selected profile (a missing engine fails in CI, never skips)."""

from __future__ import annotations

import atexit
import locale
import os
import shutil
import tempfile
from typing import Iterator

import pytest
from hypothesis import settings

from kvbake.engines.adapters.client import Engine
from kvbake.errors import EngineError, KvbakeError
from kvbake_rig.pass_order import pass_rank
from kvbake_rig.recipes import PROFILE_ENV, selected_profile

# Property tests write nothing into the repository (no .hypothesis/ folder): they keep no example database (every
# settings(...) a test module makes later inherits this profile), and Hypothesis' other caches go to a private
# temporary folder, removed at exit, unless HYPOTHESIS_STORAGE_DIRECTORY names one.
settings.register_profile("kvbake", database=None)
settings.load_profile("kvbake")
if "HYPOTHESIS_STORAGE_DIRECTORY" not in os.environ:
    os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = _HYPOTHESIS_HOME = tempfile.mkdtemp(prefix="kvbake-hypothesis-")
    atexit.register(shutil.rmtree, _HYPOTHESIS_HOME, True)

STANDIN_BASE = "kvbake-standin/vllm-base:0.33.0"
# 0.34.0: rebase's target; -ray: the real-Ray serve shapes
STANDIN_BASES = (STANDIN_BASE, STANDIN_BASE + "-arm64", "kvbake-standin/vllm-base:0.34.0", STANDIN_BASE + "-ray")


SKIP_ENV = "KVBAKE_ALLOW_DOCKER_SKIP"
SKIPPED_DOCKER: list[str] = []


def docker_required() -> bool:
    """Docker tests fail without an engine, as in CI, unless the developer asked for skips by name."""
    if os.environ.get("CI", "").lower() == "true" or os.environ.get("KVBAKE_REQUIRE_DOCKER") == "1":
        return True
    return os.environ.get(SKIP_ENV) != "1"


def pytest_report_header(config: pytest.Config) -> str:
    name = os.environ.get(PROFILE_ENV) or "the default engine (DOCKER_HOST or the local socket)"
    return f"kvbake engine profile under test: {name}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every pass in pass_rank's order (kvbake_rig/pass_order.py)."""
    items.sort(key=pass_rank)  # stable: each group keeps the collected order, so a module's tests stay together


def _fail_or_skip(message: str) -> None:
    if docker_required():
        pytest.fail(f"docker is required here but {message}; start an engine with `bash scripts/setup.sh`, "
                    f"or set {SKIP_ENV}=1 to skip the docker tests (never a pass)")
    SKIPPED_DOCKER.append(message)
    pytest.skip(message)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """Say loudly that skipped docker tests prove nothing."""
    skipped = [report for report in terminalreporter.stats.get("skipped", []) if "docker" in getattr(report, "keywords", {})]
    if SKIPPED_DOCKER or skipped:
        terminalreporter.write_sep("!", f"DOCKER TESTS SKIPPED ({SKIP_ENV}=1): this run is NOT a pass", red=True, bold=True)
        terminalreporter.write_line("the integration tests did not run; run `bash scripts/test.sh` for the real suite")


@pytest.fixture
def ascii_locale() -> Iterator[None]:
    """Switch the character locale to C (ASCII unless Python runs in UTF-8 mode), then put it back."""
    saved = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        yield
    finally:
        locale.setlocale(locale.LC_CTYPE, saved)


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
    from kvbake_rig.profile_engine import profile_engine

    with profile_engine(recipe.name, STANDIN_BASES) as target:
        profile = target.profile()
        assert profile.store == ("containerd" if recipe.containerd_store else "classic"), profile.describe()
        yield target
