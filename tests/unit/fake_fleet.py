"""A fleet of two fake nodes for the ship core's unit tests: releases, a fake launcher process that builds each rank
the way a real one might (or wrongly), the command line over the fleet, and a whole-state snapshot."""

from __future__ import annotations

import hashlib
import json
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Iterator

import pytest

import kvbake.ship.adapters.transitions as transitions
from kvbake.deployfile import Deployment, Launcher, Node
from kvbake.engines.core.procfs import ImportOrigin
from kvbake.errors import DivergedError
from kvbake.ship.adapters import fleet as fleet_module
from kvbake.ship.adapters import rollout
from kvbake.ship.adapters.adoption import adopt
from kvbake.ship.adapters.fleet import Fleet
from kvbake.ship.adapters.node_locks import LOCK_NAME, HeldLocks
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.core.create_spec import create_spec
from kvbake.ship.core.journal import read_diverged, read_journal
from kvbake.ship.core.release import Release, runtime_config

from fake_engine import FakeEngine

REPO = "reg:5000/kvbake/x"
BASE = ("sha256:base",)
CONTAINER = "serve"
SWITCH = "S"
SOURCE_ROOT = "/src"
LAUNCHER = ("launch",)
STANDIN = Path(__file__).resolve().parents[2] / "examples" / "standin" / "manifest.yaml"


