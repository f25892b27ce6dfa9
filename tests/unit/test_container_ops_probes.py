"""The engine's calls that recreate a recorded container, copy files in, and probe a container's processes and imports."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from kvbake.engines.adapters import containers as module
from kvbake.engines.core.procfs import ORIGINS, PROCESSES, PROBE_MARK, ImportOrigin, Process, origins_request

from message_words import says
from test_container_ops import engine_error, ops, refusal

SERVE = Process(7, 1, ("python3", "-m", "vllm"), {"A": "1", "B": "x=y"}, "/srv", "/usr/bin/python3")


def test_a_recorded_spec_is_created_again_under_its_name_never_pulled_and_detached():
    engine = ops(run=SimpleNamespace(id="new1"))
    spec = {"image": "sha256:" + "a" * 64, "config": {"Cmd": ["serve"], "Tty": True}}
    assert engine.recreate(spec, "vllm-serve") == "new1"
    assert engine.client.container.calls == [("run", ("sha256:" + "a" * 64, ["serve"]),
                                              {"detach": True, "name": "vllm-serve", "pull": "never", "tty": True, "interactive": False, "healthcheck": True,
                                               "privileged": False, "remove": False, "init": False, "oom_kill": True, "read_only": False,
                                               "publish_all": False})]
    error = engine_error(lambda: ops(run=refusal("name in use")).recreate(spec, "vllm-serve"))
    assert says(error.message, "create vllm-serve from its recorded spec failed (name in use)")


def test_files_are_copied_into_a_containers_folder():
    engine = ops()
    engine.copy_in(Path("/tmp/state"), "kvbake-state", "/")
    assert engine.client.top.calls == [("copy", ("/tmp/state", ("kvbake-state", "/")), {})]
    error = engine_error(lambda: ops(copy=refusal("no such container")).copy_in(Path("/x"), "kvbake-state", "/"))
    assert says(error.message, "copy into kvbake-state failed (no such container)")


def test_the_processes_of_a_running_container_are_read_by_the_procfs_probe(monkeypatch):
    monkeypatch.setattr(module, "run_cli", lambda argv: "PID COMMAND\n 4242 python3 -m vllm\n")
    answer = repr([{"pid": 7, "ppid": 1, "uid": 0, "argv": ["python3", "-m", "vllm"], "env": ["A=1", "B=x=y"], "cwd": "/srv",
                    "exe": "/usr/bin/python3"}])
    engine = ops(execute=answer)
    assert engine.processes("serve") == (SERVE,)
    assert engine.client.container.calls == [("execute", ("serve", ["python3", "-I", "-S", "-c", PROCESSES, PROBE_MARK]), {"user": "0"})]


def test_where_each_process_imports_vllm_from_is_asked_once_for_all_and_never_for_none():
    engine = ops(execute="[{'origin': '/srv/vllm/__init__.py', 'path': ['/srv']}]")
    assert engine.import_origins("serve", [SERVE], ["/srv"]) == (ImportOrigin("/srv/vllm/__init__.py", ("/srv",)),)
    assert engine.client.container.calls == [("execute", ("serve", ["python3", "-I", "-S", "-c", ORIGINS, origins_request([SERVE], ["/srv"])]),
                                              {"user": "0"})]
    silent = ops(execute=AssertionError("no probe"))
    assert silent.import_origins("serve", [], []) == ()
    error = engine_error(lambda: ops(execute=refusal("exited")).import_origins("serve", [SERVE], ["-"]))
    assert says(error.message, "reading where its processes import vllm from in serve failed (exited)")


def test_the_origins_request_names_each_processs_interpreter_environment_folder_and_first_path():
    assert origins_request([SERVE], ["-"]) == repr([{"exe": "/usr/bin/python3", "env": ["A=1", "B=x=y"], "cwd": "/srv", "first": "-"}])
