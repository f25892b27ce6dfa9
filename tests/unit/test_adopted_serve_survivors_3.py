"""exec_again's wait: a detached `docker exec` unless the caller asks to wait for the command to return."""

from __future__ import annotations

import pytest

from fake_engine import FakeEngine
from kvbake.ship.adapters import adopted_serve

NAME = "vllm_node"
COMMAND = {"argv": ["ray", "start"], "env": {}, "cwd": None, "user": None}


class WaitRecordingEngine(FakeEngine):
    def exec_detached(self, container, argv, env, workdir, user, wait="unset"):
        self.waits = [*getattr(self, "waits", []), wait]


def running_node() -> WaitRecordingEngine:
    engine = WaitRecordingEngine("a")
    engine.containers[NAME] = {"Id": "a-1", "Name": NAME, "Config": {"Env": []}, "State": {"Running": True}}
    return engine


@pytest.mark.parametrize("kwargs, waits", [({}, [False]), ({"wait": False}, [False]), ({"wait": True}, [True])])
def test_the_command_is_detached_unless_asked_to_wait(kwargs, waits):
    engine = running_node()
    adopted_serve.exec_again(engine, "a", NAME, COMMAND, **kwargs)
    assert engine.waits == waits and all(type(w) is bool for w in engine.waits)
