"""The doctor's report: one line per check with its fix, and the run's error is the first failure's, kind and fix."""

from __future__ import annotations

import pytest

from kvbake.operate.adapters.doctor import FAIL, OK, Check, checked, first_failure
from kvbake.errors import BaseImageError, KvbakeError, RegistryError


def test_a_probe_that_answers_is_an_ok_line() -> None:
    check = checked("engine", lambda: "docker-26.1-classic")
    assert check == Check("engine", OK, "docker-26.1-classic") and check.line() == "ok    engine                 docker-26.1-classic"


def test_a_probe_that_raises_is_a_fail_line_with_the_fix() -> None:
    def probe() -> str:
        raise RegistryError("registry r:5000 is unreachable", "start the registry")

    check = checked("registry", probe)
    assert check.verdict == FAIL and check.line() == "FAIL  registry               registry r:5000 is unreachable; fix: start the registry"


def test_the_first_failure_decides_the_kind_and_counts_the_others() -> None:
    checks = [Check("engine", OK, "fine"), Check("base on a", FAIL, "a lacks b", BaseImageError("a lacks b", "run base sync")),
              Check("registry", FAIL, "down", RegistryError("down", "start it"))]
    error = first_failure(checks)
    assert type(error) is BaseImageError and error.exit_code == 6
    assert error.one_line() == ("doctor: 2 of 3 checks failed (the FAIL lines above); the first, base on a, gives the exit code; "
                                "fix: do what each FAIL line's fix says, then run doctor again")
    assert first_failure(checks[:1]) is None


def test_the_summary_does_not_repeat_the_first_fail_line() -> None:
    failing = Check("node b", FAIL, "unix:///b.sock is unreachable (refused)", RegistryError("unix:///b.sock is unreachable (refused)", "bring it up"))
    error = first_failure([Check("engine", OK, "fine"), failing])
    assert failing.seen not in error.one_line() and "bring it up" not in error.one_line()
    assert error.one_line().startswith("doctor: 1 of 2 checks failed (the FAIL lines above)")


def test_a_programming_error_in_a_probe_is_not_swallowed() -> None:
    with pytest.raises(ZeroDivisionError):
        checked("bad", lambda: str(1 / 0))
    assert issubclass(BaseImageError, KvbakeError)
