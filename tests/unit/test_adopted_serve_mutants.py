"""The adopted serve on a fake node: which container is it, and exec_again waiting for it to run before its command."""

from __future__ import annotations

import pytest

from fake_engine import FakeEngine
from kvbake.errors import RolloutError
from kvbake.ship.adapters import adopted_serve
from kvbake.ship.core.create_spec import create_spec
from kvbake.launcher.core.launch_plan import to_main_log
from message_words import says

NAME = "vllm_node"
COMMAND = {"argv": ["python3", "-m", "vllm", "serve", "/models/m"], "env": {"HF_HUB_OFFLINE": "1"}, "cwd": "/srv/run", "user": "1000"}


class ScriptedClock:
    """Stands in for the time module: monotonic() reads the scripted readings (the last one repeats); sleep() only
    records how long it was asked to wait, then lets the node's container start when `starts_on_sleep`."""

    def __init__(self, engine: FakeEngine, readings: tuple[float, ...], starts_on_sleep: bool) -> None:
        self.engine, self.readings, self.starts_on_sleep = engine, list(readings), starts_on_sleep
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        if self.starts_on_sleep:
            self.engine.containers[NAME]["State"] = {"Running": True}


def stopped_node() -> FakeEngine:
    engine = FakeEngine("a")
    engine.containers[NAME] = {"Id": "a-1", "Name": NAME, "Config": {"Env": []}, "State": {"Running": False}}
    return engine


def clocked(monkeypatch, engine: FakeEngine, readings: tuple[float, ...], starts_on_sleep: bool) -> ScriptedClock:
    clock = ScriptedClock(engine, readings, starts_on_sleep)
    monkeypatch.setattr(adopted_serve, "time", clock)
    return clock


def test_the_command_is_execd_once_the_container_runs_with_its_environment_directory_and_user(monkeypatch):
    engine = stopped_node()
    clock = clocked(monkeypatch, engine, (100.0,), starts_on_sleep=True)
    adopted_serve.exec_again(engine, "a", NAME, COMMAND)
    assert engine.execs == [(NAME, to_main_log(COMMAND["argv"]), COMMAND["env"], "/srv/run", "1000")], "its output goes to docker logs"
    assert clock.slept == [0.2]


def test_a_container_running_exactly_at_the_deadline_is_still_waited_for(monkeypatch):
    engine = stopped_node()
    clocked(monkeypatch, engine, (0.0, adopted_serve.START_WAIT_S), starts_on_sleep=True)
    adopted_serve.exec_again(engine, "a", NAME, COMMAND)
    assert len(engine.execs) == 1


def test_a_container_that_never_starts_is_refused_naming_the_node_the_container_and_its_log(monkeypatch):
    engine = stopped_node()
    clocked(monkeypatch, engine, (0.0, adopted_serve.START_WAIT_S + 0.5), starts_on_sleep=False)
    with pytest.raises(RolloutError) as refused:
        adopted_serve.exec_again(engine, "a", NAME, COMMAND)
    assert refused.value.exit_code == RolloutError.exit_code
    assert says(refused.value.message, "node a") and says(refused.value.message, NAME) and says(refused.value.message, "30 s")
    assert says(refused.value.fix, f"docker logs {NAME}")
    assert getattr(engine, "execs", []) == []


RUNNING = {"Id": "a-2", "Name": "/vllm_node", "Config": {"Image": "spark:v5", "Env": ["HF_HUB_OFFLINE=1"], "Cmd": ["sleep", "infinity"]},
           "HostConfig": {"ShmSize": 16 * 1024 ** 3}}


def test_a_container_recreated_from_the_recorded_spec_is_the_adopted_one_whatever_its_id():
    assert adopted_serve.is_the_adopted(RUNNING, {"container_id": "a-1", "spec": create_spec(RUNNING)})


def test_no_container_or_one_of_another_spec_and_id_is_not_the_adopted_one():
    assert not adopted_serve.is_the_adopted(None, {"container_id": "a-1", "spec": create_spec(RUNNING)})
    other = {**RUNNING, "Config": {**RUNNING["Config"], "Env": ["HF_HUB_OFFLINE=0"]}}
    assert not adopted_serve.is_the_adopted(other, {"container_id": "a-1", "spec": create_spec(RUNNING)})
    assert adopted_serve.is_the_adopted(other, {"container_id": "a-2", "spec": create_spec(RUNNING)})
