"""A fake node engine for the ship core's unit tests: images by ID and tag, marker and serving containers, and the
files `docker cp` would put into a state container. Only the calls rollout, transitions and nodestate make."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from kvbake.errors import EngineError
from kvbake.engines.core.detection import EngineProfile


class FakeEngine:
    """One node. `images` maps an image ID to its inspect document; `down` makes every call fail like a dead engine."""

    def __init__(self, name: str, store: str = "classic") -> None:
        self.label = name
        self.images: dict[str, dict[str, Any]] = {}
        self.tags: dict[str, str] = {}
        self.registry: dict[str, dict[str, Any]] = {}
        self.containers: dict[str, dict[str, Any]] = {}
        self.files: dict[str, dict[str, bytes]] = {}
        self.configs: dict[str, str] = {}  # containerd store: manifest digest -> config digest
        self.down = False
        self.clock = 1_000_000.0  # the node's own clock (docker info SystemTime), in seconds
        self.serial = 0
        self._profile = EngineProfile("26.1.5", store, "overlay2")

    def _name_of(self, container: str) -> str | None:
        """A container's name, given its name or its ID."""
        if container in self.containers:
            return container
        return next((name for name, c in self.containers.items() if c.get("Id") == container), None)

    def _new_id(self) -> str:
        self.serial += 1
        return f"{self.label}-{self.serial}"

    def system_time(self) -> str:
        self._up()
        from datetime import datetime, timezone

        return datetime.fromtimestamp(self.clock, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def _up(self) -> None:
        if self.down:
            raise EngineError(f"{self.label}: the engine is unreachable", "start it")

    def ping(self) -> dict[str, Any]:
        self._up()
        return {}

    def profile(self) -> EngineProfile:
        self._up()
        return self._profile

    def image_id_of(self, reference: str) -> str | None:
        self._up()
        return reference if reference in self.images else self.tags.get(reference)

    def inspect_image(self, reference: str) -> dict[str, Any] | None:
        image_id = self.image_id_of(reference)
        return self.images.get(image_id) if image_id else None

    def require_image(self, reference: str) -> dict[str, Any]:
        found = self.inspect_image(reference)
        if found is None:
            raise EngineError(f"{self.label}: image {reference} is not present", "load it")
        return found

    def config_digest_of(self, inspect: dict[str, Any], reference: str, fetch: Any = None) -> str:
        """The classic store's Id is the config digest; the containerd store's is the manifest's, whose config the
        fake keeps in `configs` (as the real client reads it from the manifest)."""
        self._up()
        if self._profile.store == "containerd":
            return self.configs[str(inspect["Id"])]
        return str(inspect["Id"])

    def pull(self, reference: str) -> None:
        """`registry` holds images by reference with their config digest as Id; on the containerd store the pulled
        image's Id is the manifest digest the reference names."""
        self._up()
        image = self.registry[reference]
        if self._profile.store == "containerd":
            manifest = reference.partition("@")[2]
            self.configs[manifest] = image["Id"]
            image = {**image, "Id": manifest}
        self.images[image["Id"]] = image
        self.tags[reference] = image["Id"]

    def tag(self, image_id: str, reference: str) -> None:
        self._up()
        self.tags[reference] = image_id

    def untag(self, reference: str) -> None:
        self._up()
        self.tags.pop(reference, None)

    def create_marker(self, image: str, name: str, labels: dict[str, str]) -> str | None:
        self._up()
        if name in self.containers:
            return None
        container_id = self._new_id()
        self.containers[name] = {"Id": container_id, "Name": name, "Image": self.image_id_of(image),
                                 "Config": {"Labels": dict(labels), "Env": []}, "State": {"Running": False}}
        return container_id

    def rename_container(self, container: str, new_name: str) -> bool:
        self._up()
        name = self._name_of(container)
        if name is None or new_name in self.containers:
            return False
        self.containers[new_name] = {**self.containers.pop(name), "Name": new_name}
        if name in self.files:
            self.files[new_name] = self.files.pop(name)
        return True

    def container_inspect(self, name: str) -> dict[str, Any] | None:
        self._up()
        found = self._name_of(name)
        return self.containers.get(found) if found else None

    def container_log_tail(self, name: str, lines: int = 3) -> str:
        self._up()
        return "\n".join(self.containers.get(name, {}).get("Log", [])[-lines:])

    def remove_container(self, name: str) -> None:
        self._up()
        found = self._name_of(name)
        if found is not None:
            self.containers.pop(found, None)
            self.files.pop(found, None)

    def stop_and_rename(self, name: str, new_name: str) -> None:
        self._up()
        container = self.containers.pop(name)
        container["State"] = {**container.get("State", {}), "Running": False}
        self.containers[new_name] = {**container, "Name": new_name}

    def rename_and_start(self, name: str, new_name: str) -> None:
        self._up()
        container = self.containers.pop(name)
        container["State"] = {**container.get("State", {}), "Running": True}
        self.containers[new_name] = {**container, "Name": new_name}

    def copy_in(self, source: Path, container: str, path: str) -> None:
        """The files of folder `source` land in the container's folder named like it (one level, as kvbake writes)."""
        self._up()
        name = self._name_of(container)
        if name is None:
            raise EngineError(f"{self.label}: no container {container}", "create it")
        folder = self.files.setdefault(name, {})
        for item in source.iterdir():
            folder[f"/{source.name}/{item.name}"] = item.read_bytes()

    def copy_out(self, container: str, path: str, destination: Path) -> bool:
        """A folder comes out as a folder of its files, a file as that file; False when absent."""
        self._up()
        name = self._name_of(container)
        files = self.files.get(name or "", {})
        if path in files:
            destination.write_bytes(files[path])
            return True
        inside = {key[len(path.rstrip("/")) + 1:]: data for key, data in files.items() if key.startswith(path.rstrip("/") + "/")}
        if not inside:
            return False
        destination.mkdir(parents=True)
        for item, data in inside.items():
            (destination / item).write_bytes(data)
        return True

    def run_serving(self, name: str, reference: str, env: list[str]) -> None:
        """What a launcher does: (re)create the serving container from `reference` with `env`."""
        self._up()
        self.containers[name] = {"Id": self._new_id(), "Name": name, "Image": self.image_id_of(reference),
                                 "Config": {"Env": list(env), "Labels": {}}, "State": {"Running": True}, "Mounts": []}


def copy_tree(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, dirs_exist_ok=True)
