"""What a serving container runs, read from its processes: the vLLM serves, the serve's shape and how each was started."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from kvbake.engines.core.procfs import Process
from kvbake.secret_env import split_secrets, withhold_args
from kvbake.serve.core.python_argv import WITH_ARGUMENT, interpreter_target, is_interpreter
from kvbake.serve.core.vllm_argv import ServeProcess, parse_serve_process, serve_entry

MAIN = "main"  # vLLM is the container's main process (or a wrapper the container started runs it)
EXEC = "exec"  # the container runs something else (a Ray node, sleep infinity); vLLM was started by docker exec
RAY_WORKER = "ray-worker"  # a Ray node of a cluster whose vLLM runs on the head: no vLLM process on this rank
SAFE_PATH_LETTERS = "IP"


@dataclass(frozen=True)
class ServingProcess:
    """One vLLM serve process: its process, its parsed command line, and the process the container or a `docker exec`
    started that leads to it (pid 1, or a process whose parent is outside the container)."""

    process: Process
    serve: ServeProcess
    root: Process

    @property
    def execd(self) -> bool:
        return self.root.pid != 1


@dataclass(frozen=True)
class RayNode:
    """How a container is a Ray node: the `ray start` command line (its main process's, or rebuilt from the raylet that a
    `ray start` run by docker exec left running beside `sleep infinity`), the environment of that process, and whether
    it was started by docker exec."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(hash=False)
    process: Process
    execd: bool


@dataclass(frozen=True)
class ServeReading:
    """Every vLLM serve of a container (children a serve forked are not counted again), its main process, and the Ray
    node it runs, if any."""

    serving: tuple[ServingProcess, ...]
    main: Process | None
    ray: RayNode | None = None

    @property
    def shape(self) -> str:
        return EXEC if any(s.execd for s in self.serving) else MAIN


def read_serve(processes: Sequence[Process]) -> ServeReading:
    """The vLLM serves among a container's processes (IntegrityError for one whose command line cannot be read)."""
    by_pid = {p.pid: p for p in processes}
    parsed = {p.pid: serve for p in processes if (serve := parse_serve_process(p.argv)) is not None}
    serving = tuple(ServingProcess(p, parsed[p.pid], root_of(p, by_pid)) for p in processes
                    if p.pid in parsed and p.ppid not in parsed)
    return ServeReading(serving, by_pid.get(1), ray_node(by_pid.get(1), processes))


def serves_in_commands(commands: Sequence[str]) -> bool:
    """Whether a container's command lines as the engine's `docker top` shows them (arguments joined by spaces, no
    python3 needed inside) include a vLLM serve: enough to tell that one runs, not to read its arguments."""
    return any(serve_entry(command.split()) is not None for command in commands)


def second_serves(reading: ServeReading) -> str | None:
    """What is wrong when one container runs more than one vLLM serve (a GPU node serves one model), naming each by
    pid and model; None for one or none."""
    if len(reading.serving) < 2:
        return None
    shown = ", ".join(f"pid {s.process.pid} ({s.serve.model or 'no model'})" for s in reading.serving)
    return f"{len(reading.serving)} vLLM serves run in one container: {shown}"


def root_of(process: Process, by_pid: Mapping[int, Process]) -> Process:
    """The ancestor the container (pid 1) or a `docker exec` (its parent is outside the container: 0) started."""
    seen = set()
    while process.ppid in by_pid and process.pid != 1 and process.pid not in seen:
        seen.add(process.pid)
        process = by_pid[process.ppid]
    return process


def ray_node(main: Process | None, processes: Sequence[Process]) -> RayNode | None:
    """The container's Ray node: `ray start --block` as its main process, else a raylet (`ray start` without --block
    exits once Ray's daemons run, so only they show the node)."""
    if main is not None and runs_ray_node(main):
        return RayNode(tuple(main.argv), main.env, main, execd=False)
    raylet = next((p for p in processes if p.argv and posixpath.basename(p.argv[0]) == RAYLET), None)
    if raylet is None:
        return None
    return RayNode(ray_start_of_raylet(raylet.argv), raylet.env, raylet, execd=True)


RAYLET = "raylet"


def ray_start_of_raylet(argv: Sequence[str]) -> tuple[str, ...]:
    """The `ray start` command line a raylet's own arguments say it was started with: the head's GCS port or the address
    it joined, its node address, its CPUs and GPUs and its object store (other options are not rebuilt)."""
    options = dict(token.partition("=")[::2] for token in argv[1:] if token.startswith("--"))
    listed = options.get("--static_resource_list", "").split(",")
    resources = dict(zip(listed[::2], listed[1::2]))
    gcs = options.get("--gcs-address", "")
    role = ["--head", f"--port={gcs.rpartition(':')[2]}"] if "--head" in options else [f"--address={gcs}"]
    rebuilt = ["ray", "start", *role]
    if options.get("--node_ip_address"):
        rebuilt.append(f"--node-ip-address={options['--node_ip_address']}")
    for resource, option in (("CPU", "--num-cpus"), ("GPU", "--num-gpus")):
        if resources.get(resource):
            rebuilt.append(f"{option}={float(resources[resource]):g}")
    if options.get("--object_store_memory"):
        rebuilt.append(f"--object-store-memory={options['--object_store_memory']}")
    return tuple(rebuilt)


