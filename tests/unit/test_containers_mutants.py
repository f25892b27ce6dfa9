"""The engine's container lookups by label, the device-path probe, and the process probe read again as each unread user."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

from kvbake.engines.adapters import containers as module
from kvbake.engines.core.procfs import PROBE_MARK, PROCESSES, Process

from message_words import says
from test_container_ops import engine_error, ops, refusal


def test_containers_carrying_a_label_are_listed_running_or_not_by_name_in_order():
    engine = ops(list=[SimpleNamespace(name="kvbake-lock-b"), SimpleNamespace(name="kvbake-lock-a")])
    assert engine.containers_labelled("org.kvbake.lock") == ["kvbake-lock-a", "kvbake-lock-b"]
    assert engine.client.container.calls == [("list", (), {"all": True, "filters": [("label", "org.kvbake.lock")]})]


def test_a_refused_listing_by_label_is_an_engine_error_naming_the_call_and_the_reason():
    error = engine_error(lambda: ops(list=refusal("daemon down")).containers_labelled("org.kvbake.lock"))
    assert says(error.message, "list containers") and says(error.message, "daemon down")


def run_in_container(calls):
    """docker exec stand-in: runs the probe's python code with this host's interpreter, as the container's own would."""
    def execute(container, argv, user):
        calls.append((container, argv, user))
        assert argv[:4] == ["python3", "-I", "-S", "-c"]
        return subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, check=True).stdout
    return execute


def test_the_device_probe_names_only_the_paths_that_exist_in_the_container(tmp_path):
    present, missing = tmp_path / "infiniband", tmp_path / "nvidia-caps"
    present.mkdir()
    calls = []
    engine = ops()
    engine.client.container = SimpleNamespace(execute=run_in_container(calls))
    assert engine.existing_paths("serve", [str(missing), str(present)]) == (str(present),)
    [(container, argv, user)] = calls
    assert container == "serve" and argv[-2:] == [str(missing), str(present)] and user == "0"


def test_the_device_probe_keeps_only_lines_that_are_paths_asked_for():
    engine = ops(execute="/dev/infiniband\nwarning: something\n")
    assert engine.existing_paths("serve", ["/dev/infiniband", "/dev/nvidia0"]) == ("/dev/infiniband",)


def test_a_failed_device_probe_says_what_it_read_and_in_which_container():
    error = engine_error(lambda: ops(execute=refusal("container not running")).existing_paths("serve", ["/dev/infiniband"]))
    assert says(error.message, "which device paths it has") and says(error.message, "serve")


ROOT_VIEW = repr([{"pid": 1, "ppid": 0, "uid": 0, "argv": ["sleep", "infinity"], "env": [], "cwd": "/", "exe": "/bin/sleep"},
                  {"pid": 7, "uid": 1000, "unread": True}])
USER_VIEW = repr([{"pid": 7, "ppid": 1, "uid": 1000, "argv": ["python3", "-m", "vllm"], "env": ["A=1"], "cwd": "/srv",
                   "exe": "/usr/bin/python3"}])


class ProbeByUser:
    """docker exec stand-in answering the procfs probe as the user it runs as; a user in `refused` is refused."""

    def __init__(self, refused=()):
        self.calls, self.refused = [], refused

    def execute(self, container, argv, user):
        self.calls.append((container, argv, user))
        if user in self.refused:
            raise refusal("permission denied")
        return ROOT_VIEW if user == "0" else USER_VIEW


def test_a_process_root_cannot_read_is_read_again_as_its_own_user_and_merged(monkeypatch):
    monkeypatch.setattr(module, "run_cli", lambda argv: "PID COMMAND\n 4242 sleep infinity\n")
    probe = ProbeByUser()
    engine = ops()
    engine.client.container = probe
    assert engine.processes("serve") == (Process(1, 0, ("sleep", "infinity"), {}, "/", "/bin/sleep", 0),
                                         Process(7, 1, ("python3", "-m", "vllm"), {"A": "1"}, "/srv", "/usr/bin/python3", 1000))
    argv = ["python3", "-I", "-S", "-c", PROCESSES, PROBE_MARK]
    assert probe.calls == [("serve", argv, "0"), ("serve", argv, "1000")]


def test_a_refused_probe_as_the_processes_own_user_says_what_it_read(monkeypatch):
    monkeypatch.setattr(module, "run_cli", lambda argv: "PID COMMAND\n 4242 sleep infinity\n")
    engine = ops()
    engine.client.container = ProbeByUser(refused=("1000",))
    error = engine_error(lambda: engine.processes("serve"))
    assert says(error.message, "its processes") and says(error.message, "serve") and says(error.message, "permission denied")
