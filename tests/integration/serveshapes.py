"""The serve shapes the field runs, started by hand on the rig's node engines as operators start them, and a whole-node
snapshot that sees every container by name and what its vLLM serve runs, process by process."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from kvbake.engines.adapters.client import Engine
from kvbake.ship.adapters.node_locks import LOCK_NAME
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.core.fencing import generation_of
from kvbake_rig.ports import free_port
# SOURCE_ROOT, STANDIN, chain_overlay and donor_clone are the tests' through this module
from kvbake_rig.serve_shapes import (REAL_RAY_SHAPES, SHAPES, SOURCE_ROOT, STANDIN, ShapePorts, chain_overlay,  # noqa: F401
                                     donor_clone)
from kvbake.serve.core.serve_reading import read_serve

NODES = {"a": "spark-a", "b": "spark-b"}


def shape_ports(folder: Path, overlay: tuple[tuple[str, str], ...] = ()) -> ShapePorts:
    """Free ports on this machine for a pair on the host network, a model folder to mount, and the overlay's mounts."""
    model = folder / "model"
    model.mkdir(parents=True, exist_ok=True)
    return ShapePorts(free_port(), free_port(), free_port(), model, overlay)


def start_shape(rig: dict, shape: str, ports: ShapePorts) -> dict[str, str]:
    """Start one shape on both nodes; each node's container ID."""
    start, _ = SHAPES[shape]
    return {key: start(rig[key].client(), key, ports) for key in NODES}


def serving_keys(shape: str) -> tuple[str, ...]:
    """The nodes whose serve runs a vLLM process: every node, but the head only in a Ray cluster."""
    return ("a",) if shape == "ray cluster" or shape in REAL_RAY_SHAPES else tuple(NODES)


def wait_for_serves(rig: dict, names: dict[str, str], keys: tuple[str, ...]) -> None:
    """An exec'd vLLM takes a moment to appear; a serve that never does fails the test."""
    deadline = time.monotonic() + 20
    while not all(serves(Engine(rig[key].host), names[key]) for key in keys):
        assert time.monotonic() < deadline, {key: serves(Engine(rig[key].host), names[key]) for key in NODES}
        time.sleep(0.2)


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
    """Every container of the node by name (running or not, restart policy) but its fence, whose name is its generation
    and moves with every write (`fences` counts them: one once kvbake wrote); what the named serves run; the tags, the
    records (current, previous, adopted), the journal and diverged mark it keeps and its lock."""
    engine = Engine(rig[key].host)
    records = NodeState(NODES[key], engine).read()
    containers, fences = {}, 0
    for container in engine.client.container.list(all=True):
        if generation_of(container.name) is not None:
            fences += 1
            continue
        inspect = engine.container_inspect(container.id)
        containers[container.name] = (inspect["State"]["Running"], (inspect["HostConfig"].get("RestartPolicy") or {}).get("Name"))
    return {"containers": containers, "fences": fences, "serves": {name: serves(engine, name) for name in names},
            "current": engine.image_id_of(f"{repository}:current"), "previous": engine.image_id_of(f"{repository}:previous"),
            "records": tuple(r.id if r else None for r in (records.current, records.previous, records.adopted)),
            "transition": records.transition, "diverged": records.diverged, "lock": engine.container_inspect(LOCK_NAME) is not None}


def clear_nodes(rig: dict, names: tuple[str, ...]) -> None:
    for key in NODES:
        engine = Engine(rig[key].host)
        for name in names:
            engine.remove_container(name)
            engine.remove_container(f"{name}-kvbake-adopted")


def signed_by_a_reviewer(shipped: dict, folder: Path) -> Path:
    """A reviewer's key pair in `folder` and the shipped release signed by it (cosign reaches the rig's registry only);
    the public key."""
    from kvbake.cli import main

    with pytest.MonkeyPatch.context() as patch:
        for name, value in {"COSIGN_PASSWORD": "the reviewer's own", "HTTPS_PROXY": "http://127.0.0.1:9",
                            "HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1,localhost"}.items():
            patch.setenv(name, value)
        assert main(["keys", "--out", str(folder), "--name", "reviewer"]) == 0
        assert main(["sign", "--key", str(folder / "reviewer.key"), "--manifest", str(shipped["manifest"])]) == 0
    return folder / "reviewer.pub"
