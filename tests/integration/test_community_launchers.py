"""The community launchers as their authors wrote them (tests/launchers), with real Ray and real vLLM (the CPU build):
each starts today's serve on two node engines, then an operator walks the runbook's commands over it: init (which names
the launcher's ties), the launcher retired, lock from the donor with the served-bytes proof, build, push --sign, adopt,
deploy, verify-running, validate against a serve that needs its API key, rollback, rollback --to adopted (the
launcher's own serve under its own names), hand-back; then the launcher runs as before kvbake and adopt works again.

vLLM's CPU build cannot run one tensor-parallel group across two nodes, so real vLLM serves on the head alone (a group
of one rank) and the worker is a real Ray node that joins the head's cluster; kvbake still restarts both as a gang.
Every test here binds the scripts' fixed ports (Ray 6379): they run once, in one engine profile (once_on_classic), and
never beside another pass that binds them."""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import httpx
import pytest
import yaml

from kvbake.engines.adapters.client import Engine
from kvbake.engines.adapters.manifestcache import cache_root
from kvbake_rig import LocalRegistry, NodeEngine
from kvbake_rig import realserve as rs
from kvbake_rig.launchers import ADDRESSES, MODEL_IN_CONTAINER, RAY_PORT, RunClusterPair, ray_nodes_alive, seed_nodes
from kvbake_rig.ports import free_port
from kvbake_rig.profile_engine import DEFAULT_HOST
from kvbake_rig.serve_shapes import RIG_API_KEY, donor_clone

from conftest import run
from kvbake_rig.gcs_polls import gang_down_seen, stop_order_failures, timeline
from raywatch import GcsWatch

pytestmark = [pytest.mark.docker, pytest.mark.field_engines_only, pytest.mark.once_on_classic]
NODES = {"a": "spark-a", "b": "spark-b"}
LAUNCHER_CONTAINER = "vllm-serve"
# The serve as the operator started it: the realserve example's control arguments, its API key, no switch.
SERVE_ARGS = ("--served-model-name", rs.SERVED_NAME, "--max-model-len", "4096", "--block-size", "128", "--dtype", "float32",
              "--kv-cache-memory-bytes", "67108864", "--enable-prefix-caching", "--enable-prompt-tokens-details", "--enforce-eager")
# validate's smallest plan that still runs every step on the tiny model (docs/operate.md)
VALIDATE = ("--prefix-tokens", "1000", "--corruption-tokens", "800", "--depths", "600,1200", "--pressure", "0", "--mem-floor", "1")


@dataclass(frozen=True)
class LauncherRig:
    """Two node engines that hold the serving base with Ray as pulled from the rig's registry, the tiny model, and the
    reference the nodes run."""

    registry: str
    hosts: dict[str, str]
    image: str
    model: rs.TinyModel
    engine: Engine


@pytest.fixture(scope="module")
def launcher_rig(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LauncherRig]:
    folder = tmp_path_factory.mktemp("launchers")
    model = rs.tiny_model(folder / "corpus", DEFAULT_HOST)  # the base that makes it is on the default engine
    with LocalRegistry(cache_root() / "launchers-registry") as registry, \
            NodeEngine(folder / "a", name="la") as node_a, NodeEngine(folder / "b", name="lb") as node_b:
        hosts = {"a": node_a.host, "b": node_b.host}
        build_host = os.environ.get("DOCKER_HOST") or DEFAULT_HOST  # the engine of this profile (lock, build and push run there)
        image = seed_nodes(Engine(DEFAULT_HOST), registry.address, [build_host, *hosts.values()])
        yield LauncherRig(registry.address, hosts, image, model, engine)


