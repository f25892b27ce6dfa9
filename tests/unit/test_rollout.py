"""The ship core on fake node engines: deploy, rollback and recovery, table by table, with the node state compared
whole before and after every fault."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import kvbake.transitions as transitions
from kvbake import rollout
from kvbake.deployfile import Deployment, Launcher, Node
from kvbake.errors import DivergedError, RolloutError
from kvbake.journal import read_diverged, read_journal, write_journal
from kvbake.nodestate import NodeState
from kvbake.release import Release
from kvbake.transitions import Fleet

from fake_engine import FakeEngine

REPO = "reg:5000/kvbake/x"
BASE = ("sha256:base",)
CONTAINER = "serve"


def release(preset: str, switches: dict[str, str], args: tuple[str, ...] = ()) -> Release:
    digest = "sha256:" + hashlib.sha256(preset.encode()).hexdigest()
    return Release(image=f"{REPO}@{digest}", config_digest=digest, layers=(*BASE, "sha256:thin-" + preset), labels={"k": preset},
                   preset=preset, switches=switches, max_model_len=4096, launcher_args=args, deployed_by="ops", deployed_at="t",
                   reason="r", override=None)


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


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    engines = {name: FakeEngine(name) for name in ("a", "b")}
    for engine in engines.values():
        engine.images["sha256:base"] = {"Id": "sha256:base", "RootFS": {"Layers": list(BASE)}, "Config": {"Labels": {}, "Env": []}}
        engine.tags["base:1"] = "sha256:base"
        for r in (CONTROL, PACKING, OTHER):
            engine.registry[r.image] = {"Id": r.config_digest, "RootFS": {"Layers": list(r.layers)}, "Config": {"Labels": dict(r.labels), "Env": []}}
    deployment = Deployment(tmp_path / "deploy.yaml", (Node("a", "unix:///a", "head"), Node("b", "unix:///b", "worker")),
                            Launcher(("launch",), CONTAINER, 10), 900)
    fleet = Fleet(deployment, engines, REPO, ("S",), ("/src/x.py",), "/src")
    w = World(fleet, engines)

    def fake_restart(fleet: Fleet, name: str, rel: Release | None) -> None:
        if rel is None:
            engines[name].remove_container(CONTAINER)
            return
        w.launches.append(f"{name}:{rel.preset}")
        if f"{name}:{rel.preset}" in w.failing_launch:
            raise RolloutError(f"launcher on {name} exited 1 (GPU busy)", "fix the launcher")
        engines[name].run_serving(CONTAINER, f"{REPO}:current", rel.env())

    monkeypatch.setattr(transitions, "restart", fake_restart)
    return w


def deploy(w: World, r: Release, **kw) -> None:
    rollout.deploy(w.fleet, r, "base:1", BASE, False, **kw)


def test_a_failed_first_deploy_leaves_the_nodes_as_they_were_and_the_next_deploy_works(world):
    before = world.snapshot()
    world.failing_launch.add("b:control")
    with pytest.raises(RolloutError, match="launcher on b exited 1"):
        deploy(world, CONTROL)
    assert world.snapshot() == before
    assert world.launches == ["a:control", "b:control"], "a first deploy's revert launches nothing"
    world.failing_launch.clear()
    deploy(world, CONTROL)
    assert world.snapshot()["nodes"]["a"]["records"] == (CONTROL.id, None)


def test_a_failed_second_deploy_keeps_previous_as_it_was(world):
    deploy(world, CONTROL)
    before = world.snapshot()
    world.failing_launch.add("b:packing")
    with pytest.raises(RolloutError, match="launcher on b exited 1"):
        deploy(world, PACKING)
    assert world.snapshot() == before
    assert before["nodes"]["a"]["previous"] is None and before["nodes"]["a"]["records"] == (CONTROL.id, None)


def test_redeploying_the_current_release_keeps_the_rollback_target(world):
    deploy(world, CONTROL)
    deploy(world, PACKING)
    deploy(world, PACKING)
    state = world.snapshot()["nodes"]["a"]
    assert state["records"] == (PACKING.id, CONTROL.id) and state["previous"] == CONTROL.config_digest
    rollout.rollback(world.fleet, False)
    assert world.snapshot()["nodes"]["b"]["records"] == (CONTROL.id, PACKING.id)


@pytest.mark.parametrize("sequence, expected", [
    ((CONTROL,), (CONTROL.id, None)),
    ((CONTROL, PACKING), (PACKING.id, CONTROL.id)),
    ((CONTROL, PACKING, OTHER), (OTHER.id, PACKING.id)),
    ((CONTROL, CONTROL), (CONTROL.id, None)),
])
def test_the_rollback_chain(world, sequence, expected):
    for r in sequence:
        deploy(world, r)
    for state in world.snapshot()["nodes"].values():
        assert state["records"] == expected and not state["lock"] and state["transition"] is None


def test_the_plan_is_made_under_the_locks(world, monkeypatch):
    """A second operator's deploy that completes just before this one takes its locks stays in the rollback chain."""
    deploy(world, CONTROL)
    original = rollout.locked

    def other_operator_first(*args, **kwargs):
        monkeypatch.setattr(rollout, "locked", original)
        deploy(world, OTHER)
        return original(*args, **kwargs)

    monkeypatch.setattr(rollout, "locked", other_operator_first)
    deploy(world, PACKING)
    assert world.snapshot()["nodes"]["a"]["records"] == (PACKING.id, OTHER.id)


