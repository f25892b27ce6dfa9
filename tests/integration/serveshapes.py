"""The serve shapes the field runs, started by hand on the rig's node engines as operators start them, and a whole-node
snapshot that sees every container by name and what its vLLM serve runs, process by process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvbake.engines.adapters.client import Engine
from kvbake.ship.adapters.node_locks import LOCK_NAME
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.rig.ports import free_port
from kvbake.rig.serve_shapes import SHAPES, ShapePorts
from kvbake.ship.core.serve_reading import read_serve

NODES = {"a": "spark-a", "b": "spark-b"}


def shape_ports(folder: Path) -> ShapePorts:
    """Free ports on this machine for a pair on the host network, and a model folder to mount."""
    model = folder / "model"
    model.mkdir(parents=True, exist_ok=True)
    return ShapePorts(free_port(), free_port(), free_port(), model)


def start_shape(rig: dict, shape: str, ports: ShapePorts) -> dict[str, str]:
    """Start one shape on both nodes; each node's container ID."""
    start, _ = SHAPES[shape]
    return {key: start(rig[key].client(), key, ports) for key in NODES}


def with_node_containers(deploy_file: Path, names: dict[str, str]) -> Path:
    """The deployment file naming each node's serve (`container:`), as init writes it."""
    document = json.loads(deploy_file.read_text())
    for node in document["nodes"]:
        node["container"] = names[next(k for k, n in NODES.items() if n == node["name"])]
    deploy_file.write_text(json.dumps(document))
    return deploy_file


def serves(engine: Engine, name: str) -> tuple | None:
    """What a container's vLLM serves run, process by process (their command lines and switch variables), or None."""
    container = engine.container_inspect(name)
    if container is None or not (container.get("State") or {}).get("Running"):
        return None if container is None else ("stopped",)
    reading = read_serve(engine.processes(name))
    return tuple((s.process.argv, tuple(sorted((k, v) for k, v in s.process.env.items() if k.startswith("VLLM_")))) for s in reading.serving)


def whole_node(rig: dict, key: str, repository: str, names: tuple[str, ...]) -> dict[str, Any]:
    """Every container of the node by name (running or not, restart policy) and what the named serves run; the tags,
    the records (current, previous, adopted), the journal and diverged mark it keeps and its lock."""
    engine = Engine(rig[key].host)
    records = NodeState(NODES[key], engine).read()
    containers = {}
    for container in engine.client.container.list(all=True):
        inspect = engine.container_inspect(container.id)
        containers[container.name] = (inspect["State"]["Running"], (inspect["HostConfig"].get("RestartPolicy") or {}).get("Name"))
    return {"containers": containers, "serves": {name: serves(engine, name) for name in names},
            "current": engine.image_id_of(f"{repository}:current"), "previous": engine.image_id_of(f"{repository}:previous"),
            "records": tuple(r.id if r else None for r in (records.current, records.previous, records.adopted)),
            "transition": records.transition, "diverged": records.diverged, "lock": engine.container_inspect(LOCK_NAME) is not None}


def clear_nodes(rig: dict, names: tuple[str, ...]) -> None:
    for key in NODES:
        engine = Engine(rig[key].host)
        for name in names:
            engine.remove_container(name)
            engine.remove_container(f"{name}-kvbake-adopted")