def sha256_of(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def release(preset: str, switches: dict[str, str], args: tuple[str, ...] = ()) -> Release:
    """A release whose pull reference names its manifest's digest, which is not its config digest (as in a registry)."""
    digest = sha256_of(preset)
    return Release(image=f"{REPO}@{sha256_of('manifest of ' + preset)}", config_digest=digest, layers=(*BASE, "sha256:thin-" + preset),
                   labels={"k": preset},
                   preset=preset, switches=switches, max_model_len=4096, launcher_args=args, deployed_by="ops", deployed_at="t",
                   reason="r", override=None, image_config=runtime_config({}))


CONTROL = release("control", {})
PACKING = release("packing", {"S": "3"})
OTHER = release("other", {"S": "1"})


@dataclass
class World:
    fleet: Fleet
    engines: dict[str, FakeEngine]
    failing_launch: set[str] = field(default_factory=set)  # "node:preset" launches that fail
    launches: list[str] = field(default_factory=list)
    wrong_launch: dict[str, str] = field(default_factory=dict)  # "node:preset" -> the fault (WRONG_RANKS) its launcher builds

    def launch(self, env: dict[str, str]) -> subprocess.CompletedProcess:
        """The launcher process on one node: it reads the switch set and arguments kvbake wrote for it and (re)creates
        the serving container from $KVBAKE_IMAGE, as it was told or with the fault asked for; or it fails."""
        key = f"{env['KVBAKE_NODE']}:{env['KVBAKE_PRESET']}"
        self.launches.append(key)
        if key in self.failing_launch:
            return subprocess.CompletedProcess(list(LAUNCHER), 1, "", "starting the serve\nGPU busy\n")
        switches = [line for line in Path(env["KVBAKE_ENV_FILE"]).read_text().splitlines() if line and not line.startswith("#")]
        args = tuple(json.loads(env["KVBAKE_LAUNCHER_ARGS_JSON"]))
        build = WRONG_RANKS[self.wrong_launch.get(key, "clean")]
        build(self.engines[env["KVBAKE_NODE"]], env["KVBAKE_CONTAINER"], env["KVBAKE_IMAGE"], switches, args)
        return subprocess.CompletedProcess(list(LAUNCHER), 0, "", "")

    def offer(self, r: Release, config: dict | None = None) -> None:
        """Every node's registry serves `r` under its pull reference (with the image config `config`, else its own)."""
        image_config = dict(r.image_config or {}) if config is None else config
        for engine in self.engines.values():
            engine.registry[r.image] = {"Id": r.config_digest, "RootFS": {"Layers": list(r.layers)},
                                        "Config": {**image_config, "Labels": dict(r.labels)}}

    def hold_base(self, reference: str, layers: tuple[str, ...]) -> None:
        """Every node holds a base image with `layers` under `reference`."""
        for engine in self.engines.values():
            engine.images[layers[-1]] = {"Id": layers[-1], "RootFS": {"Layers": list(layers)}, "Config": {"Labels": {}, "Env": []}}
            engine.configs[layers[-1]] = layers[-1]
            engine.tags[reference] = layers[-1]

    def snapshot(self) -> dict:
        """Each node's whole state: tag IDs, both records, the journal it keeps, its diverged mark, its lock and what
        serves; plus this host's journal and diverged marker."""
        nodes = {}
        for name, engine in self.engines.items():
            records = NodeState(name, engine).read()
            serving = engine.containers.get(CONTAINER)
            nodes[name] = {"current": engine.image_id_of(f"{REPO}:current"), "previous": engine.image_id_of(f"{REPO}:previous"),
                           "records": (records.current.id if records.current else None, records.previous.id if records.previous else None),
                           "transition": (records.transition or {}).get("id"), "diverged": records.diverged,
                           "lock": "kvbake-lock" in engine.containers,
                           "serving": (serving["Image"], tuple(serving["Config"]["Env"])) if serving else None}
        folder = self.fleet.deployment.state_dir
        return {"nodes": nodes, "journal": read_journal(folder), "diverged": read_diverged(folder)}

    def host(self, folder: Path, stale_after_s: float = 900) -> Fleet:
        """The same nodes seen from another operator host, whose deployment file (and so its journal) is in `folder`."""
        d = self.fleet.deployment
        return self.fleet_of(Deployment(folder / "deploy.yaml", d.nodes, d.launcher, stale_after_s))

    def fleet_of(self, deployment: Deployment) -> Fleet:
        """The world's nodes under `deployment`."""
        return Fleet(deployment, self.engines, REPO, (SWITCH,), (f"{SOURCE_ROOT}/x.py",), SOURCE_ROOT)

    def command_line(self, monkeypatch: pytest.MonkeyPatch, folder: Path | None = None, manifest: Path = STANDIN) -> list[str]:
        """The options that point kvbake's command line at this world: the manifest (the stand-in's), and a deployment
        file naming the world's nodes, in `folder` (another operator host's) or where the world's is (this host's); the
        command line's fleet connects to the fake nodes."""
        d = self.fleet.deployment
        path = d.path if folder is None else folder / d.path.name
        document = {"format": 1, "lock_stale_after_s": d.lock_stale_after_s,
                    "nodes": [{"name": n.name, "host": n.host, "role": n.role} for n in d.nodes],
                    "launcher": {"command": list(d.launcher.command), "container": d.launcher.container, "timeout_s": d.launcher.timeout_s}}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(document))
        monkeypatch.setattr(fleet_module, "make_fleet", lambda deployment, manifest, lock: self.fleet_of(deployment))
        return ["--manifest", str(manifest), "--deploy", str(path)]

    def advance(self, seconds: float) -> None:
        """Every node's clock moves on (a lock nobody renews grows stale)."""
        for engine in self.engines.values():
            engine.clock += seconds


def make_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: str = "classic") -> World:
    """Two nodes holding the base, whose registry serves CONTROL, PACKING and OTHER; their launcher is the world's."""
    engines = {name: FakeEngine(name, store) for name in ("a", "b")}
    deployment = Deployment(tmp_path / "deploy.yaml", (Node("a", "unix:///a", "head"), Node("b", "unix:///b", "worker")),
                            Launcher(LAUNCHER, CONTAINER, 10), 900)
    w = World(Fleet(deployment, engines, REPO, (SWITCH,), (f"{SOURCE_ROOT}/x.py",), SOURCE_ROOT), engines)
    w.hold_base("base:1", BASE)
    for r in (CONTROL, PACKING, OTHER):
        w.offer(r, {"Env": []})

    def run(argv: list[str], env: dict[str, str], **kwargs) -> subprocess.CompletedProcess:
        return w.launch(env) if tuple(argv) == LAUNCHER else subprocess.run(argv, env=env, **kwargs)

    monkeypatch.setattr(transitions, "subprocess", SimpleNamespace(run=run, TimeoutExpired=subprocess.TimeoutExpired))
    return w


