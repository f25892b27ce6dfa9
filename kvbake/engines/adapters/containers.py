"""Adapter: the calls of `Engine` on named containers (markers, inspect, logs, exec, probes), as a mixin of the client."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from python_on_whales.exceptions import DockerException, NoSuchContainer
from python_on_whales.utils import run as run_cli

from kvbake.engines.adapters.recreate import create_arguments
from kvbake.engines.core.procfs import (ORIGINS, PROBE_MARK, PROCESSES, ImportOrigin, Process, merged_processes, origins_request,
                                       parse_origins, parse_processes, unread_users)
from kvbake.errors import EngineError


def _name_taken(err: DockerException) -> bool:
    stderr = err.stderr or ""
    return "is already in use" in stderr or "Conflict" in stderr


def _last_line(err: DockerException) -> str:
    text = (err.stderr or err.stdout or "").strip().splitlines()
    return text[-1] if text else f"exit code {err.return_code}"


class ContainerOps:
    """Calls on named containers; expects `self.client` (a DockerClient) and `self.label`."""

    client: Any
    label: str

    def _fail(self, what: str, err: DockerException) -> EngineError:
        return EngineError(f"{self.label}: {what} failed ({_last_line(err)})", "check that the node's engine is up and reachable")

    def create_marker(self, image: str, name: str, labels: dict[str, str]) -> str | None:
        """Create a never-started container as an atomic marker; its ID, or None when the name is taken."""
        try:
            created = self.client.container.create(image, ["true"], name=name, labels=labels, networks=["none"], pull="never")
        except DockerException as err:
            if _name_taken(err):
                return None
            raise self._fail(f"create {name}", err) from None
        return str(created.id)

    def rename_container(self, container: str, new_name: str) -> bool:
        """Rename a container (by ID or name); False when it no longer exists or the new name is taken: the engine
        renames atomically, so of two callers renaming one container to the same name only one succeeds."""
        try:
            self.client.container.rename(container, new_name)
        except DockerException as err:
            stderr = err.stderr or ""
            if _name_taken(err) or "No such container" in stderr or "same name as its current name" in stderr:
                return False
            raise self._fail(f"rename {container}", err) from None
        return True

    def container_inspect(self, name: str) -> dict[str, Any] | None:
        """Plain inspect data of a container, or None when absent."""
        try:
            raw = run_cli(self.client.client_config.docker_cmd + ["container", "inspect", name])
        except DockerException as err:
            if "No such container" in (err.stderr or "") or "No such object" in (err.stderr or ""):
                return None
            raise self._fail(f"inspect {name}", err) from None
        import json

        return json.loads(raw)[0]

    def running_containers(self) -> list[str]:
        """The names of the engine's running containers."""
        try:
            return sorted(str(container.name) for container in self.client.container.list())
        except DockerException as err:
            raise self._fail("list containers", err) from None

    def containers_labelled(self, label: str) -> list[str]:
        """The names of every container (running or not) that carries this label."""
        try:
            return sorted(str(container.name) for container in self.client.container.list(all=True, filters=[("label", label)]))
        except DockerException as err:
            raise self._fail("list containers", err) from None

    def container_log_tail(self, name: str, lines: int = 3) -> str:
        """The last lines a container wrote (stdout and stderr), or "" when there are none."""
        try:
            return str(self.client.container.logs(name, tail=lines)).strip()
        except DockerException:
            return ""

    def container_logs(self, name: str) -> str:
        """Everything a container wrote (stdout and stderr), or "" when it does not exist."""
        try:
            return str(self.client.container.logs(name))
        except DockerException:
            return ""

    def remove_container(self, name: str) -> None:
        with contextlib.suppress(NoSuchContainer):
            try:
                self.client.container.remove(name, force=True)
            except DockerException as err:
                if "No such container" not in (err.stderr or ""):
                    raise self._fail(f"remove {name}", err) from None

    def run_probe(self, image: str, argv: list[str], read_only: dict[str, str], network: str = "none") -> str:
        """Run argv once in a throw-away container of a local image (no network unless `network` is "host", which shows
        the node's own interfaces; the given host paths read-only), and return its output."""
        try:
            return str(self.client.run(image, argv[1:], entrypoint=argv[0], remove=True, networks=[network], pull="never",
                                       volumes=[(source, target, "ro") for source, target in read_only.items()]))
        except DockerException as err:
            raise self._fail(f"probe in {image}", err) from None

    def stop_and_rename(self, name: str, new_name: str) -> None:
        """Stop a container (it is kept, with its whole configuration) and give it another name."""
        try:
            self.client.container.stop(name)
            self.client.container.rename(name, new_name)
        except DockerException as err:
            raise self._fail(f"stop and rename {name}", err) from None

    def rename_and_start(self, name: str, new_name: str) -> None:
        """Give a kept container its name back and start it."""
        try:
            self.client.container.rename(name, new_name)
            self.client.container.start(new_name)
        except DockerException as err:
            raise self._fail(f"rename and start {name}", err) from None

    def recreate(self, spec: dict[str, Any], name: str) -> str:
        """Create and start, detached, the container a recorded create spec describes, under `name`; its ID. Detached
        as `docker run -d` makes it: `docker create` would record its output as attached to a client, and the
        container would then look started in the foreground by a launcher (adopting it again would be refused)."""
        image, command, options = create_arguments(spec, name)
        try:
            return str(self.client.container.run(image, command, detach=True, **options).id)
        except DockerException as err:
            raise self._fail(f"create {name} from its recorded spec", err) from None

    def commit(self, container: str, reference: str) -> str:
        """`docker commit --pause=false`: the container's writable layer as a local image named `reference`, taken
        without pausing what runs in it; the new image's ID."""
        try:
            return str(self.client.container.commit(container, tag=reference, pause=False).id)
        except DockerException as err:
            raise self._fail(f"commit {container} as {reference}", err) from None

    def set_restart_policy(self, container: str, policy: str) -> None:
        """`docker update --restart`: `no` keeps a container the engine would otherwise start at boot from starting."""
        try:
            self.client.container.update(container, restart=policy)
        except DockerException as err:
            raise self._fail(f"update the restart policy of {container}", err) from None

    def start(self, container: str) -> None:
        try:
            self.client.container.start(container)
        except DockerException as err:
            raise self._fail(f"start {container}", err) from None

    def stop(self, container: str, timeout_s: int = 30) -> None:
        """Stop a container; one started with --rm is then removed by the engine in the background, so wait until it
        is gone: a caller that inspects or renames it next would otherwise race that removal."""
        auto_remove = bool(((self.container_inspect(container) or {}).get("HostConfig") or {}).get("AutoRemove"))
        try:
            self.client.container.stop(container, time=timeout_s)
        except DockerException as err:
            raise self._fail(f"stop {container}", err) from None
        if auto_remove:
            self._wait_removed(container, timeout_s)

    def _wait_removed(self, container: str, timeout_s: int) -> None:
        deadline = time.monotonic() + timeout_s
        while self.container_inspect(container) is not None:
            if time.monotonic() > deadline:
                raise EngineError(f"{self.label}: {container} was stopped but the engine did not remove it (--rm) within "
                                  f"{timeout_s}s", "check the node's engine (docker events), then retry")
            time.sleep(0.1)

    def exec_detached(self, container: str, argv: list[str], env: dict[str, str], workdir: str | None, user: str | None,
                      wait: bool = False) -> None:
        """`docker exec -d` of a command line with its environment additions, working directory and user; with `wait`,
        `docker exec` that returns once the command has (an error when it exits non-zero)."""
        try:
            self.client.container.execute(container, argv, detach=not wait, envs=env, workdir=workdir or None, user=user or None)
        except DockerException as err:
            raise self._fail(f"exec in {container}", err) from None

    def copy_in(self, source: Path, container: str, path: str) -> None:
        try:
            self.client.copy(str(source), (container, path))
        except DockerException as err:
            raise self._fail(f"copy into {container}", err) from None

    def top(self, container: str) -> list[tuple[int, str]]:
        """`docker top`: the container's processes as the engine's host sees them (host PIDs), each with its command."""
        try:
            text = run_cli(self.client.client_config.docker_cmd + ["container", "top", container, "-eo", "pid,args"])
        except DockerException as err:
            raise self._fail(f"top of {container}", err) from None
        rows = []
        for line in str(text).splitlines()[1:]:
            pid, _, command = line.strip().partition(" ")
            if pid.isdigit():
                rows.append((int(pid), command.strip()))
        return rows

    def processes(self, container: str) -> tuple[Process, ...]:
        """Every process of a running container from its procfs (argv, environment, working directory, executable), read
        by the container's own python3 as root; the engine's `docker top` first proves the container runs something."""
        if not self.top(container):
            return ()
        answer = self._probe(container, [PROCESSES, PROBE_MARK], "its processes")
        as_users = [self._read_processes(container, self._probe(container, [PROCESSES, PROBE_MARK], "its processes", user=str(uid)))
                    for uid in self._unread_users(container, answer)]
        return merged_processes(self._read_processes(container, answer), *as_users)

    def _read_processes(self, container: str, answer: str) -> tuple[Process, ...]:
        try:
            return parse_processes(answer)
        except (ValueError, KeyError, TypeError) as err:
            raise self._unreadable(container, err) from None

    def _unread_users(self, container: str, answer: str) -> tuple[int, ...]:
        try:
            return unread_users(answer)
        except (ValueError, KeyError, TypeError) as err:
            raise self._unreadable(container, err) from None

    def _unreadable(self, container: str, err: Exception) -> EngineError:
        """A process probe whose answer is no list of processes (its python3 printed something else)."""
        return EngineError(f"{self.label}: reading its processes in {container} gave an answer kvbake cannot read "
                           f"({type(err).__name__}: {err})", "check what python3 runs in that container (a wrapper that "
                           "prints on start-up), then retry")

    def existing_paths(self, container: str, paths: list[str]) -> tuple[str, ...]:
        """Which of `paths` exist inside a running container, as its own python3 sees them (a privileged container
        sees the node's /dev)."""
        script = "import os, sys\nprint('\\n'.join(p for p in sys.argv[1:] if os.path.exists(p)))"
        text = self._probe(container, [script, *paths], "which device paths it has")
        return tuple(line for line in text.splitlines() if line in paths)

    def import_origins(self, container: str, processes: list[Process], first_entries: list[str]) -> tuple[ImportOrigin, ...]:
        """Where `import vllm` resolves for each process, under its own interpreter, environment and working directory."""
        if not processes:
            return ()
        return parse_origins(self._probe(container, [ORIGINS, origins_request(processes, first_entries)], "where its processes import vllm from"),
                             len(processes))

    def _probe(self, container: str, args: list[str], what: str, user: str = "0") -> str:
        try:
            return str(self.client.container.execute(container, ["python3", "-I", "-S", "-c", *args], user=user))
        except DockerException as err:
            raise EngineError(f"{self.label}: reading {what} in {container} failed ({_last_line(err)})",
                              "the serving container must be running and have python3 (every vLLM image has)") from None

    def changes(self, container: str) -> dict[str, str]:
        """`docker diff`: every path of the container's writable layer, A(dded), C(hanged) or D(eleted)."""
        try:
            return dict(self.client.container.diff(container))
        except DockerException as err:
            raise self._fail(f"diff of {container}", err) from None

    def exec_in(self, container: str, argv: list[str]) -> str:
        """Run argv inside a running container (docker exec) and return its stdout."""
        try:
            return self.client.container.execute(container, argv)
        except DockerException as err:
            raise self._fail(f"exec in {container}", err) from None
