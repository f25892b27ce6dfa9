"""The serve shapes operators run, started by hand on a node engine with the serve stand-in, as operators start them."""

# The stand-in is the `vllm` console script of scripts/standin_vllm, mounted read-only; the rig's tests and
# scripts/bench_serve_shapes.py start the shapes from here.

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

BASE = "kvbake-standin/vllm-base:0.33.0"
RAY_BASE = f"{BASE}-ray"  # scripts/standin_ray_base.py: the stand-in base with ray 2.60.0, for the real-Ray shapes
STANDIN_VLLM_DIR = Path(__file__).resolve().parents[1] / "scripts" / "standin_vllm"
STANDIN_VLLM = ["type=bind", f"source={STANDIN_VLLM_DIR}", "target=/opt/kvbake-standin", "readonly"]
CONTROL_LENGTH = 163840  # the stand-in's control preset
MODEL = "/models/standin"
STANDIN = Path(__file__).resolve().parents[1] / "examples" / "standin"
SOURCE_ROOT = "/usr/local/lib/python3.11/dist-packages"  # where the stand-in base's python3 imports vllm from


def chain_overlay(folder: Path | None = None) -> tuple[tuple[str, str], ...]:
    """The seed's overlay: each file of the stand-in chain's result (or of `folder`) bind-mounted over the source root."""
    root = folder or STANDIN / "overlay"
    return tuple((str(path), f"{SOURCE_ROOT}/{path.relative_to(root).as_posix()}") for path in sorted(root.rglob("*")) if path.is_file())


def donor_clone(folder: Path, example: Path = STANDIN) -> tuple[Path, str]:
    """A clean git clone holding an example chain's patches (the stand-in's unless named), committed; its revision is
    the reviewed donor commit."""
    (folder / "patches").mkdir(parents=True)
    for patch in (example / "patches").glob("*.patch"):
        shutil.copyfile(patch, folder / "patches" / patch.name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
                "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
                "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z"})
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "the chain"]):
        subprocess.run(["git", "-C", str(folder), *argv], env=env, check=True, capture_output=True)
    revision = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], env=env, check=True, capture_output=True, text=True).stdout.strip()
    return folder, revision


@dataclass(frozen=True)
class ShapePorts:
    """Where a pair started by hand serves on the host network (ports free on this machine) and the model folder it
    mounts read-only: the API on the head, the multi-node rendezvous, the Ray head."""

    api: int
    rendezvous: int
    ray: int
    model_dir: Path
    overlay: tuple[tuple[str, str], ...] = ()  # (file on the host, path in the container): the seed's read-only bind mounts

    @property
    def serve_args(self) -> tuple[str, ...]:
        return ("--port", str(self.api))

    @property
    def model_mount(self) -> list[str]:
        return ["type=bind", f"source={self.model_dir}", f"target={MODEL}", "readonly"]

    @property
    def overlay_mounts(self) -> list[list[str]]:
        return [["type=bind", f"source={source}", f"target={target}", "readonly"] for source, target in self.overlay]


def standin_serve(max_model_len: int = CONTROL_LENGTH, *extra: str) -> list[str]:
    """The stand-in vLLM serve's command line, as a serve started by hand runs it (mount STANDIN_VLLM)."""
    return ["python3", "/opt/kvbake-standin/vllm", "serve", MODEL, "--max-model-len", str(max_model_len), *extra]


SERVED = ("--served-model-name", "standin", "--enable-prompt-tokens-details")


def multi_node_args(key: str, ports: ShapePorts) -> tuple[str, ...]:
    """vLLM's per-node options of a two-node serve: the head (node a) leads the rendezvous, the worker runs headless."""
    rank = ("--node-rank", "0") if key == "a" else ("--node-rank", "1")
    return ("--nnodes", "2", *rank, "--master-addr", "127.0.0.1", "--master-port", str(ports.rendezvous),
            *(() if key == "a" else ("--headless",)))


def run(client, name: str, command: list[str], ports: ShapePorts, image: str = BASE, **options: Any) -> str:
    return client.run(image, command[1:], entrypoint=command[0], name=name, detach=True, networks=["host"],
                      mounts=[STANDIN_VLLM, ports.model_mount, *ports.overlay_mounts], **options).id


def main_process(client, key: str, ports: ShapePorts) -> str:
    """(a) vLLM as the container's main process, multi-node: the head serves, the worker runs headless."""
    command = standin_serve(CONTROL_LENGTH, *SERVED, *ports.serve_args, *multi_node_args(key, ports))
    return run(client, "vllm-serve", command, ports, restart="unless-stopped")


RAY_ARGS = ("--distributed-executor-backend", "ray")