def test_a_node_keeping_a_journal_stops_another_host_and_any_host_can_revert_it(world, tmp_path):
    deploy(world, CONTROL)
    before = world.snapshot()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transitions, "write_journal", lambda folder, journal: (_ for _ in ()).throw(KeyboardInterrupt))
        with pytest.raises(KeyboardInterrupt):
            deploy(world, PACKING)
    for engine in world.engines.values():
        engine.remove_container("kvbake-lock")  # the first host died; its lock was broken
    other = Fleet(Deployment(tmp_path / "host2" / "deploy.yaml", world.fleet.deployment.nodes, world.fleet.deployment.launcher, 900),
                  world.engines, REPO, ("S",), ("/src/x.py",), "/src")
    with pytest.raises(RolloutError, match=r"node a holds the journal of an interrupted deploy deploy-.* \(release " + PACKING.id):
        rollout.deploy(other, OTHER, "base:1", BASE, False)
    rollout.recover(other, "revert", False)
    assert world.snapshot()["nodes"] == before["nodes"]


def test_a_journal_finished_by_another_host_is_dropped_not_replayed(world, tmp_path):
    deploy(world, CONTROL)
    folder = world.fleet.deployment.state_dir
    stale = rollout.Journal("deploy-old", "deploy", PACKING.id, (rollout.NodePlan("a", None, None, "x", None, {}, {}),))
    write_journal(folder, stale)
    before = world.snapshot()["nodes"]
    with pytest.raises(RolloutError, match="deploy deploy-old was already finished or undone from another operator host"):
        rollout.recover(world.fleet, "revert", False)
    assert read_journal(folder) is None and world.snapshot()["nodes"] == before


def test_a_revert_that_fails_marks_every_reachable_node_diverged(world):
    deploy(world, CONTROL)
    original = transitions.retag

    def retag_then_b_dies(fleet, name, current, previous):
        original(fleet, name, current, previous)
        if name == "a":
            world.engines["b"].down = True

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transitions, "retag", retag_then_b_dies)
        with pytest.raises(DivergedError, match="DIVERGED: deploy"):
            deploy(world, PACKING)
    assert NodeState("a", world.engines["a"]).read().diverged["repair"].startswith("python build.py deploy --revert")
    world.engines["b"].down = False
    assert "kvbake-lock" in world.engines["b"].containers, "b was down when the locks were released"
    world.engines["b"].remove_container("kvbake-lock")  # as --break-lock would
    other = Fleet(Deployment(world.fleet.deployment.path.parent / "h2" / "deploy.yaml", world.fleet.deployment.nodes,
                             world.fleet.deployment.launcher, 900), world.engines, REPO, ("S",), ("/src/x.py",), "/src")
    with pytest.raises(DivergedError, match="node a is marked diverged"):
        rollout.deploy(other, OTHER, "base:1", BASE, False)
    rollout.recover(world.fleet, "revert", False)
    state = world.snapshot()
    assert state["diverged"] is None and state["journal"] is None
    assert {n: (s["records"], s["diverged"], s["transition"]) for n, s in state["nodes"].items()} == {
        n: ((CONTROL.id, None), None, None) for n in ("a", "b")}


def test_damaged_records_are_refused_then_reseated(world):
    deploy(world, CONTROL)
    world.engines["b"].files["kvbake-state"] = {"state-a.json": b"{", "state-b.json": b""}
    with pytest.raises(RolloutError, match="node b: every copy of its state record is corrupt"):
        deploy(world, PACKING)
    with pytest.raises(RolloutError, match="--reseat a: that node's image store did not change"):
        deploy(world, PACKING, reseat=frozenset({"a"}))
    deploy(world, PACKING, reseat=frozenset({"b"}))
    assert world.snapshot()["nodes"]["b"]["records"] == (PACKING.id, None)


def test_launcher_arguments_arrive_whole(world, tmp_path):
    import json
    import shlex

    r = release("args", {}, ("--served-model-name", "my model", "--x='y'"))
    env = transitions.launcher_env(world.fleet, "a", r, tmp_path / "a.env")
    assert shlex.split(env["KVBAKE_LAUNCHER_ARGS"]) == list(r.launcher_args)
    assert json.loads(env["KVBAKE_LAUNCHER_ARGS_JSON"]) == list(r.launcher_args)
    assert env["DOCKER_HOST"] == "unix:///a" and env["KVBAKE_ROLE"] == "head" and env["KVBAKE_IMAGE"] == f"{REPO}:current"