class Operator:
    """The commands an operator types, in the project folder init writes, with the environment kvbake runs in."""

    def __init__(self, capsys, rig: LauncherRig, folder: Path, monkeypatch) -> None:
        self.capsys, self.rig, self.project = capsys, rig, folder / "project"
        self.donor, self.revision = donor_clone(folder / "donor", rs.EXAMPLE)
        self.reviewer = folder / "reviewer"
        self.typed: list[str] = []  # each command that ran, as step_of names it
        monkeypatch.setenv("VLLM_API_KEY", RIG_API_KEY)  # the serve's key, by name, where kvbake runs
        monkeypatch.setenv("COSIGN_PASSWORD", "the reviewer's own")
        for name in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):  # cosign reaches the rig's registry only
            monkeypatch.setenv(name, "http://127.0.0.1:9")
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.setenv(name, ",".join(("127.0.0.1", "localhost", *ADDRESSES.values())))

    def __call__(self, *argv: str) -> str:
        code, out, err = run(self.capsys, *argv)
        assert code == 0, f"{argv}: {err}"
        self.typed.append(step_of(list(argv)))
        return out

    def in_project(self, *argv: str) -> str:
        return self(*argv, "--manifest", str(self.project / "manifest.yaml"))

    def ship(self, *argv: str) -> str:
        return self.in_project(*argv, "--deploy", str(self.project / "deploy.yaml"))

    def init(self) -> tuple[dict, str]:
        self("keys", "--out", str(self.reviewer), "--name", "reviewer")
        nodes = [f"--node={name}={self.rig.hosts[key]}" for key, name in NODES.items()]
        out = self("init", *nodes, "--template", str(rs.EXAMPLE / "manifest.yaml"), "--out", str(self.project),
                   "--registry", self.rig.registry, "--donor-revision", self.revision, "--launcher", rs.launch_vllm_command(),
                   "--signing-key", str(self.reviewer / "reviewer.pub"))
        return {name: yaml.safe_load((self.project / name).read_text()) for name in ("manifest.yaml", "deploy.yaml")}, out

    def refused(self, *argv: str) -> tuple[int, str]:
        code, out, err = run(self.capsys, *argv, "--manifest", str(self.project / "manifest.yaml"), "--deploy", str(self.project / "deploy.yaml"))
        assert code != 0 and out == "" and err.count("\n") == 1, (code, out, err)
        return code, err

    def digest(self) -> str:
        (record,) = (self.project / ".kvbake" / "pushes").glob("*.json")
        return json.loads(record.read_text())["pinned"]

    def deploy(self, preset: str) -> str:
        return self.ship("deploy", "--preset", preset, "--image", self.digest(), "--reason", preset)


def step_of(argv: list[str]) -> str:
    """A command as the runbook block and the walk are compared: its words (`base sync`, `config --check`, `push
    --sign`, `rollback --to adopted`, `adopt --launcher-retired`) and the preset, presets named by their role."""
    words = argv[:2] if argv[0] == "base" else argv[:1]
    words += [option for option in ("--check", "--sign", "--launcher-retired", "--donor") if option in argv]
    if "--to" in argv:
        words += ["--to", argv[argv.index("--to") + 1]]
    if "--preset" in argv:
        words.append("packing" if argv[argv.index("--preset") + 1].startswith("packing") else argv[argv.index("--preset") + 1])
    return " ".join(words)


