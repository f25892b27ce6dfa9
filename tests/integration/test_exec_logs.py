"""vLLM started by `docker exec --detach` (the exec and Ray shapes, and an adopted serve brought back) writes to its
container's main process output, so `docker logs` shows it; a user who may not write there still starts."""

from __future__ import annotations

import time
import uuid
from typing import Iterator

import pytest

from kvbake.engines.adapters.client import Engine
from kvbake.launcher.core.launch_plan import to_main_log
from kvbake_rig.serve_shapes import BASE

pytestmark = [pytest.mark.docker, pytest.mark.default_engine_only]  # a property of the shell and procfs, not of the store
SAY = "import sys, time; print('vllm says hello', flush=True); print('and warns', file=sys.stderr, flush=True); time.sleep(30)"


@pytest.fixture()
def waiting(engine: Engine) -> Iterator[str]:
    """A container of the stand-in base whose main process only waits, as the exec shape's does."""
    assert engine.inspect_image(BASE) is not None, f"{BASE} is missing: run scripts/standin_base.py"
    name = f"kvbake-exec-logs-{uuid.uuid4().hex[:8]}"
    engine.client.run(BASE, ["infinity"], entrypoint="sleep", name=name, detach=True, networks=["none"])
    yield name
    engine.remove_container(name)


def logged(engine: Engine, name: str, text: str, timeout_s: float = 20.0) -> str:
    deadline = time.monotonic() + timeout_s
    while text not in (log := engine.container_logs(name)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return log


def test_a_detached_execs_output_reaches_docker_logs_and_its_process_is_the_command_itself(engine: Engine, waiting: str):
    engine.exec_detached(waiting, to_main_log(["python3", "-c", SAY]), {}, None, None)
    log = logged(engine, waiting, "and warns")
    assert "vllm says hello" in log and "and warns" in log
    commands = [command for _, command in engine.top(waiting)]
    assert any(command.startswith("python3 -c import sys") for command in commands), commands
    assert not any(command.startswith("sh -c") for command in commands), "the shell execs the command: no shell is left"


def test_without_the_redirect_docker_logs_shows_nothing_of_a_detached_exec(engine: Engine, waiting: str):
    """The fault the redirect mends: `docker exec --detach` discards what the command prints."""
    engine.exec_detached(waiting, ["python3", "-c", SAY], {}, None, None)
    assert "vllm says hello" not in logged(engine, waiting, "vllm says hello", timeout_s=5.0)


def test_a_user_who_may_not_write_to_the_main_process_output_still_starts(engine: Engine, waiting: str):
    engine.exec_detached(waiting, to_main_log(["python3", "-c", "open('/tmp/ran', 'w').write('yes')"]), {}, None, "1000")
    deadline = time.monotonic() + 20
    while "yes" not in str(engine.client.container.execute(waiting, ["sh", "-c", "cat /tmp/ran 2>/dev/null || true"])):
        assert time.monotonic() < deadline, "the command never ran for a user without access to /proc/1/fd"
        time.sleep(0.2)
