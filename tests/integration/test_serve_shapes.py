"""Every serve shape the field runs, on two real node engines: adopt it, deploy control, roll back to it, deploy control
and packing, roll back to control, `rollback --to adopted`; and a first deploy that fails brings it back. Every step is
asserted on the whole node state: each container by name, what its vLLM serve runs process by process, tags, records."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from kvbake.engines.adapters.client import Engine

from faultscenarios import failing_launcher, killed_run, operator_host
from kvbake.rig.serve_shapes import RAY_ARGS, SERVED, SHAPES
from serveshapes import NODES, clear_nodes, serves, start_shape, whole_node, with_node_containers
from shiprig import BASE, CONTAINER, CONTROL_LENGTH, PACKING_ENV, reset_nodes, run, ship_with

pytestmark = [pytest.mark.docker, pytest.mark.field_engines_only]


def serving_keys(shape: str) -> tuple[str, ...]:
    """The nodes whose serve runs a vLLM process: every node, but the head only in a Ray cluster."""
    return ("a",) if shape == "ray cluster" else tuple(NODES)


def wait_for_serves(rig: dict, names: dict[str, str], keys: tuple[str, ...]) -> None:
    """An exec'd vLLM takes a moment to appear; a serve that never does fails the test."""
    deadline = time.monotonic() + 20
    while not all(serves(Engine(rig[key].host), names[key]) for key in keys):
        assert time.monotonic() < deadline, {key: serves(Engine(rig[key].host), names[key]) for key in NODES}
        time.sleep(0.2)


@pytest.fixture()
def shape_rig(rig, shipped):
    reset_nodes(rig, shipped["repository"])
    yield
    clear_nodes(rig, tuple({name for _, names in SHAPES.values() for name in names.values()}))
    reset_nodes(rig, shipped["repository"])


class Walk:
    """One shape on the rig: the commands an operator runs and the whole state of both nodes after each."""

    def __init__(self, capsys, shipped: dict, rig: dict, tmp_path, shape: str, launcher=None) -> None:
        self.capsys, self.shipped, self.rig = capsys, shipped, rig
        self.names = SHAPES[shape][1]
        host = operator_host(tmp_path, rig, "ops", launcher) if launcher else operator_host(tmp_path, rig, "ops")
        self.deploy_file = with_node_containers(host, self.names)
        self.ids = start_shape(rig, shape)
        self.serving = serving_keys(shape)
        wait_for_serves(rig, self.names, self.serving)
        self.original = self.state()

    def run(self, *argv: str) -> str:
        code, out, err = ship_with(self.capsys, self.shipped, self.deploy_file, *argv)
        assert code == 0, f"{argv}: {err}"
        return out

    def init(self, folder) -> dict:
        """`init` against both nodes, the containers found by their processes; then `config --check` against what runs."""
        nodes = [f"--node={NODES[key]}={self.rig[key].host}" for key in NODES]
        code, out, err = run(self.capsys, "init", *nodes, "--template", str(self.shipped["manifest"]), "--out", str(folder),
                             "--registry", "127.0.0.1:5000", "--json")
        assert code == 0, err
        written = json.loads(out)
        code, out, err = run(self.capsys, "config", "--check", "--manifest", str(folder / "manifest.yaml"),
                             "--deploy", str(folder / "deploy.yaml"), "--json")
        assert code == 0, err
        return {"init": written, "check": json.loads(out), "manifest": yaml.safe_load((folder / "manifest.yaml").read_text()),
                "deploy": yaml.safe_load((folder / "deploy.yaml").read_text())}

    def deploy(self, preset: str) -> str:
        return self.run("deploy", "--preset", preset, "--image", self.shipped["digest"], "--reason", preset)

    def state(self) -> dict:
        names = tuple(sorted({*self.names.values(), CONTAINER}))
        return {key: whole_node(self.rig, key, self.shipped["repository"], names) for key in NODES}

    def adopted_serves(self, state: dict) -> dict:
        return {key: state[key]["serves"][self.names[key]] for key in NODES}

    def kvbake_serves(self, state: dict) -> set:
        return {tuple(sorted({e for p in state[key]["serves"][CONTAINER] for e in p[1]})) for key in NODES}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_serve_shape_is_adopted_replaced_and_brought_back_exactly(capsys, shipped, rig, tmp_path, shape_rig, shape):
    walk = Walk(capsys, shipped, rig, tmp_path, shape)
    original = walk.original
    assert [key for key in NODES if walk.adopted_serves(original)[key]] == list(walk.serving), "the nodes serve in this shape"
    described = walk.init(tmp_path / "project")
    assert walk.state() == original, "init changes nothing on the nodes"
    assert described["check"]["nodes"] == {NODES[key]: "control" for key in walk.serving}
    control = described["manifest"]["presets"]["control"]
    assert (control["max_model_len"], control["launcher_args"]) == (CONTROL_LENGTH, list(SERVED) + (list(RAY_ARGS) if shape == "ray cluster" else []))
    assert {n["name"]: n["container"] for n in described["deploy"]["nodes"]} == {NODES[k]: walk.names[k] for k in NODES}
    assert [n["role"] for n in described["deploy"]["nodes"]] == ["head", "worker"]
    assert described["init"]["switches"] == {} and described["init"]["changes"] == {}
    assert described["manifest"]["base"]["image"] == BASE, "the template's pin names the image the nodes run: kept"
    walk.run("adopt", "--reason", shape)
    adopted = walk.state()
    adopted_id = adopted["a"]["records"][0]
    for key in NODES:
        assert adopted[key]["records"] == (adopted_id, None, adopted_id)
        assert {k: v for k, v in adopted[key]["containers"].items() if k != "kvbake-state"} == original[key]["containers"]
        assert adopted[key]["serves"] == original[key]["serves"]
    walk.run("verify-running")
    walk.deploy("control")
    control = walk.state()
    removed = shape == "--rm wrapper"
    for key in NODES:
        name = walk.names[key]
        assert control[key]["serves"][name] is None and control[key]["serves"][CONTAINER]
        kept = control[key]["containers"].get(f"{name}-kvbake-adopted")
        assert kept is None if removed else kept == (False, "no"), "set aside, never started at boot"
        assert f"--max-model-len {CONTROL_LENGTH}" in " ".join(control[key]["serves"][CONTAINER][0][0])
    assert walk.kvbake_serves(control) == {()}
    walk.run("rollback")
    back = walk.state()
    assert walk.adopted_serves(back) == walk.adopted_serves(original)
    for key in NODES:
        assert CONTAINER not in back[key]["containers"] and back[key]["records"] == (adopted_id, control[key]["records"][0], adopted_id)
        assert back[key]["containers"][walk.names[key]] == original[key]["containers"][walk.names[key]], "its restart policy is back"
    walk.deploy("control")
    walk.deploy("packing-327680")
    assert walk.kvbake_serves(walk.state()) == {tuple(sorted(tuple(e.split("=", 1)) for e in PACKING_ENV))}
    walk.run("rollback")
    assert walk.kvbake_serves(walk.state()) == {()}
    walk.run("rollback", "--to", "adopted")
    final = walk.state()
    assert walk.adopted_serves(final) == walk.adopted_serves(original)
    assert all(CONTAINER not in final[key]["containers"] and final[key]["records"][0] == adopted_id for key in NODES)
    walk.run("verify-running")