def documented_walk(heading: str) -> list[str]:
    """The steps of the console block under `heading` in docs/launchers.md."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "launchers.md").read_text(encoding="utf-8")
    body = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"^```console\n(.*?)^```$", body, re.MULTILINE | re.DOTALL)
    return [step_of(shlex.split(line)[1:]) for line in block.splitlines() if line.strip()]


def serves(port: int, key: str | None = RIG_API_KEY) -> bool:
    """Whether the head answers its models list, with the key when given (401 without it)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        return httpx.get(f"http://{ADDRESSES['a']}:{port}/v1/models", headers=headers, timeout=5, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def wait_serving(port: int, timeout_s: float = 300.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not serves(port):
        assert time.monotonic() < deadline, f"the head never answered on port {port}"
        time.sleep(2)


def containers(host: str) -> dict[str, tuple[bool, str]]:
    """Every container of a node by name: running, and its image reference; kvbake's fence (its name moves) left out."""
    found = {}
    for container in Engine(host).client.container.list(all=True):
        if not container.name.startswith("kvbake-fence-"):
            inspect = Engine(host).container_inspect(container.id)
            found[container.name] = (bool(inspect["State"]["Running"]), inspect["Config"]["Image"])
    return found


@pytest.fixture()
def run_cluster(launcher_rig: LauncherRig, tmp_path: Path) -> Iterator[tuple[RunClusterPair, dict[str, str], int]]:
    """run_cluster.sh as written, head then worker, and vLLM exec'd on the head with its API key: the operator's serve."""
    pair = RunClusterPair(launcher_rig.hosts, tmp_path / "run_cluster", launcher_rig.model.folder, image=launcher_rig.image)
    port = free_port()
    try:
        names = pair.start()
        pair.exec_serve(names["a"], ["--model", MODEL_IN_CONTAINER, "--port", str(port), *SERVE_ARGS, "--api-key", RIG_API_KEY])
        wait_serving(port)
        yield pair, names, port
    finally:
        pair.interrupt()
        for host in launcher_rig.hosts.values():
            for container in Engine(host).client.container.list(all=True):
                Engine(host).remove_container(container.id)


def gang_restarts(engine: Engine, steps: dict, addresses: set[str] | None = None) -> tuple[list[str], set[str]]:
    """Run each step (a deploy or rollback) under a watch on the head's GCS: every old Ray node is gone before the
    first new one runs, and each new cluster forms of both nodes at the addresses the launcher's own cluster had
    (Ray's own node table: the head at the address its script gave it; the worker, which run_cluster.sh starts with
    `--address` only, where Ray finds it: on this rig the loopback source address, on a Spark its own). The new
    clusters' ids, and those addresses (read from the first old cluster unless given)."""
    formed = []
    with GcsWatch(engine, f"{ADDRESSES['a']}:{RAY_PORT}") as watch:
        for name, step in steps.items():
            old, new, polls = watch.gang_restart(step)
            assert stop_order_failures(old, new, polls) == [], f"{name}: {timeline(polls)}"
            assert gang_down_seen(new, polls), f"{name}: the old gang was down first: {timeline(polls)}"
            addresses = addresses or {info["ip"] for info in old["nodes"].values()}
            assert ADDRESSES["a"] in addresses and len(addresses) == 2, f"the launcher's cluster: {addresses}"
            assert {info["ip"] for info in new["nodes"].values()} == addresses, name
            formed.append(new["cluster"])
    return formed, addresses or set()


def test_run_cluster_sh_as_written_is_read_replaced_validated_and_brought_back_under_its_own_names(
        capsys, engine, launcher_rig, run_cluster, tmp_path, monkeypatch):
    pair, names, port = run_cluster
    assert ray_nodes_alive(launcher_rig.hosts["a"], names["a"]) == 2, "the worker's Ray node joined the head's"
    assert serves(port) and not serves(port, key=None), "the serve needs its API key"
    before = {key: containers(host) for key, host in launcher_rig.hosts.items()}
    pair.detach()  # the runbook's "retire your launcher": the script ends without its EXIT trap, the serve runs on
    assert serves(port) and {key: containers(host) for key, host in launcher_rig.hosts.items()} == before
    ops = Operator(capsys, launcher_rig, tmp_path, monkeypatch)

    written, said = ops.init()
    deploy = written["deploy.yaml"]
    assert f"tied to its launcher: spark-a: {names['a']} was started by `docker run` in the foreground" in said
    assert f"tied to its launcher: spark-b: {names['b']} was started by `docker run` in the foreground" in said
    assert "spark-a: its vLLM (pid " in said and "writes to the interactive `docker exec` that started it" in said
    assert {key: containers(host) for key, host in launcher_rig.hosts.items()} == before, "init changes nothing on the nodes"
    assert [(n["name"], n["container"], n.get("address")) for n in deploy["nodes"]] == [
        ("spark-a", names["a"], ADDRESSES["a"]), ("spark-b", names["b"], ADDRESSES["b"])]
    assert deploy["nodes"][0]["launch"]["ray_start"] == ["--node-ip-address={node_address}"], "the head's own option"
    assert "ray_start" not in deploy["nodes"][1]["launch"], "the worker's ray start was given no option of its own"
    env = deploy["launcher"]["env"]
    assert (env["SHAPE"], env["RAY_PORT"], env["TENSOR_PARALLEL_SIZE"]) == ("ray", str(RAY_PORT), "1")
    assert json.loads(env["SECRET_ENV"]) == ["VLLM_API_KEY"] and RIG_API_KEY not in json.dumps(written)
    control = written["manifest.yaml"]["presets"]["control"]
    assert control["max_model_len"] == 4096 and control["launcher_args"] == ["--port", str(port), *SERVE_ARGS[:2], *SERVE_ARGS[4:]]
    assert "spark-a serves preset control" in ops.ship("config", "--check")

    out = ops.in_project("lock", "--donor", str(ops.donor))
    assert "imported from the donor" in out
    ops.in_project("build")
    ops.in_project("push", "--sign", str(ops.reviewer / "reviewer.key"))
    ops.ship("base", "sync")
    code, err = ops.refused("adopt", "--reason", "run_cluster.sh pair")
    assert code == 12 and "still tied to its launcher" in err and "adopt --launcher-retired" in err
    assert {key: containers(host) for key, host in launcher_rig.hosts.items()} == before, "a refused adopt changes nothing"
    ops.ship("adopt", "--reason", "run_cluster.sh pair", "--launcher-retired")  # its scripts were ended without their traps
    ops.ship("verify-running")

    steps = {"deploy control over the adopted cluster": lambda: ops.deploy("control"),
             "deploy packing over kvbake's cluster": lambda: ops.deploy("packing-x2")}
    clusters, addresses = gang_restarts(engine, steps)
    head = Engine(launcher_rig.hosts["a"])
    assert "KV cache size" in head.container_logs(LAUNCHER_CONTAINER), "vLLM's output is in docker logs of kvbake's serve"
    assert not any(name.startswith("node-") and state[0] for key in NODES for name, state in containers(launcher_rig.hosts[key]).items())
    out = ops.ship("verify-running")
    assert "all ranks agree" in out
    ops.in_project("validate", "--preset", "packing-x2", "--endpoint", f"http://{ADDRESSES['a']}:{port}",
                   "--deploy", str(ops.project / "deploy.yaml"), "--corpus", str(launcher_rig.model.corpus), *VALIDATE)
    clusters += gang_restarts(engine, {"rollback to control": lambda: ops.ship("rollback"),
                                       "rollback --to adopted": lambda: ops.ship("rollback", "--to", "adopted")}, addresses)[0]
    assert len(set(clusters)) == len(clusters), "every step formed a cluster of its own"
    ops.ship("verify-running")
    back = {key: containers(host) for key, host in launcher_rig.hosts.items()}
    for key in NODES:
        assert back[key][names[key]] == before[key][names[key]], "the launcher's own container, under its own name, runs again"
        assert LAUNCHER_CONTAINER not in back[key], "kvbake's serve is gone"
    assert serves(port) and ray_nodes_alive(launcher_rig.hosts["a"], names["a"]) == 2

    out = ops.ship("hand-back")
    assert ops.typed == documented_walk("The `run_cluster.sh` pair, start to home"), "docs/launchers.md's block is this walk"
    home = {key: containers(host) for key, host in launcher_rig.hosts.items()}
    assert home == {key: {names[key]: before[key][names[key]]} for key in NODES}, "the launcher's containers alone, kvbake's gone"
    for key, node in NODES.items():
        assert Engine(launcher_rig.hosts[key]).image_id_of(f"{written['manifest.yaml']['output']['repository']}:current") is None
        assert f"{node}: {names[key]} runs on" in out
        assert "deploy" in (ops.project / ".kvbake" / "home" / f"{node}.audit.log").read_text(), "the audit log is kept here"
    assert serves(port), "hand-back never touches the serve"
    assert "nothing of kvbake's is left" in ops.ship("hand-back"), "a second run is harmless"

    # the launcher as before kvbake: its serve stopped as its own trap stops it, then run_cluster.sh started again
    for key in ("b", "a"):
        Engine(launcher_rig.hosts[key]).client.container.stop(names[key])
        Engine(launcher_rig.hosts[key]).client.container.remove(names[key])
    again = pair.start()
    pair.exec_serve(again["a"], ["--model", MODEL_IN_CONTAINER, "--port", str(port), *SERVE_ARGS, "--api-key", RIG_API_KEY])
    wait_serving(port)
    assert set(again.values()).isdisjoint(names.values()) and ray_nodes_alive(launcher_rig.hosts["a"], again["a"]) == 2
    pair.detach()
    out = ops.ship("adopt", "--reason", "the launcher's new run", "--launcher-retired")  # new node-<n> names, found by processes
    assert all(f"{node}: adopted {again[key]} " in out for key, node in NODES.items()), out
    ops.ship("verify-running")
