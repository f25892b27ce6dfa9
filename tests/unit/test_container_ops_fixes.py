"""What the engine's refusals on named containers tell the operator to do, and the reason when stderr is empty."""

from __future__ import annotations

from python_on_whales.exceptions import DockerException

from kvbake.engines.adapters import containers as module

from message_words import says
from test_container_ops import engine_error, ops, refusal


def test_a_failed_call_points_at_the_nodes_engine():
    error = engine_error(lambda: ops(start=refusal("boom")).start("serve"))
    assert says(error.fix, "check that the node's engine is up and reachable") and says(error.message, "start serve failed (boom)")


def test_the_reason_is_stderrs_last_line_else_stdouts_else_the_exit_code():
    quiet = DockerException(["docker", "start"], 125, b"", b"")
    assert says(engine_error(lambda: ops(start=quiet).start("serve")).message, "(exit code 125)")
    on_stdout = DockerException(["docker", "start"], 1, b"first\nlast words\n", b"")
    assert says(engine_error(lambda: ops(start=on_stdout).start("serve")).message, "(last words)")


def test_an_rm_container_that_stays_says_to_look_at_the_engines_events(monkeypatch):
    monkeypatch.setattr(module, "run_cli", lambda argv: '[{"HostConfig": {"AutoRemove": true}}]')
    error = engine_error(lambda: ops().stop("serve", timeout_s=0))
    assert error.fix.startswith("check the node's engine (docker events)") and says(error.fix, "then retry")


def test_a_probe_that_cannot_run_says_the_container_must_run_and_have_python3():
    error = engine_error(lambda: ops(execute=refusal("no python3"))._probe("serve", ["c"], "its processes"))
    assert error.fix.startswith("the serving container must be running and have python3") and says(error.fix, "every vLLM image has")