def ray_cluster(client, key: str, ports: ShapePorts) -> str:
    """(b) run_cluster.sh: a container `node` whose main process is `ray start --block` on every node; vLLM started by
    docker exec on the head only, its workers placed on the other node as Ray actors (no vLLM serve process there)."""
    role = f"--head --port={ports.ray}" if key == "a" else f"--address=127.0.0.1:{ports.ray}"
    ray = ["python3", "/opt/kvbake-standin/ray", "start", "--block", *role.split()]
    container = run(client, "node", ray, ports, restart="no", shm_size="1g")
    if key == "a":
        client.container.execute("node", standin_serve(CONTROL_LENGTH, *SERVED, *ports.serve_args, *RAY_ARGS), detach=True,
                                 envs={"VLLM_HOST_IP": "127.0.0.1", "NCCL_SOCKET_IFNAME": "lo"})
    return container


def eugr_cluster(client, key: str, ports: ShapePorts) -> str:
    """(b) launch-cluster.sh: `vllm_node` running `sleep infinity`, `--privileged`; vLLM started by `docker exec -d …
    bash -c "eval <exports from /root/.bashrc> && vllm serve …"`, so part of its environment comes from a file in the
    container."""
    container = run(client, "vllm_node", ["sleep", "infinity"], ports, restart="unless-stopped", init=True, privileged=True)
    client.container.execute("vllm_node", ["sh", "-c", "echo 'export VLLM_USE_V1=1' >> /root/.bashrc"])
    serve = " ".join(standin_serve(CONTROL_LENGTH, *SERVED, *ports.serve_args, *multi_node_args(key, ports)))
    client.container.execute("vllm_node", ["bash", "-c", f'eval "$(grep ^export /root/.bashrc)" && exec {serve}'], detach=True)
    return container


