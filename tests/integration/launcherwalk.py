"""The operator's walk over a community launcher's serve, shared by the launcher tests: two node engines holding the
serving base with Ray, the commands as the operator types them, and the checks each walk makes of the serve, its Ray
cluster and the runbook block it must match."""

from __future__ import annotations

import json
import os
import re
import shlex
from contextlib import contextmanager
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
from kvbake_rig.launchers import ADDRESSES, RAY_PORT, field_base, seed_nodes
from kvbake_rig.ports import fixed_ports_held
from kvbake_rig.profile_engine import DEFAULT_HOST
from kvbake_rig.serve_shapes import RIG_API_KEY, donor_clone

from conftest import run
from kvbake_rig.gcs_polls import gang_down_seen, stop_order_failures, timeline
from raywatch import GcsWatch

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


@contextmanager
def launcher_nodes(engine: Engine, folder: Path) -> Iterator[LauncherRig]:
    """Two node engines, each with a /dev/shm of its own as a second machine has, holding the field's serving image
    (the serving base with Ray and vLLM's distribution record) pulled from the rig's registry; the tiny model beside.
    tests/integration/conftest.py gives it to every launcher walk of a run (fixture `launcher_rig`)."""
    model = rs.tiny_model(folder / "corpus", DEFAULT_HOST)  # the base that makes it is on the default engine
    with LocalRegistry(cache_root() / "launchers-registry") as registry, \
            NodeEngine(folder / "a", name="la", own_shm=True) as node_a, \
            NodeEngine(folder / "b", name="lb", own_shm=True) as node_b:
        hosts = {"a": node_a.host, "b": node_b.host}
        build_host = os.environ.get("DOCKER_HOST") or DEFAULT_HOST  # the engine of this profile (lock, build and push run there)
        source = Engine(DEFAULT_HOST)
        image = seed_nodes(source, registry.address, [build_host, *hosts.values()], image=field_base(source, folder / "field-base"))
        yield LauncherRig(registry.address, hosts, image, model, engine)


@pytest.fixture()
def fixed_ports() -> Iterator[None]:
    """The launchers' fixed Ray ports, held while the test runs: another engine profile's pass waits for them."""
    with fixed_ports_held():
        yield


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
    --sign`, `rollback --to adopted`, `adopt --launcher-retired`, `lock --donor --code-change`) and the preset, presets named by their role."""
    words = argv[:2] if argv[0] == "base" else argv[:1]
    words += [option for option in ("--check", "--sign", "--launcher-retired", "--donor", "--code-change") if option in argv]
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
    from python_on_whales.exceptions import NoSuchContainer

    found = {}
    try:
        listed = Engine(host).client.container.list(all=True)
    except NoSuchContainer:  # one removed while the listing read it: list again
        listed = Engine(host).client.container.list(all=True)
    for container in listed:
        try:
            name = container.name  # python-on-whales inspects the container for it
        except NoSuchContainer:  # a stopped --rm container the engine removed after the listing
            continue
        inspect = Engine(host).container_inspect(container.id)  # None once the engine removed it
        if inspect is not None and not name.startswith("kvbake-fence-"):
            found[name] = (bool(inspect["State"]["Running"]), inspect["Config"]["Image"])
    return found



def containers_when(hosts: dict[str, str], expected: dict, timeout_s: float = 60.0) -> dict:
    """Every node's containers as `containers` lists them, once they are `expected` or at the deadline: `docker stop`
    of a `--rm` container returns when it stopped, and the engine removes it afterwards."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        found = {key: containers(host) for key, host in hosts.items()}
        if found == expected or time.monotonic() > deadline:
            return found
        time.sleep(1)


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


def remove_every_container(rig: LauncherRig) -> None:
    """What a walk leaves on the node engines, gone: the next walk of the module starts from empty nodes."""
    for host in rig.hosts.values():
        for container in Engine(host).client.container.list(all=True):
            Engine(host).remove_container(container.id)
