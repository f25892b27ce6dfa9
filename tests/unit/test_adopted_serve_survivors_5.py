"""Bringing an adopted serve back: its Ray node is exec'd again and waited for before its vLLM, its secrets are back in a recreated container, and its recorded restart policy wins."""

from __future__ import annotations

import dataclasses

import pytest

from fake_engine import FakeEngine
from kvbake.errors import RolloutError
from kvbake.ship.adapters import adopted_serve
from kvbake.ship.core.create_spec import create_spec
from kvbake.ship.core.release import Release
from kvbake.launcher.core.launch_plan import to_main_log

from message_words import says

NAME = "vllm_node"
KEPT = "vllm_node-kvbake-adopted"
RAY = {"argv": ["ray", "start", "--head", "--block"], "env": {"RAY_ROLE": "head"}, "cwd": "/ray", "user": "1000"}
VLLM = {"argv": ["vllm", "serve", "m"], "env": {"ROLE": "serve"}, "cwd": "/srv", "user": None}


class ExecRecordingEngine(FakeEngine):
    """A fake engine that keeps every docker exec with the container it went to and whether it was waited for."""

    def exec_detached(self, container, argv, env, workdir, user, wait="unset"):
        super().exec_detached(container, argv, env, workdir, user)
        self.runs = [*getattr(self, "runs", []), (container, list(argv), dict(env), workdir, user, wait)]


class NeverStartingEngine(ExecRecordingEngine):
    """A fake engine whose containers never come up when started."""

    def start(self, container):
        self._up()


class FastClock:
    """Stands in for the time module: each sleep moves the clock on, so a wait for a start times out at once."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += 100.0


def adopted_release(engine: FakeEngine, **extra) -> Release:
    container = engine.containers[NAME]
    info = {"container_id": container["Id"], "kept_as": KEPT, "name": NAME, "spec": create_spec(container), **extra}
    return Release(image="base:1", config_digest="sha256:c", layers=(), labels={}, preset="adopted", switches={"S": "3"},
                   max_model_len=4096, launcher_args=(), deployed_by="t", deployed_at="now", reason="adopt", override=None,
                   adopted=info)


def stopped_exec_serve(engine_type=ExecRecordingEngine) -> FakeEngine:
    """A node whose adopted serve (a Ray node whose vLLM is exec'd beside it) is stopped under its own name."""
    engine = engine_type("a")
    engine.tags["base:1"] = "sha256:base"
    engine.run_serving(NAME, "base:1", ["S=3"], main=("sleep", "infinity"))
    engine.containers[NAME]["State"] = {"Running": False}
    return engine


@pytest.fixture(autouse=True)
def fast_clock(monkeypatch: pytest.MonkeyPatch) -> FastClock:
    clock = FastClock()
    monkeypatch.setattr(adopted_serve, "time", clock)
    return clock


def test_the_ray_node_is_exec_d_again_and_waited_for_before_vllm_is_exec_d_detached():
    engine = stopped_exec_serve()
    adopted = adopted_release(engine, ray_exec=RAY, exec=VLLM)
    adopted_serve.bring_back(engine, "a", adopted, NAME, NAME)
    assert engine.containers[NAME]["State"]["Running"] is True
    assert engine.runs == [
        (NAME, RAY["argv"], RAY["env"], "/ray", "1000", True),
        (NAME, to_main_log(VLLM["argv"]), VLLM["env"], "/srv", None, False),  # its output to docker logs
    ]
    assert type(engine.runs[0][-1]) is bool


def test_a_ray_node_alone_is_exec_d_again_and_waited_for():
    engine = stopped_exec_serve()
    adopted = adopted_release(engine, ray_exec=RAY)
    adopted_serve.bring_back(engine, "a", adopted, NAME, NAME)
    assert [(container, argv, wait) for container, argv, _, _, _, wait in engine.runs] == [(NAME, RAY["argv"], True)]


def test_a_serve_whose_ray_node_cannot_start_names_the_node_and_the_container():
    engine = stopped_exec_serve(NeverStartingEngine)
    adopted = adopted_release(engine, ray_exec=RAY, exec=VLLM)
    with pytest.raises(RolloutError) as caught:
        adopted_serve.bring_back(engine, "a", adopted, NAME, NAME)
    assert says(str(caught.value), "node a") and says(str(caught.value), NAME)
    assert not says(str(caught.value), "None")
    assert getattr(engine, "runs", []) == [], "nothing is exec'd into a container that is not up"


def test_a_recreated_serve_gets_its_secret_variables_back_from_the_environment(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf-secret")
    engine = ExecRecordingEngine("a")
    engine.tags["base:1"] = "sha256:base"
    engine.run_serving(NAME, "base:1", ["S=3"], host={"AutoRemove": True})
    container = engine.containers[NAME]
    spec = {**create_spec(container), "secret_env": ["HF_TOKEN"]}
    adopted = adopted_release(engine)
    adopted = dataclasses.replace(adopted, adopted={**adopted.adopted, "spec": spec})
    engine.stop(container["Id"])
    assert NAME not in engine.containers, "a --rm serve is gone once stopped"
    adopted_serve.bring_back(engine, "a", adopted, NAME, NAME)
    now = engine.containers[NAME]
    assert now["State"]["Running"] is True
    assert "HF_TOKEN=hf-secret" in now["Config"]["Env"]


@pytest.mark.parametrize("recorded", [None, "on-failure"])
def test_the_restart_policy_recorded_at_adoption_wins_over_the_spec_s(recorded):
    engine = FakeEngine("a")
    engine.containers[NAME] = {"Id": "a-1", "Name": NAME, "HostConfig": {}, "State": {"Running": False}}
    spec = {"host": {"RestartPolicy": {"Name": recorded}}} if recorded else {}
    adopted_serve.restore_restart_policy(engine, engine.containers[NAME], {"restart": "unless-stopped", "spec": spec})
    assert engine.containers[NAME]["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
