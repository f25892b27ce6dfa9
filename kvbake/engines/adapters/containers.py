"""Adapter: the calls of `Engine` on named containers (markers, inspect, logs, exec, probes), as a mixin of the client."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from python_on_whales.exceptions import DockerException, NoSuchContainer
from python_on_whales.utils import run as run_cli

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

    def run_probe(self, image: str, argv: list[str], read_only: dict[str, str]) -> str:
        """Run argv once in a throw-away container of a local image (no network, the given host paths read-only), and
        return its output."""
        try:
            return str(self.client.run(image, argv[1:], entrypoint=argv[0], remove=True, networks=["none"], pull="never",
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

    def copy_in(self, source: Path, container: str, path: str) -> None:
        try:
            self.client.copy(str(source), (container, path))
        except DockerException as err:
            raise self._fail(f"copy into {container}", err) from None

    def exec_in(self, container: str, argv: list[str]) -> str:
        """Run argv inside a running container (docker exec) and return its stdout."""
        try:
            return self.client.container.execute(container, argv)
        except DockerException as err:
            raise self._fail(f"exec in {container}", err) from None
