"""A fleet of two fake nodes for the ship core's unit tests: releases, a fake launcher, and a whole-state snapshot."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import kvbake.ship.adapters.transitions as transitions
from kvbake.deployfile import Deployment, Launcher, Node
from kvbake.errors import RolloutError
from kvbake.ship.adapters import rollout
from kvbake.ship.adapters.fleet import Fleet
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.core.journal import read_diverged, read_journal
from kvbake.ship.core.release import Release, runtime_config

from fake_engine import FakeEngine

REPO = "reg:5000/kvbake/x"
BASE = ("sha256:base",)
CONTAINER = "serve"


def release(preset: str, switches: dict[str, str], args: tuple[str, ...] = ()) -> Release:
    digest = "sha256:" + hashlib.sha256(preset.encode()).hexdigest()
    return Release(image=f"{REPO}@{digest}", config_digest=digest, layers=(*BASE, "sha256:thin-" + preset), labels={"k": preset},
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
        return Fleet(Deployment(folder / "deploy.yaml", d.nodes, d.launcher, stale_after_s), self.engines, REPO, ("S",), ("/src/x.py",), "/src")


def make_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: str = "classic") -> World:
    engines = {name: FakeEngine(name, store) for name in ("a", "b")}
    for engine in engines.values():
        engine.images["sha256:base"] = {"Id": "sha256:base", "RootFS": {"Layers": list(BASE)}, "Config": {"Labels": {}, "Env": []}}
        engine.tags["base:1"] = "sha256:base"
        for r in (CONTROL, PACKING, OTHER):
            engine.registry[r.image] = {"Id": r.config_digest, "RootFS": {"Layers": list(r.layers)}, "Config": {"Labels": dict(r.labels), "Env": []}}
    deployment = Deployment(tmp_path / "deploy.yaml", (Node("a", "unix:///a", "head"), Node("b", "unix:///b", "worker")),
                            Launcher(("launch",), CONTAINER, 10), 900)
    fleet = Fleet(deployment, engines, REPO, ("S",), ("/src/x.py",), "/src")
    w = World(fleet, engines)

    def fake_launch(fleet: Fleet, name: str, rel: Release) -> None:
        w.launches.append(f"{name}:{rel.preset}")
        if f"{name}:{rel.preset}" in w.failing_launch:
            raise RolloutError(f"launcher on {name} exited 1 (GPU busy)", "fix the launcher")
        engines[name].run_serving(CONTAINER, f"{REPO}:current", rel.env(), ("--max-model-len", str(rel.max_model_len), *rel.launcher_args))

    monkeypatch.setattr(transitions, "launch", fake_launch)
    return w


def deploy(w: World, r: Release, **kw) -> None:
    rollout.deploy(w.fleet, r, "base:1", BASE, False, **kw)
