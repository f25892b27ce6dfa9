"""`kvbake-launch-vllm`: (re)create the vLLM serve $KVBAKE_CONTAINER on $DOCKER_HOST from $KVBAKE_IMAGE (docs/launcher.md)."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from python_on_whales import DockerClient
from python_on_whales.exceptions import DockerException

from kvbake.launcher.core.launch_plan import STOP_TIMEOUT_S, DockerRun, StopServe, engine_host, plan, refuse_switch_names, shell_line
from kvbake.launcher.core.node_launch import PROGRAM, LaunchInputError

PRINT_FLAGS = ("--print", "--dry-run")
USAGE = f"usage: {PROGRAM} [--print | --dry-run]   (configured by environment variables: docs/launcher.md)"


class EngineFailure(Exception):
    """The engine refused a step; one line for kvbake to show."""


def switch_names_of(step: DockerRun) -> list[str]:
    """The switch names the env file sets (NAME=VALUE lines, comments left out); the file must exist."""
    path = Path(step.env_file)
    if not path.is_file():
        raise LaunchInputError(f"KVBAKE_ENV_FILE {step.env_file} is not a file",
                               "run the launcher through kvbake deploy, or point KVBAKE_ENV_FILE at a ranks.env that `python build.py config` wrote")
    lines = path.read_text().splitlines()
    return [line.partition("=")[0].strip() for line in lines if "=" in line and not line.lstrip().startswith("#")]


def print_plan(step: DockerRun | StopServe) -> None:
    for argv in step.argv_lines():
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


@contextlib.contextmanager
def secret_env_file(names: Sequence[str], env: Mapping[str, str]) -> Iterator[list[str]]:
    """The secrets' values in an env file only this user can read, for docker to pass on; removed afterwards (never a
    command-line argument, where any user of the host could read it)."""
    if not names:
        yield []
        return
    with tempfile.TemporaryDirectory(prefix="kvbake-secrets-") as folder:
        path = Path(folder) / "secrets.env"
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.writelines(f"{name}={env[name]}\n" for name in names)
        yield [str(path)]


def start_serve(client, step: DockerRun, env: Mapping[str, str] | None = None) -> str:
    """Replace the container by name with a new one (in the exec shape, then start vLLM in it); the new container's id."""
    remove_serve(client, step.name)
    entrypoint_args = list(step.container_command()[1])
    with secret_env_file(step.secret_env, env or {}) as secrets:
        options = step.whales_options()
        container = client.run(step.image, entrypoint_args, **{**options, "env_files": [*options["env_files"], *secrets]})
    if step.execs:
        client.container.execute(step.name, **step.whales_exec())
    return container.id


def carry_out(client, step: DockerRun | StopServe, host: str, env: Mapping[str, str] | None = None) -> str:
    """Do the step on the engine; the line to print on success. Engine refusals become EngineFailure."""
    try:
        if isinstance(step, StopServe):
            removed = remove_serve(client, step.name)
            return f"{PROGRAM}: {'stopped and removed' if removed else 'no container'} {step.name} on {host}"
        return f"{PROGRAM}: started {step.name} ({start_serve(client, step, env)[:12]}, {step.shape} shape) on {host}"
    except DockerException as err:
        action = "stopping" if isinstance(step, StopServe) else "starting"
        raise EngineFailure(f"{PROGRAM}: {action} {step.name} on {host} failed: {engine_reason(err)}") from None


def checked_plan(env: Mapping[str, str]) -> DockerRun | StopServe:
    """The plan, with the checks that read the env file."""
    step = plan(env)
    if isinstance(step, DockerRun):
        refuse_switch_names(step, switch_names_of(step))
    return step


def run(argv: Sequence[str], env: Mapping[str, str],
        plan_of: Callable[[Mapping[str, str]], DockerRun | StopServe] = checked_plan) -> int:
    """`--print`/`--dry-run` prints the engine calls and touches no engine; KVBAKE_STOP=1 stops the serve. Exit 0 on
    success, 2 for an input the launcher cannot use, 1 when the engine refuses; a failure is one line on stderr.
    (`plan_of` lets a development launcher change the programs of the checked plan.)"""
    if any(arg not in PRINT_FLAGS for arg in argv):
        print(USAGE, file=sys.stderr)
        return 2
    try:
        step = plan_of(env)
        if argv:
            print_plan(step)
            return 0
        host = engine_host(env)
    except LaunchInputError as err:
        print(err.one_line(), file=sys.stderr)
        return 2
    try:
        print(carry_out(DockerClient(host=host), step, host, env))
    except EngineFailure as err:
        print(err, file=sys.stderr)
        return 1
    return 0


def main() -> None:
    """The console script."""
    sys.exit(run(sys.argv[1:], os.environ))
