"""The engine's calls on named containers pass the container and arguments asked for, and each refusal names its call."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kvbake.engines.adapters import containers as module

from message_words import says
from test_container_ops import engine_error, ops, refusal


def test_top_asks_the_engine_for_pid_and_args_of_the_named_container(monkeypatch):
    asked = []
    monkeypatch.setattr(module, "run_cli", lambda argv: asked.append(argv) or "PID COMMAND\n 7 sleep infinity\n")
    assert ops().top("serve") == [(7, "sleep infinity")]
    assert asked == [["docker", "container", "top", "serve", "-eo", "pid,args"]]
    monkeypatch.setattr(module, "run_cli", lambda argv: (_ for _ in ()).throw(refusal("not running")))
    assert says(engine_error(lambda: ops().top("serve")).message, "top of serve failed (not running)")


def test_exec_in_runs_the_argv_in_the_named_container_and_returns_its_output():
    engine = ops(execute="out\n")
    assert engine.exec_in("serve", ["cat", "/etc/hostname"]) == "out\n"
    assert engine.client.container.calls == [("execute", ("serve", ["cat", "/etc/hostname"]), {})]


def test_the_writable_layer_of_the_named_container_and_its_logs_are_asked_of_it():
    engine = ops(diff={"/x": "A"}, logs="line\n")
    engine.changes("serve")
    engine.container_logs("serve")
    engine.container_log_tail("serve")
    assert engine.client.container.calls == [("diff", ("serve",), {}), ("logs", ("serve",), {}), ("logs", ("serve",), {"tail": 3})]


@pytest.mark.parametrize(("call", "words"), [
    (lambda e: e.changes("s"), "diff of s failed (x)"),
    (lambda e: e.set_restart_policy("s", "no"), "update the restart policy of s failed (x)"),
    (lambda e: e.start("s"), "start s failed (x)"),
    (lambda e: e.exec_in("s", ["x"]), "exec in s failed (x)"),
    (lambda e: e.exec_detached("s", ["x"], {}, None, None), "exec in s failed (x)"),
    (lambda e: e.stop_and_rename("s", "t"), "stop and rename s failed (x)"),
    (lambda e: e.rename_and_start("s", "t"), "rename and start s failed (x)"),
], ids=["changes", "restart-policy", "start", "exec-in", "exec-detached", "stop-and-rename", "rename-and-start"])
def test_each_refusal_names_its_call_the_container_and_the_reason(call, words):
    engine = ops(diff=refusal("x"), update=refusal("x"), start=refusal("x"), execute=refusal("x"), stop=refusal("x"), rename=refusal("x"))
    error = engine_error(lambda: call(engine))
    assert says(error.message, words) and says(error.message, "unix:///node.sock")


def test_inspect_and_stop_ask_about_the_named_container_and_a_failed_stop_is_named(monkeypatch):
    asked = []
    monkeypatch.setattr(module, "run_cli", lambda argv: asked.append(argv) or '[{"HostConfig": {"AutoRemove": false}}]')
    engine = ops()
    engine.stop("serve", timeout_s=5)
    assert asked == [["docker", "container", "inspect", "serve"]]
    error = engine_error(lambda: ops(stop=refusal("timeout")).stop("serve"))
    assert says(error.message, "stop serve failed (timeout)")


def test_the_wait_for_removal_asks_about_the_named_container(monkeypatch):
    answers = iter(['[{"HostConfig": {"AutoRemove": true}}]', None])
    asked = []

    def cli(argv):
        asked.append(argv)
        answer = next(answers)
        if answer is None:
            raise refusal("Error: No such container: serve")
        return answer
    monkeypatch.setattr(module, "run_cli", cli)
    ops().stop("serve")
    assert asked == [["docker", "container", "inspect", "serve"]] * 2


def test_the_process_probe_is_for_the_named_running_container_and_its_failure_says_what_it_read(monkeypatch):
    asked = []
    monkeypatch.setattr(module, "run_cli", lambda argv: asked.append(argv) or "PID COMMAND\n 1 sleep\n")
    error = engine_error(lambda: ops(execute=refusal("gone")).processes("serve"))
    assert asked == [["docker", "container", "top", "serve", "-eo", "pid,args"]]
    assert says(error.message, "reading its processes in serve failed (gone)")


def test_the_wait_for_removal_polls_every_tenth_of_a_second_until_just_past_its_deadline(monkeypatch):
    answers = iter(['[{"HostConfig": {"AutoRemove": true}}]', '[{"HostConfig": {}}]', None])

    def cli(argv):
        answer = next(answers)
        if answer is None:
            raise refusal("Error: No such container: serve")
        return answer
    clock = iter([100.0, 105.0])
    slept = []
    monkeypatch.setattr(module, "run_cli", cli)
    monkeypatch.setattr(module, "time", SimpleNamespace(monotonic=lambda: next(clock), sleep=slept.append))
    ops().stop("serve", timeout_s=5)
    assert slept == [0.1], "at the deadline itself it still waits once more"
