"""Reference launcher: (re)create the vLLM serve $KVBAKE_CONTAINER on $DOCKER_HOST from $KVBAKE_IMAGE (docs/launcher.md)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

try:
    from python_on_whales import DockerClient
    from python_on_whales.exceptions import DockerException
except ImportError:  # a python3 without the project's dependencies: --print still works, engine calls do not
    DockerClient = None

    class DockerException(Exception):
        """Stands in for python-on-whales' exception when python-on-whales is absent."""

if str(Path(__file__).resolve().parent) not in sys.path:  # imported rather than run
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from launch_vllm_core import STOP_TIMEOUT_S, DockerRun, LaunchInputError, StopServe, engine_host, plan, shell_line  # noqa: E402

PRINT_FLAGS = ("--print", "--dry-run")
USAGE = "usage: launch_vllm.py [--print | --dry-run]   (configured by environment variables: docs/launcher.md)"


class EngineFailure(Exception):
    """The engine refused a step; one line for kvbake to show."""


def check_env_file(step: DockerRun) -> None:
    if not Path(step.env_file).is_file():
        raise LaunchInputError(f"KVBAKE_ENV_FILE {step.env_file} is not a file",
                               "run the launcher through kvbake deploy, or point KVBAKE_ENV_FILE at a ranks.env that `python build.py config` wrote")


def require_python_on_whales() -> None:
    if DockerClient is None:
        raise LaunchInputError(f"python-on-whales is not installed for {sys.executable}",
                               "run the launcher with the Python of kvbake's virtual environment "
                               '(launcher.command: ["<venv>/bin/python", "scripts/launch_vllm.py"])')


def print_plan(step: DockerRun | StopServe) -> None:
    lines = step.argv_lines() if isinstance(step, StopServe) else [step.argv()]
    for argv in lines:
        print(shell_line(argv))


def engine_reason(err: Exception) -> str:
    """The engine's last informative line: docker run ends its errors with a hint ("See 'docker run --help'." or
    "Run 'docker run --help' for more information"), which is left out."""
    lines = [line.strip() for line in (getattr(err, "stderr", None) or str(err)).splitlines() if line.strip()]
    telling = [line for line in lines if not re.match(r"(See|Run) 'docker [a-z ]+--help'", line)]
    return (telling or lines or ["no output"])[-1]


def remove_serve(client, name: str) -> bool:
    """Stop the container (SIGTERM, then SIGKILL after the timeout) and remove it; False when there was none."""
    if not client.container.exists(name):
        return False
    client.container.stop(name, time=STOP_TIMEOUT_S)
    client.container.remove(name, force=True)
    return True


def start_serve(client, step: DockerRun) -> str:
    """Replace the container by name with a new one; the new container's id."""
    remove_serve(client, step.name)
    container = client.run(step.image, list(step.command), **step.whales_options())
    return container.id


def carry_out(client, step: DockerRun | StopServe, host: str) -> str:
    """Do the step on the engine; the line to print on success. Engine refusals become EngineFailure."""
    try:
        if isinstance(step, StopServe):
            removed = remove_serve(client, step.name)
            return f"launch_vllm: {'stopped and removed' if removed else 'no container'} {step.name} on {host}"
        return f"launch_vllm: started {step.name} ({start_serve(client, step)[:12]}) on {host}"
    except DockerException as err:
        action = "stopping" if isinstance(step, StopServe) else "starting"
        raise EngineFailure(f"launch_vllm: {action} {step.name} on {host} failed: {engine_reason(err)}") from None


def main(argv: Sequence[str], env: Mapping[str, str]) -> int:
    """`--print`/`--dry-run` prints the plan and touches no engine; KVBAKE_STOP=1 stops the serve. Exit 0 on success,
    2 for an input the launcher cannot use, 1 when the engine refuses; a failure is one line on stderr."""
    if any(arg not in PRINT_FLAGS for arg in argv):
        print(USAGE, file=sys.stderr)
        return 2
    try:
        step = plan(env)
        if isinstance(step, DockerRun):
            check_env_file(step)
        if argv:
            print_plan(step)
            return 0
        host = engine_host(env)
        require_python_on_whales()
    except LaunchInputError as err:
        print(err.one_line(), file=sys.stderr)
        return 2
    try:
        print(carry_out(DockerClient(host=host), step, host))
    except EngineFailure as err:
        print(err, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], os.environ))
