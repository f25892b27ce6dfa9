"""The serve shapes the field runs, started by hand on the rig's node engines as operators start them, and a whole-node
snapshot that sees every container by name and what its vLLM serve runs, process by process."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Callable

from kvbake.engines.adapters.client import Engine
from kvbake.ship.adapters.node_locks import LOCK_NAME
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.core.serve_reading import read_serve

from shiprig import BASE, CONTROL_LENGTH, STANDIN_VLLM, STANDIN_VLLM_DIR, standin_serve

NODES = {"a": "spark-a", "b": "spark-b"}
HEAD_ARGS = ("--nnodes", "2", "--node-rank", "0", "--master-addr", "127.0.0.1")
WORKER_ARGS = ("--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "--headless")
SERVED = ("--served-model-name", "standin", "--enable-prompt-tokens-details")


def run(client, name: str, command: list[str], **options: Any) -> str:
    return client.run(BASE, command[1:], entrypoint=command[0], name=name, detach=True, networks=["none"], mounts=[STANDIN_VLLM],
                      **options).id


def main_process(client, key: str) -> str:
    """(a) vLLM as the container's main process, multi-node: the head serves, the worker runs headless."""
    args = HEAD_ARGS if key == "a" else WORKER_ARGS
    return run(client, "vllm-serve", standin_serve(CONTROL_LENGTH, *SERVED, *args), restart="unless-stopped")


RAY_ARGS = ("--distributed-executor-backend", "ray")


def ray_cluster(client, key: str) -> str:
    """(b) run_cluster.sh: a container `node` whose main process is `ray start --block` on every node; vLLM started by
    docker exec on the head only, its workers placed on the other node as Ray actors (no vLLM serve process there)."""
    ray = ["python3", "/opt/kvbake-standin/ray", "start", "--block", "--head" if key == "a" else "--address=127.0.0.1:6379"]
    container = run(client, "node", ray, restart="no", shm_size="1g")
    if key == "a":
        client.container.execute("node", standin_serve(CONTROL_LENGTH, *SERVED, *RAY_ARGS), detach=True,
                                 envs={"VLLM_HOST_IP": "127.0.0.1", "NCCL_SOCKET_IFNAME": "lo"})
    return container


def eugr_cluster(client, key: str) -> str:
    """(b) launch-cluster.sh: `vllm_node` running `sleep infinity`; vLLM started by `docker exec -d … bash -c "eval
    <exports from /root/.bashrc> && vllm serve …"`, so part of its environment comes from a file in the container."""
    container = run(client, "vllm_node", ["sleep", "infinity"], restart="unless-stopped", init=True)
    client.container.execute("vllm_node", ["sh", "-c", "echo 'export VLLM_USE_V1=1' >> /root/.bashrc"])
    serve = " ".join(standin_serve(CONTROL_LENGTH, *SERVED, *(HEAD_ARGS if key == "a" else WORKER_ARGS)))
    client.container.execute("vllm_node", ["bash", "-c", f'eval "$(grep ^export /root/.bashrc)" && exec {serve}'], detach=True)
    return container


def rm_wrapper(client, key: str) -> str:
    """(c) a --rm container whose entrypoint is a mounted wrapper script (its Cmd never names vLLM), named per node."""
    args = [*SERVED, "--max-model-len", str(CONTROL_LENGTH), *(HEAD_ARGS if key == "a" else WORKER_ARGS)]
    return run(client, f"serve-{key}", ["sh", "/opt/kvbake-standin/serve.sh", *args], remove=True)


def compose_managed(client, key: str) -> str:
    """(c) a compose-managed serve: `docker-compose up -d` of one service (host-less: network_mode none, so compose
    creates no network), vLLM as its main process, its container name set by the compose file."""
    command = standin_serve(CONTROL_LENGTH, *SERVED, *(HEAD_ARGS if key == "a" else WORKER_ARGS))
    service = {"image": BASE, "container_name": "vllm-compose", "network_mode": "none", "restart": "unless-stopped",
               "entrypoint": command[:2], "command": command[2:], "volumes": [f"{STANDIN_VLLM_DIR}:/opt/kvbake-standin:ro"]}
    with tempfile.TemporaryDirectory() as folder:
        compose_file = Path(folder) / "docker-compose.yml"
        compose_file.write_text(json.dumps({"version": "2.4", "services": {"vllm": service}}))
        env = {**os.environ, "DOCKER_HOST": str(client.client_config.host)}
        done = subprocess.run(["docker-compose", "-p", f"spark{key}", "-f", str(compose_file), "up", "-d", "--no-build"],
                              env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return str(client.container.inspect("vllm-compose").id)


SHAPES: dict[str, tuple[Callable[[Any, str], str], dict[str, str]]] = {
    "main process": (main_process, {"a": "vllm-serve", "b": "vllm-serve"}),
    "ray cluster": (ray_cluster, {"a": "node", "b": "node"}),
    "eugr cluster": (eugr_cluster, {"a": "vllm_node", "b": "vllm_node"}),
    "--rm wrapper": (rm_wrapper, {"a": "serve-a", "b": "serve-b"}),
    "compose": (compose_managed, {"a": "vllm-compose", "b": "vllm-compose"}),
}


def start_shape(rig: dict, shape: str) -> dict[str, str]:
    """Start one shape on both nodes; each node's container ID."""
    start, _ = SHAPES[shape]
    return {key: start(rig[key].client(), key) for key in NODES}


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