@pytest.mark.parametrize("shape", ["eugr cluster", "--rm wrapper"])
def test_a_failed_first_deploy_brings_back_the_adopted_serve_in_its_shape(capsys, shipped, rig, tmp_path, shape_rig, shape):
    walk = Walk(capsys, shipped, rig, tmp_path, shape, failing_launcher(tmp_path, "spark-b", when_switches=False))
    walk.run("adopt", "--reason", shape)
    adopted = walk.state()
    code, _, err = ship_with(capsys, shipped, walk.deploy_file, "deploy", "--preset", "control", "--image", shipped["digest"],
                             "--reason", "fails on spark-b")
    assert code == 12 and "launcher on spark-b exited 1 (launcher: GPU busy)" in err, err
    after = walk.state()
    assert walk.adopted_serves(after) == walk.adopted_serves(walk.original)
    for key in NODES:
        assert after[key]["records"] == adopted[key]["records"] and CONTAINER not in after[key]["containers"]
        assert after[key]["containers"][walk.names[key]] == walk.original[key]["containers"][walk.names[key]]
    walk.run("verify-running")


ADOPT_WRITES = 3  # this host's journal, then one retag and record per node


def settled(state: dict) -> dict:
    """A node's state less the containers kvbake keeps for itself (its state container, broken locks kept for audit)."""
    return {key: {**node, "containers": {n: v for n, v in node["containers"].items() if not n.startswith("kvbake-")}}
            for key, node in state.items()}


@pytest.mark.parametrize("at", range(1, ADOPT_WRITES + 1))
def test_a_kill_at_every_step_of_adopt_is_undone_by_revert_or_finished_by_resume(capsys, shipped, rig, tmp_path, shape_rig, at):
    walk = Walk(capsys, shipped, rig, tmp_path, "main process")
    before = settled(walk.original)
    adopt = ["adopt", "--reason", "killed", "--manifest", str(shipped["manifest"]), "--deploy", str(walk.deploy_file)]
    for mode in ("revert", "resume"):
        killed_run(tmp_path, adopt, at)
        code, _, err = ship_with(capsys, shipped, walk.deploy_file, "adopt", "--reason", "blocked")
        assert code == 12 and "adopt --resume" in err, err
        code, _, err = ship_with(capsys, shipped, walk.deploy_file, "adopt", f"--{mode}")
        assert code == 12 and "holds a stale lock" in err and "its process is gone" in err, err
        code, out, err = ship_with(capsys, shipped, walk.deploy_file, "adopt", f"--{mode}", "--break-lock")
        after = settled(walk.state())
        if at == 1 and mode == "resume":  # killed after this host's journal alone: nothing began on any node
            assert code == 12 and "never began" in err and after == before, err
            continue
        assert code == 0, err
        if mode == "revert" or "dropped" in out:
            assert after == before, "the interrupted adopt left nothing behind"
        else:
            adopted = after["a"]["records"][0]
            assert adopted and all(after[key]["records"] == (adopted, None, adopted) and after[key]["transition"] is None
                                   and not after[key]["lock"] for key in NODES)
            assert walk.adopted_serves(after) == walk.adopted_serves(before), "the serve itself was never touched"
            walk.run("verify-running")
