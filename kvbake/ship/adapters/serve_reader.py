"""Adapter: what one rank serves, read through its engine: the serving container, its vLLM processes and file changes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvbake.engines.adapters.client import Engine
from kvbake.engines.core.procfs import ImportOrigin
from kvbake.serve.core.serve_description import choose_container
from kvbake.serve.core.serve_reading import ServeReading, first_path_entry, read_serve


@dataclass(frozen=True)
class RankServe:
    """A running serving container's vLLM serves, where each imports vllm from, and its writable layer's changes."""

    reading: ServeReading
    origins: tuple[ImportOrigin, ...]
    changes: dict[str, str] = field(default_factory=dict)


def read_rank(engine: Engine, container: dict[str, Any]) -> RankServe:
    """Read a running container's processes (procfs through `docker exec`), resolve `import vllm` for each serve under
    its own interpreter, environment and working directory, and list its `docker diff`."""
    name = str(container["Id"])
    reading = read_serve(engine.processes(name))
    processes = [serving.process for serving in reading.serving]
    origins = engine.import_origins(name, processes, [first_path_entry(p) for p in processes])
    return RankServe(reading, origins, engine.changes(name))


def is_cluster_node(engine: Engine, name: str) -> bool:
    """Whether a running container's main process is a Ray node (`ray start --block`): a worker that runs no vLLM."""
    return read_serve(engine.processes(name)).ray is not None


def serving_container(engine: Engine, node: str, named: str | None) -> str:
    """The node's serving container: the one named, else the one running container with a vLLM serve (or a Ray node)."""
    if named:
        return named
    running = engine.running_containers()
    serving = [name for name in running if read_serve(engine.processes(name)).serving]
    cluster = [] if serving else [name for name in running if is_cluster_node(engine, name)]
    return choose_container(node, serving, cluster)
