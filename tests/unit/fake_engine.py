"""A fake node engine for the ship core's unit tests: images by ID and tag, marker and serving containers, and the
files `docker cp` would put into a state container. Only the calls rollout, transitions and nodestate make."""

from __future__ import annotations

import contextlib
import posixpath
import shutil
from pathlib import Path
from typing import Any, Iterator

from kvbake.engines.core.procfs import ImportOrigin, Process, environment
from kvbake.errors import EngineError
from kvbake.launcher.core.launch_plan import MAIN_LOG_SCRIPT
from kvbake.engines.core.detection import EngineProfile


BAKED_ORIGIN = "/src/vllm/__init__.py"  # the fake fleets' source root is /src


def serve_process(env: list[str], args: tuple[str, ...] = ("--max-model-len", "4096"), pid: int = 1, ppid: int = 0) -> Process:
    """A vLLM serve as a container's process: the console script serving a model with `args`, in `env`."""
    return Process(pid, ppid, ("python3", "/usr/local/bin/vllm", "serve", "/models/m", *args), environment(env), "/", "/usr/bin/python3")


class FakeEngine:
    """One node. `images` maps an image ID to its inspect document; `down` makes every call fail like a dead engine."""

    def __init__(self, name: str, store: str = "classic") -> None:
        self.label = name
        self.images: dict[str, dict[str, Any]] = {}
        self.tags: dict[str, str] = {}
        self.registry: dict[str, dict[str, Any]] = {}
        self.containers: dict[str, dict[str, Any]] = {}
        self.files: dict[str, dict[str, bytes]] = {}
        self.image_files: dict[str, dict[str, bytes]] = {}  # an image ID -> the files a container created from it holds
        self.configs: dict[str, str] = {}  # containerd store: manifest digest -> config digest
        self.identified: list[str] = []  # containerd store: the references whose config digest was read
        self.pulled: list[str] = []
        self.down = False
        self.clock = 1_000_000.0  # the node's own clock (docker info SystemTime), in seconds
        self.serial = 0
        self._profile = EngineProfile("26.1.5", store, "overlay2")
        self.origin = ImportOrigin(BAKED_ORIGIN, ("/src",))  # where a serve imports vllm from unless its container says otherwise

    def _name_of(self, container: str) -> str | None:
        """A container's name, given its name or its ID."""
        if container in self.containers:
            return container
        return next((name for name, c in self.containers.items() if c.get("Id") == container), None)

    def _new_id(self) -> str:
        self.serial += 1
        return f"{self.label}-{self.serial}"

    def store_root(self) -> tuple[str, str]:
        """No image store on a host kvbake can mount: lock's store route finds nothing here."""
        self._up()
        return "", ""

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

    def ensure_empty_image(self, reference: str) -> None:
        self._up()
        if reference not in self.tags:
            self.images["sha256:empty"] = {"Id": "sha256:empty", "RootFS": {"Layers": []}, "Config": {"Labels": {}, "Env": []}}
            self.tags[reference] = "sha256:empty"

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
            self.identified.append(reference)
            return self.configs[str(inspect["Id"])]
        return str(inspect["Id"])

    def pull(self, reference: str) -> None:
        """`registry` holds images by reference with their config digest as Id; on the containerd store the pulled
        image's Id is the manifest digest the reference names."""
        self._up()
        self.pulled.append(reference)
        image = self.registry[reference]
        if self._profile.store == "containerd":
            manifest = reference.partition("@")[2]
            self.configs[manifest] = image["Id"]
            image = {**image, "Id": manifest}
        self.images[image["Id"]] = image
        self.tags[reference] = image["Id"]

    def tag(self, image_id: str, reference: str) -> None:
        """Like Docker: only an image the engine holds can be tagged."""
        self._up()
        if self.image_id_of(str(image_id)) is None:
            raise EngineError(f"{self.label}: tag {reference}: no such image {image_id}", "pull it first")
        self.tags[reference] = self.image_id_of(str(image_id))

    def untag(self, reference: str, in_use_too: bool = False) -> None:
        self._up()
        self.tags.pop(reference, None)

    def tags_of_repository(self, repository: str) -> list[str]:
        self._up()
        return sorted(reference for reference in self.tags if reference.rpartition(":")[0] == repository)

    def commit(self, container: str, reference: str) -> str:
        """Like `docker commit`: an image of the container's image plus one layer holding the container's files."""
        self._up()
        found = self._get(container)
        base = self.images[str(found["Image"])]
        image_id = f"sha256:commit-{self._new_id()}"
        layers = [*base.get("RootFS", {}).get("Layers", []), f"sha256:layer-of-{found['Id']}"]
        self.images[image_id] = {**base, "Id": image_id, "RootFS": {"Layers": layers}}
        self.image_files[image_id] = {**self.image_files.get(str(found["Image"]), {}), **self.files.get(str(self._name_of(container)), {})}
        self.tags[reference] = image_id
        return image_id

    def create_marker(self, image: str, name: str, labels: dict[str, str]) -> str | None:
        self._up()
        if name in self.containers:
            return None
        if self.image_id_of(image) is None:  # Docker would try to pull it, and a node reaches no registry by that name
            raise EngineError(f"{self.label}: create {name}: no such image {image}", "pull it first")
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

    def running_containers(self) -> list[str]:
        self._up()
        return sorted(name for name, c in self.containers.items() if (c.get("State") or {}).get("Running"))

    def containers_labelled(self, label: str) -> list[str]:
        self._up()
        return sorted(name for name, c in self.containers.items() if label in ((c.get("Config") or {}).get("Labels") or {}))

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

    def _get(self, container: str) -> dict[str, Any]:
        name = self._name_of(container)
        if name is None:
            raise EngineError(f"{self.label}: no container {container}", "create it")
        return self.containers[name]

    def set_restart_policy(self, container: str, policy: str) -> None:
        """Like docker update --restart, refused for a container created with --rm."""
        self._up()
        found = self._get(container)
        if (found.get("HostConfig") or {}).get("AutoRemove"):
            raise EngineError(f"{self.label}: update {container}: a restart policy cannot be set on a --rm container", "check the engine")
        found.setdefault("HostConfig", {})["RestartPolicy"] = {"Name": policy, "MaximumRetryCount": 0}

    def start(self, container: str) -> None:
        """Its main process runs again; whatever a docker exec had started is gone. A running container is left as it
        is (docker start does nothing to it)."""
        self._up()
        found = self._get(container)
        if (found.get("State") or {}).get("Running"):
            return
        found["State"] = {**found.get("State", {}), "Running": True}
        if "Main" in found:
            found["Processes"] = (found["Main"],)

    def stop(self, container: str, timeout_s: int = 30) -> None:
        """Every process ends; a container created with --rm is gone once stopped."""
        self._up()
        found = self._get(container)
        found["State"] = {**found.get("State", {}), "Running": False}
        found["Main"] = found.get("Main") or next((p for p in found.get("Processes", ()) if p.pid == 1), None)
        found["Processes"] = ()
        if (found.get("HostConfig") or {}).get("AutoRemove"):
            self.remove_container(str(self._name_of(container)))

    def recreate(self, spec: dict[str, Any], name: str) -> str:
        self._up()
        if name in self.containers:
            raise EngineError(f"{self.label}: the name {name} is taken", "remove it")
        container_id = self._new_id()
        config = dict(spec.get("config") or {})
        main = Process(1, 0, (*config.get("Entrypoint", ()), *config.get("Cmd", ())), environment(config.get("Env") or []), "/", "/bin/main")
        self.containers[name] = {"Id": container_id, "Name": name, "Image": spec["image"], "Config": config, "Main": main,
                                 "HostConfig": dict(spec.get("host") or {}), "State": {"Running": False}, "Mounts": []}
        if spec["image"] in self.image_files:
            self.files[name] = dict(self.image_files[spec["image"]])
        return container_id

    def exec_detached(self, container: str, argv: list[str], env: dict[str, str], workdir: str | None, user: str | None,
                      wait: bool = False) -> None:
        """A new process whose parent is outside the container, in the container's environment plus `env`."""
        self._up()
        found = self._get(container)
        self.execs = [*getattr(self, "execs", []), (str(self._name_of(container)), list(argv), dict(env), workdir, user)]
        pid = max((p.pid for p in found.get("Processes", ())), default=1) + 1
        merged = {**environment((found.get("Config") or {}).get("Env") or []), **env}
        runs = argv[4:] if argv[:3] == ["sh", "-c", MAIN_LOG_SCRIPT] else argv  # the shell execs the command it is given
        found["Processes"] = (*found.get("Processes", ()), Process(pid, 0, tuple(runs), merged, workdir or "/", "/usr/bin/python3", int(user or 0)))

    def copy_in(self, source: Path, container: str, path: str) -> None:
        """Like `docker cp` of folder `source` (one level, as kvbake writes): into `path`/<its name> when the container
        has the folder `path` (`/` always), else as the folder `path` itself; a relative `path` starts at `/`."""
        self._up()
        name = self._name_of(container)
        if name is None:
            raise EngineError(f"{self.label}: no container {container}", "create it")
        folder = self.files.setdefault(name, {})
        base = posixpath.normpath("/" + path.lstrip("/"))
        exists = base == "/" or any(key.startswith(base + "/") for key in folder)
        target = posixpath.join(base, source.name) if exists else base
        for item in source.iterdir():
            folder[posixpath.join(target, item.name)] = item.read_bytes()

    @contextlib.contextmanager
    def created_container(self, image: str) -> Iterator[str]:
        """A never-started container holding the image's files; removed on exit."""
        self._up()
        image_id = self.image_id_of(image) or image
        if image_id not in self.images:
            raise EngineError(f"{self.label}: no image {image}", "load it")
        name = f"kvbake-extract-{self.serial + 1}"
        self.containers[name] = {"Id": self._new_id(), "Name": name, "Image": image_id, "State": {"Running": False}, "Config": {}}
        self.files[name] = dict(self.image_files.get(image_id, {}))
        try:
            yield name
        finally:
            self.containers.pop(name, None)
            self.files.pop(name, None)

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

    def processes(self, container: str) -> tuple[Process, ...]:
        self._up()
        return tuple(self._get(container).get("Processes", ()))

    def top(self, container: str) -> list[tuple[int, str]]:
        """`docker top`: every process's command line, arguments joined by spaces, as the node's host shows it."""
        self._up()
        return [(p.pid, " ".join(p.argv)) for p in self._get(container).get("Processes", ())]

    def import_origins(self, container: str, processes: list[Process], first_entries: list[str]) -> tuple[ImportOrigin, ...]:
        """Every serve imports the baked vllm under the fleet's source root, unless the container says otherwise. Like
        the real probe, it takes exactly one first `sys.path` entry per process."""
        self._up()
        if len(list(first_entries)) != len(processes):
            raise ValueError(f"{len(processes)} processes, but first entries {first_entries!r}")
        given = self._get(container).get("Origins", {})
        return tuple(given.get(p.pid, self.origin) for p in processes)

    def changes(self, container: str) -> dict[str, str]:
        self._up()
        return dict(self._get(container).get("Changes", {}))

    def run_serving(self, name: str, reference: str, env: list[str], args: tuple[str, ...] = ("--max-model-len", "4096"),
                    main: tuple[str, ...] | None = None, host: dict[str, Any] | None = None) -> None:
        """What a launcher does: (re)create the serving container from `reference` with `env`, vLLM serving with `args`
        as its main process, or (with `main`, say sleep infinity) started by a docker exec beside it."""
        self._up()
        if main is None:
            processes: tuple[Process, ...] = (serve_process(env, args),)
            command = serve_process(env, args).argv
        else:
            processes = (Process(1, 0, main, environment(env), "/", "/bin/main"), serve_process(env, args, pid=7, ppid=0))
            command = main
        self.containers[name] = {"Id": self._new_id(), "Name": name, "Processes": processes, "Main": processes[0],
                                 "HostConfig": dict(host or {}), "Image": self.image_id_of(reference),
                                 "Config": {"Env": list(env), "Labels": {}, "Cmd": list(command)}, "State": {"Running": True}, "Mounts": []}


def copy_tree(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, dirs_exist_ok=True)
