"""Adapter: what one rank serves, read through its engine: the serving container, its vLLM processes and file changes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvbake.engines.adapters.client import Engine
from kvbake.engines.core.procfs import ImportOrigin
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