# Ray turns a node address of 127.0.0.1 (or localhost) into the machine's outward address, so the real-Ray nodes take
# other loopback addresses; their GCS and raylets then listen on every interface, of which this machine has loopback.
RAY_NODE_IPS = {"a": "127.0.0.2", "b": "127.0.0.3"}
# Even with --disable-usage-stats, a Ray head probes cloud metadata (169.254.169.254, metadata.google.internal) and
# reports to usage-stats.ray.io through Python's HTTP clients; on the host network that would leave the machine. So
# every Ray container sends its HTTP to a closed loopback port (9), loopback itself excepted, and turns usage stats off.
RAY_NO_EGRESS = {
    "RAY_USAGE_STATS_ENABLED": "0",
    **{name: "http://127.0.0.1:9" for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")},
    **{name: ",".join(("localhost", "127.0.0.1", *RAY_NODE_IPS.values())) for name in ("NO_PROXY", "no_proxy")},
}
# A small Ray node: one CPU and Ray's smallest object store (the image has no dashboard packages: none starts).
RAY_LIGHT = ("--num-cpus=1", f"--object-store-memory={75 * 1024 * 1024}", "--disable-usage-stats")


def ray_start(key: str, ports: ShapePorts, block: bool) -> list[str]:
    """A real `ray start` of one node: the head on the Ray port of its loopback address, or a worker joining it."""
    role = ["--head", f"--port={ports.ray}"] if key == "a" else [f"--address={RAY_NODE_IPS['a']}:{ports.ray}"]
    return ["ray", "start", *(["--block"] if block else []), *role, f"--node-ip-address={RAY_NODE_IPS[key]}", *RAY_LIGHT]


def exec_ray_serve(client, name: str, ports: ShapePorts) -> None:
    """The head's vLLM stand-in started beside its Ray node, on the Ray executor, at the head's own address."""
    client.container.execute(name, standin_serve(CONTROL_LENGTH, *SERVED, *ports.serve_args, *RAY_ARGS), detach=True,
                             envs={"VLLM_HOST_IP": RAY_NODE_IPS["a"]})


def real_ray_cluster(client, key: str, ports: ShapePorts) -> str:
    """(b) run_cluster.sh on real Ray: a container `node` whose main process is `ray start --block` (the head, or a
    worker joining it on loopback, which waits for the head's GCS); the vLLM stand-in started by docker exec on the head
    only."""
    container = run(client, "node", ray_start(key, ports, block=True), ports, image=RAY_BASE, restart="no", shm_size="1g",
                    envs=RAY_NO_EGRESS)
    if key == "a":
        exec_ray_serve(client, "node", ports)
    return container


def eugr_current_cluster(client, key: str, ports: ShapePorts) -> str:
    """(b) current launch-cluster.sh on real Ray: `vllm_node` run with --rm and `sleep infinity`; `ray start` (no
    --block: it returns once Ray's daemons run) by docker exec on every node, the head first; the vLLM stand-in by
    docker exec on the head only."""
    container = run(client, "vllm_node", ["sleep", "infinity"], ports, image=RAY_BASE, remove=True, init=True, shm_size="1g",
                    envs=RAY_NO_EGRESS)
    client.container.execute("vllm_node", ray_start(key, ports, block=False))
    if key == "a":
        exec_ray_serve(client, "vllm_node", ports)
    return container


# What a serve's secrets look like on the rig: a value shaped like a Hugging Face token and an API key; never real ones.
RIG_TOKEN = "hf_" + "kvbakeRigOnlyToken" * 2
RIG_API_KEY = "sk-kvbake-rig-only-0123456789"
RIG_SECRETS = {"HF_TOKEN": RIG_TOKEN, "HUGGING_FACE_HUB_TOKEN": RIG_TOKEN, "VLLM_API_KEY": RIG_API_KEY}


def eugr_with_secrets(client, key: str, ports: ShapePorts) -> str:
    """(b) eugr's shape as operators run it with a token: HF_TOKEN in the container's environment, another token given
    by `docker exec -e`, and vLLM's `--api-key` on its command line."""
    container = run(client, "vllm_tok", ["sleep", "infinity"], ports, restart="unless-stopped", init=True,
                    envs={"HF_TOKEN": RIG_TOKEN})
    serve = standin_serve(CONTROL_LENGTH, *SERVED, *ports.serve_args, *multi_node_args(key, ports), "--api-key", RIG_API_KEY)
    client.container.execute("vllm_tok", serve, detach=True, envs={"HUGGING_FACE_HUB_TOKEN": RIG_TOKEN})
    return container


def rm_wrapper(client, key: str, ports: ShapePorts) -> str:
    """(c) a --rm container whose entrypoint is a mounted wrapper script (its Cmd never names vLLM), named per node."""
    args = [*SERVED, "--max-model-len", str(CONTROL_LENGTH), *ports.serve_args, *multi_node_args(key, ports)]
    return run(client, f"serve-{key}", ["sh", "/opt/kvbake-standin/serve.sh", *args], ports, remove=True)


def compose_managed(client, key: str, ports: ShapePorts) -> str:
    """(c) a compose-managed serve: `docker-compose up -d` of one service (network_mode host, so compose creates no
    network), vLLM as its main process, its container name set by the compose file."""
    command = standin_serve(CONTROL_LENGTH, *SERVED, *ports.serve_args, *multi_node_args(key, ports))
    service = {"image": BASE, "container_name": "vllm-compose", "network_mode": "host", "restart": "unless-stopped",
               "entrypoint": command[:2], "command": command[2:],
               "volumes": [f"{STANDIN_VLLM_DIR}:/opt/kvbake-standin:ro", f"{ports.model_dir}:{MODEL}:ro",
                           *(f"{source}:{target}:ro" for source, target in ports.overlay)]}
    with tempfile.TemporaryDirectory() as folder:
        compose_file = Path(folder) / "docker-compose.yml"
        compose_file.write_text(json.dumps({"version": "2.4", "services": {"vllm": service}}))
        env = {**os.environ, "DOCKER_HOST": str(client.client_config.host)}
        done = subprocess.run(["docker-compose", "-p", f"spark{key}", "-f", str(compose_file), "up", "-d", "--no-build"],
                              env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return str(client.container.inspect("vllm-compose").id)


SHAPES: dict[str, tuple[Callable[[Any, str, ShapePorts], str], dict[str, str]]] = {
    "main process": (main_process, {"a": "vllm-serve", "b": "vllm-serve"}),
    "ray cluster": (ray_cluster, {"a": "node", "b": "node"}),
    "eugr cluster": (eugr_cluster, {"a": "vllm_node", "b": "vllm_node"}),
    "eugr cluster, secrets": (eugr_with_secrets, {"a": "vllm_tok", "b": "vllm_tok"}),
    "--rm wrapper": (rm_wrapper, {"a": "serve-a", "b": "serve-b"}),
    "compose": (compose_managed, {"a": "vllm-compose", "b": "vllm-compose"}),
}
# The shapes on real Ray (RAY_BASE on both nodes): a Ray cluster whose worker runs no vLLM process.
REAL_RAY_SHAPES: dict[str, tuple[Callable[[Any, str, ShapePorts], str], dict[str, str]]] = {
    "ray cluster, real ray": (real_ray_cluster, {"a": "node", "b": "node"}),
    "eugr current, real ray": (eugr_current_cluster, {"a": "vllm_node", "b": "vllm_node"}),
}


def within_this_machines_memlock(deploy_file: Path) -> int:
    """The locked-memory limit the deployment gives its nodes, lowered to the test machine's hard limit when the kernel
    lets no container raise it (a sandbox without CAP_SYS_RESOURCE, often `ulimit -Hl` 8192 KiB); on a Spark
    `memlock: -1` runs as init wrote it. The value the nodes get."""
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    if hard == resource.RLIM_INFINITY:
        return -1
    document = yaml.safe_load(deploy_file.read_text())
    for node in document["nodes"]:
        ulimits = (node.get("launch") or {}).get("ulimits") or {}
        if "memlock" in ulimits:
            ulimits["memlock"] = hard
    deploy_file.write_text(yaml.safe_dump(document, sort_keys=False))
    return hard