def runs_ray_node(process: Process | None) -> bool:
    """Whether a process is a Ray node (`ray start …`, the console script or `python3 …/ray start`)."""
    argv = list(process.argv) if process else []
    at = next((i for i, token in enumerate(argv[:3]) if posixpath.basename(token) == "ray"), None)
    return at is not None and "start" in argv[at + 1:at + 2]


def first_path_entry(process: Process) -> str:
    """What Python puts first on sys.path for this command line: the working directory for `-m`, the script's folder
    for a script; nothing (`-`) with -I, -P or PYTHONSAFEPATH, or for a program that is no interpreter (a console
    script's shebang runs the interpreter with the script's path)."""
    argv = list(process.argv)
    if process.env.get("PYTHONSAFEPATH"):
        return "-"
    if not argv or not is_interpreter(posixpath.basename(argv[0])):
        return posixpath.dirname(argv[0]) if argv and argv[0].startswith("/") else "-"
    target = interpreter_target(argv)
    if target is None or safe_path(argv[1:target[0]]):
        return "-"
    at, module = target
    if module is not None:
        return process.cwd
    # interpreter_target names a script only at an index argv has; procfs reads the working directory as an absolute path
    return posixpath.dirname(posixpath.join(process.cwd, argv[at]))


def safe_path(options: Sequence[str]) -> bool:
    """Whether the interpreter's own options include -I or -P (alone or combined, as in -IS), which add no first entry."""
    for token in options:
        if token.startswith("-") and not token.startswith("--"):
            for letter in token[1:]:
                if letter in SAFE_PATH_LETTERS:
                    return True
                if letter in WITH_ARGUMENT:
                    break
    return False


def ray_exec_command(ray: RayNode | None, container_env: Sequence[str]) -> dict | None:
    """How to start a Ray node that docker exec started again: the rebuilt `ray start` command line with the environment
    it was given beyond the container's own; None for a Ray node that is the main process (the container starts it) or
    no Ray node."""
    if ray is None or not ray.execd:
        return None
    return exec_of(list(ray.argv), ray.process, ray.env, container_env)


SHELLS = ("bash", "sh", "zsh", "dash")


def shell_reading_its_input(argv: Sequence[str]) -> bool:
    """A shell that runs the commands it reads from its input (`docker exec -it NODE bash`, then `vllm serve …` typed
    into it): no `-c` among its options and no script named. Started again, it would read nothing and run nothing."""
    if not argv or argv[0].rsplit("/", 1)[-1] not in SHELLS:
        return False
    for token in argv[1:]:
        if token == "--" or not token.startswith("-"):
            return False  # a script (or arguments after --): it runs that, not its input
        if not token.startswith("--") and "c" in token[1:]:
            return False
    return True


def exec_command(serving: ServingProcess, container_env: Sequence[str]) -> dict:
    """How to start this serve again in its container: the `docker exec` command line of its root, with the environment
    the serve saw beyond the container's own (what `-e` or an exported file added), its working directory and user. A
    root that is a shell reading its commands from a terminal gives way to the serve's own command line."""
    started = serving.process if shell_reading_its_input(serving.root.argv) else serving.root
    return exec_of(list(started.argv), started, serving.process.env, container_env)


def exec_of(argv: list[str], root: Process, env: Mapping[str, str], container_env: Sequence[str]) -> dict:
    """A `docker exec` to run again: its command line, the environment beyond the container's own, the working
    directory and user of the process docker exec started; its secrets by name (`withhold_command`)."""
    own = dict(item.partition("=")[::2] for item in container_env)
    added = {name: value for name, value in env.items() if own.get(name) != value}
    return withhold_command({"argv": argv, "env": added, "cwd": root.cwd, "user": str(root.uid)})


def withhold_command(command: Mapping[str, Any]) -> dict:
    """A `docker exec` to run again with its secrets by name: its secret variables out of its environment (`secret_env`),
    each secret value of its command line a note naming its variable (`secret_args`); a value an earlier kvbake
    recorded in clear is withheld too, and a command withheld already stays as it is."""
    argv, arg_names = withhold_args(command.get("argv") or [])
    env, env_names = split_secrets(command.get("env") or {})
    names = {"secret_env": sorted({*(command.get("secret_env") or ()), *env_names}), "secret_args": list(arg_names)}
    rest = {key: value for key, value in command.items() if key not in names}
    return {**rest, "argv": argv, "env": env, **{key: found for key, found in names.items() if found}}
