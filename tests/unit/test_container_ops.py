"""The engine's calls on named containers, over a recording stand-in of python-on-whales: the arguments each call
passes, which engine answers mean "absent" or "taken", and that every other refusal is an engine error (exit 8) naming
the engine and the call."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from python_on_whales.exceptions import DockerException, NoSuchContainer

from kvbake.engines.adapters import containers as module
from kvbake.engines.adapters.containers import ContainerOps
from kvbake.errors import EngineError


def refusal(stderr: str) -> DockerException:
    return DockerException(["docker", "x"], 1, b"", stderr.encode())


class Recorder:
    """Any call: recorded with its arguments, answered from `answers` (an exception is raised)."""

    def __init__(self, answers: dict[str, object]) -> None:
        self.answers, self.calls = answers, []

    def __getattr__(self, name: str):
        def call(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            answer = self.answers.get(name)
            if isinstance(answer, Exception):
                raise answer
            return answer(*args) if callable(answer) else answer
        return call


def ops(**answers) -> ContainerOps:
    engine = ContainerOps()
    engine.label = "unix:///node.sock"
    top = Recorder(answers)
    engine.client = SimpleNamespace(container=Recorder(answers), client_config=SimpleNamespace(docker_cmd=["docker"]),
                                    run=top.run, copy=top.copy, top=top)
    return engine


def engine_error(call) -> EngineError:
    with pytest.raises(EngineError) as caught:
        call()
    assert caught.value.exit_code == 8
    return caught.value


def test_a_marker_is_a_never_started_container_with_no_network_and_a_taken_name_is_no_marker():
    engine = ops(create=SimpleNamespace(id="c1"))
    assert engine.create_marker("img", "kvbake-lock", {"owner": "t"}) == "c1"
    assert engine.client.container.calls == [("create", ("img", ["true"]), {"name": "kvbake-lock", "labels": {"owner": "t"},
                                                                            "networks": ["none"], "pull": "never"})]
    for taken in ("Conflict. The container name is already in use", "name is already in use by container"):
        assert ops(create=refusal(taken)).create_marker("img", "kvbake-lock", {}) is None
    error = engine_error(lambda: ops(create=refusal("no space left")).create_marker("img", "kvbake-lock", {}))
    assert error.exit_code == 8 and all(field in error.message for field in ("unix:///node.sock", "kvbake-lock", "no space left"))


@pytest.mark.parametrize("stderr", ["Conflict. name in use", "Error: No such container: x", "Renaming a container with the same name as its current name"])
def test_a_rename_that_loses_a_race_or_finds_nothing_is_false(stderr):
    assert ops(rename=refusal(stderr)).rename_container("x", "y") is False


def test_a_rename_succeeds_or_fails_loudly():
    engine = ops()
    assert engine.rename_container("x", "y") is True and engine.client.container.calls == [("rename", ("x", "y"), {})]
    assert "rename x failed (permission denied)" in engine_error(lambda: ops(rename=refusal("permission denied")).rename_container("x", "y")).message


def test_inspect_is_none_for_an_absent_container_and_an_error_otherwise(monkeypatch):
    answers = {"absent": refusal("Error: No such container: absent"), "object": refusal("Error: No such object: object"),
               "broken": refusal("connection refused")}

    def cli(argv):
        name = argv[-1]
        if name in answers:
            raise answers[name]
        return '[{"Name": "/%s", "State": {"Running": true}}]' % name
    monkeypatch.setattr(module, "run_cli", cli)
    engine = ops()
    assert engine.container_inspect("serve") == {"Name": "/serve", "State": {"Running": True}}
    assert engine.container_inspect("absent") is None and engine.container_inspect("object") is None
    assert "inspect broken failed (connection refused)" in engine_error(lambda: engine.container_inspect("broken")).message


def test_running_containers_are_named_in_order():
    engine = ops(list=[SimpleNamespace(name="b"), SimpleNamespace(name="a")])
    assert engine.running_containers() == ["a", "b"]
    assert "list containers failed" in engine_error(lambda: ops(list=refusal("down")).running_containers()).message


def test_logs_read_as_empty_when_the_engine_has_none():
    engine = ops(logs=" last line \n")
    assert engine.container_log_tail("serve", 5) == "last line" and engine.client.container.calls == [("logs", ("serve",), {"tail": 5})]
    assert ops(logs=refusal("No such container")).container_log_tail("serve") == ""
    assert ops(logs="all\n").container_logs("serve") == "all\n" and ops(logs=refusal("gone")).container_logs("serve") == ""


def test_removing_is_forced_and_an_absent_container_is_fine():
    engine = ops()
    engine.remove_container("serve")
    assert engine.client.container.calls == [("remove", ("serve",), {"force": True})]
    ops(remove=refusal("Error: No such container: serve")).remove_container("serve")
    ops(remove=NoSuchContainer(["docker", "rm"], 1, b"", b"Error: No such container: serve")).remove_container("serve")
    assert "remove serve failed (device busy)" in engine_error(lambda: ops(remove=refusal("device busy")).remove_container("serve")).message


def test_a_probe_runs_once_without_network_pulling_nothing_with_read_only_paths():
    engine = ops(run="eth0\n")
    assert engine.run_probe("img", ["ip", "-o", "link"], {"/host/a": "/a"}) == "eth0\n"
    (name, args, kwargs), = engine.client.top.calls
    assert (name, args) == ("run", ("img", ["-o", "link"]))
    assert kwargs == {"entrypoint": "ip", "remove": True, "networks": ["none"], "pull": "never", "volumes": [("/host/a", "/a", "ro")]}
    ops(run="x").run_probe("img", ["ip"], {}, network="host")
    assert "probe in img failed" in engine_error(lambda: ops(run=refusal("no such image")).run_probe("img", ["ip"], {})).message


def test_stopping_an_rm_container_waits_until_the_engine_removed_it(monkeypatch):
    seen = iter(['[{"HostConfig": {"AutoRemove": true}}]', '[{"HostConfig": {"AutoRemove": true}}]', None])

    def cli(argv):
        answer = next(seen)
        if answer is None:
            raise refusal("Error: No such container: serve")
        return answer
    monkeypatch.setattr(module, "run_cli", cli)
    engine = ops()
    engine.stop("serve", timeout_s=7)
    assert engine.client.container.calls == [("stop", ("serve",), {"time": 7})]
    assert next(seen, "done") == "done", "it asked again until the container was gone"


def test_stopping_a_kept_container_does_not_wait_and_an_rm_container_that_stays_is_an_error(monkeypatch):
    monkeypatch.setattr(module, "run_cli", lambda argv: '[{"HostConfig": {"AutoRemove": false}}]')
    engine = ops()
    engine.stop("serve")
    assert engine.client.container.calls == [("stop", ("serve",), {"time": 30})]
    monkeypatch.setattr(module, "run_cli", lambda argv: '[{"HostConfig": {"AutoRemove": true}}]')
    error = engine_error(lambda: ops().stop("serve", timeout_s=0))
    assert error.message.startswith("unix:///node.sock: serve was stopped but the engine did not remove it (--rm) within 0s")


def test_exec_detached_passes_its_environment_and_leaves_unset_workdir_and_user_to_the_image():
    engine = ops()
    engine.exec_detached("node", ["vllm", "serve"], {"A": "1"}, "", "")
    engine.exec_detached("node", ["vllm"], {}, "/srv", "1000")
    assert engine.client.container.calls == [
        ("execute", ("node", ["vllm", "serve"]), {"detach": True, "envs": {"A": "1"}, "workdir": None, "user": None}),
        ("execute", ("node", ["vllm"]), {"detach": True, "envs": {}, "workdir": "/srv", "user": "1000"})]


def test_top_reads_host_pids_and_commands_and_skips_the_header(monkeypatch):
    monkeypatch.setattr(module, "run_cli", lambda argv: "PID COMMAND\n 4242 python3 -m vllm serve\nbad line\n 77 sleep infinity\n")
    assert ops().top("serve") == [(4242, "python3 -m vllm serve"), (77, "sleep infinity")]


def test_processes_of_a_container_that_runs_nothing_are_none_without_a_probe(monkeypatch):
    monkeypatch.setattr(module, "run_cli", lambda argv: "PID COMMAND\n")
    engine = ops(execute=AssertionError("no probe"))
    assert engine.processes("serve") == ()


def test_the_procfs_probe_runs_isolated_python_as_root_and_names_what_it_read():
    engine = ops(execute="out")
    assert engine._probe("serve", ["code", "arg"], "its processes") == "out"
    assert engine.client.container.calls == [("execute", ("serve", ["python3", "-I", "-S", "-c", "code", "arg"]), {"user": "0"})]
    error = engine_error(lambda: ops(execute=refusal("container not running"))._probe("serve", ["c"], "its processes"))
    assert error.exit_code == 8 and all(field in error.message for field in ("unix:///node.sock", "serve", "container not running"))


def test_the_writable_layer_changes_and_the_restart_policy_and_start():
    engine = ops(diff={"/usr/x.py": "C"})
    assert engine.changes("serve") == {"/usr/x.py": "C"}
    engine.set_restart_policy("serve", "no")
    engine.start("serve")
    assert engine.client.container.calls[1:] == [("update", ("serve",), {"restart": "no"}), ("start", ("serve",), {})]
    for call in (lambda e: e.changes("s"), lambda e: e.set_restart_policy("s", "no"), lambda e: e.start("s"),
                 lambda e: e.exec_in("s", ["x"]), lambda e: e.stop_and_rename("s", "t"), lambda e: e.rename_and_start("s", "t")):
        engine_error(lambda: call(ops(diff=refusal("x"), update=refusal("x"), start=refusal("x"), execute=refusal("x"),
                                      stop=refusal("x"), rename=refusal("x"))))


def test_setting_aside_and_bringing_back_a_kept_container():
    engine = ops()
    engine.stop_and_rename("serve", "serve-kvbake-adopted")
    engine.rename_and_start("serve-kvbake-adopted", "serve")
    assert engine.client.container.calls == [("stop", ("serve",), {}), ("rename", ("serve", "serve-kvbake-adopted"), {}),
                                             ("rename", ("serve-kvbake-adopted", "serve"), {}), ("start", ("serve",), {})]


@pytest.mark.parametrize("answer", ["{not a literal", "[1, 2]", "[{'pid': 1}]", "[{'unread': True}]"])
def test_a_process_probe_answer_that_is_no_list_of_processes_is_one_engine_error_naming_the_container(monkeypatch, answer):
    monkeypatch.setattr(module, "run_cli", lambda argv: "PID COMMAND\n 7 python3 -m vllm serve\n")
    error = engine_error(lambda: ops(execute=answer).processes("serve"))
    assert error.message.startswith("unix:///node.sock: reading its processes in serve gave an answer kvbake cannot read (")
    assert "\n" not in error.one_line() and "python3" in error.fix