# -- the ranks a launcher may build: as told, or wrong in one way kvbake must catch ---------------------------------

Build = Callable[[FakeEngine, str, str, list[str], tuple[str, ...]], None]


def clean_rank(engine: FakeEngine, container: str, image: str, env: list[str], args: tuple[str, ...]) -> None:
    engine.run_serving(container, image, env, args)


def wrong_switch(engine: FakeEngine, container: str, image: str, env: list[str], args: tuple[str, ...]) -> None:
    """A launcher that sets the switch from a stale file of its own."""
    engine.run_serving(container, image, [*(e for e in env if not e.startswith(SWITCH + "=")), f"{SWITCH}=9"], args)


def wrong_image(engine: FakeEngine, container: str, image: str, env: list[str], args: tuple[str, ...]) -> None:
    """A launcher that runs a hard-coded base tag, not $KVBAKE_IMAGE."""
    engine.run_serving(container, "base:1", env, args)


def wrong_length(engine: FakeEngine, container: str, image: str, env: list[str], args: tuple[str, ...]) -> None:
    """A launcher that passes its own --max-model-len, not the one kvbake gave it."""
    engine.run_serving(container, image, env, ("--max-model-len", "2048", *args[2:]))


def stray_override(engine: FakeEngine, container: str, image: str, env: list[str], args: tuple[str, ...]) -> None:
    """A launcher that exports PYTHONPATH: vllm is imported from a folder of its own, not from the source root."""
    engine.run_serving(container, image, [*env, "PYTHONPATH=/opt/shadow"], args)
    engine.containers[container]["Origins"] = {1: ImportOrigin("/opt/shadow/vllm/__init__.py", ("/opt/shadow", SOURCE_ROOT))}


def mounted_source(engine: FakeEngine, container: str, image: str, env: list[str], args: tuple[str, ...]) -> None:
    """A launcher that bind-mounts a checkout over the source root."""
    engine.run_serving(container, image, env, args)
    engine.containers[container]["Mounts"] = [{"Type": "bind", "Source": "/home/ops/vllm", "Destination": SOURCE_ROOT}]


def crashed_rank(engine: FakeEngine, container: str, image: str, env: list[str], args: tuple[str, ...]) -> None:
    """The launcher returns at once; the serve it started exits on start-up."""
    engine.run_serving(container, image, env, args)
    engine.containers[container].update(State={"Running": False, "ExitCode": 1}, Processes=(), Log=["RuntimeError: CUDA out of memory"])


WRONG_RANKS: dict[str, Build] = {"clean": clean_rank, "switch": wrong_switch, "image": wrong_image, "length": wrong_length,
                                 "PYTHONPATH": stray_override, "mount": mounted_source, "crash": crashed_rank}


def deploy(w: World, r: Release, **kw) -> None:
    rollout.deploy(w.fleet, r, "base:1", BASE, False, **kw)


def interrupted_deploy(w: World, r: Release | None = None, base: str = "base:1", layers: tuple[str, ...] = BASE) -> None:
    """This host dies deploying `r` (PACKING) at its first retag, after every node took the journal, holding its locks."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transitions, "retag", lambda *args: (_ for _ in ()).throw(KeyboardInterrupt))
        patch.setattr(HeldLocks, "release", lambda self: None)  # killed: nothing is released
        with pytest.raises(KeyboardInterrupt):
            rollout.deploy(w.fleet, r or PACKING, base, layers, False)


def diverged_deploy(w: World, r: Release) -> None:
    """A deploy of `r` whose node b goes away once a was retagged, so that the revert fails too: the deployment is
    marked diverged here and on a; b, back again, still holds this host's lock."""
    original = transitions.retag

    def retag_then_b_dies(fleet: Fleet, name: str, current: str | None, previous: str | None) -> None:
        original(fleet, name, current, previous)
        if name == "a":
            w.engines["b"].down = True

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transitions, "retag", retag_then_b_dies)
        with pytest.raises(DivergedError):
            deploy(w, r)
    w.engines["b"].down = False


def killed_after_journal_write(at: int, command: Callable[[], object]) -> bool:
    """Run `command`, killed right after its `at`-th journal write, holding its locks; False when it had fewer writes
    and finished."""
    original, count = transitions.write_journal, [0]

    def write_then_die(folder: Path, journal: rollout.Journal) -> None:
        original(folder, journal)
        count[0] += 1
        if count[0] == at:
            raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transitions, "write_journal", write_then_die)
        patch.setattr(HeldLocks, "release", lambda self: None)
        try:
            command()
        except KeyboardInterrupt:
            return True
    return False


def killed_adopt(w: World, at: int) -> None:
    """Adopt, killed right after its `at`-th journal write, holding its locks."""
    assert killed_after_journal_write(at, lambda: adopt(w.fleet, "seed serve", False)), f"adopt has fewer than {at} journal writes"


@contextmanager
def locks_taken_after_each_retag(w: World) -> Iterator[None]:
    """Every lock is taken by another host right after each retag, and the held locks are renewed at every check."""
    original = transitions.retag

    def retag_then_lose_the_locks(fleet, name, current, previous):
        original(fleet, name, current, previous)
        for engine in w.engines.values():
            engine.remove_container(LOCK_NAME)
            engine.create_marker("base:1", LOCK_NAME, {"kvbake.lock.token": "other"})

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transitions, "retag", retag_then_lose_the_locks)
        patch.setattr(HeldLocks, "check", lambda self: [lock.renew() for lock in self.locks] and None)
        yield


def nameless_adopted_record(engine: FakeEngine) -> Release:
    """An adopted serve as an earlier kvbake recorded it (no name of its own), known by the create spec of what serves
    under the launcher's name now, its recorded ID gone."""
    return Release(image="base:1", config_digest="sha256:c", layers=(), labels={}, preset="adopted", switches={},
                   max_model_len=4096, launcher_args=(), deployed_by="t", deployed_at="now", reason="adopt", override=None,
                   adopted={"container_id": "an-id-now-gone", "kept_as": "kept_serve", "spec": create_spec(engine.containers[CONTAINER])})


def start_serves(w: World, shape: str = "main", auto_remove: bool = False, names: dict[str, str] | None = None) -> dict[str, str]:
    """Each node's serve without kvbake: the base image with one switch by hand, in the shape asked for (vLLM as the
    main process, or started by docker exec beside `sleep infinity`); the container IDs."""
    ids = {}
    for node, engine in w.engines.items():
        name = (names or {}).get(node, CONTAINER)
        host = {"AutoRemove": True} if auto_remove else {"RestartPolicy": {"Name": "unless-stopped", "MaximumRetryCount": 0}}
        if shape == "exec":
            engine.run_serving(name, "base:1", ["LANG=C"], main=("sleep", "infinity"), host=host)
            engine.exec_detached(name, ["python3", "/usr/local/bin/vllm", "serve", "/models/m", "--max-model-len", "4096"],
                                 {SWITCH: "3"}, "/srv", "1000")
            engine.containers[name]["Processes"] = engine.containers[name]["Processes"][:1] + engine.containers[name]["Processes"][2:]
        else:
            engine.run_serving(name, "base:1", [f"{SWITCH}=3"], host=host)
        ids[node] = engine.containers[name]["Id"]
    return ids
