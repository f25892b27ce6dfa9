"""Adopting the bind-mount serve on real node engines: a deploy over it is refused until `adopt`; the first deploy
keeps it as `previous`; the first rollback brings that very container back, bind mount and switches included, and so
does a first deploy that fails. A --rm serve whose mod patched vLLM in its writable layer comes back from the copy adopt
committed, mod intact, and hand-back removes that copy. A `--rm` serve with an API key on its command line and a token
in its environment is adopted and recreated with both, and no file of the project, the journal or the nodes' state
holds either."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from kvbake.engines.adapters.client import Engine
from kvbake.ship.adapters.nodestate import STATE_DIR, STATE_NAME
from kvbake.ship.core.fencing import generation_of
from kvbake.ship.core.journal import JOURNAL

from conftest import run
from faultscenarios import failing_launcher, operator_host
from shiprig import (BAKED, BASE, CONTAINER, CONTROL_LENGTH, STANDIN_LAUNCHER, STANDIN_VLLM, deploy_control, fleet_snapshot, reset_nodes,
                     serving_env, ship, ship_with, standin_serve)

pytestmark = pytest.mark.docker


def start_bind_mount_serve(rig: dict, overlay_file, extra: tuple[str, ...] = (), envs: dict[str, str] | None = None,
                           remove: bool = False) -> dict[str, str]:
    """The operator's serve as the seed runs it: the base image, a patched file bind-mounted over the source, one
    switch set by hand (with `extra` arguments, more `envs`, and `--rm` instead of a restart policy when asked).
    Returns each node's container ID."""
    ids = {}
    for key in ("a", "b"):
        client = rig[key].client()
        command = standin_serve(CONTROL_LENGTH, *extra)
        container = client.run(BASE, command[1:], entrypoint=command[0], name=CONTAINER, detach=True, networks=["none"],
                               envs={"VLLM_DSV41_KV_PAIR": "3", **(envs or {})}, volumes=[(str(overlay_file), BAKED, "ro")],
                               mounts=[STANDIN_VLLM], **({"remove": True} if remove else {"restart": "unless-stopped"}))
        ids[key] = container.id
    return ids


def seed_overlay(folder: Path) -> Path:
    overlay_file = folder / "kv_cache_interface.py"
    overlay_file.write_text("# the patched file the seed bind-mounts\n")
    return overlay_file


@pytest.fixture()
def bind_mount_serve(rig, shipped, tmp_path):
    reset_nodes(rig, shipped["repository"])
    yield start_bind_mount_serve(rig, seed_overlay(tmp_path))
    for key in ("a", "b"):
        Engine(rig[key].host).remove_container(f"{CONTAINER}-kvbake-adopted")
    reset_nodes(rig, shipped["repository"])


def test_adopt_then_deploy_then_rollback_restores_the_bind_mount_serve_exactly(capsys, shipped, rig, bind_mount_serve):
    ids = bind_mount_serve
    before = fleet_snapshot(rig, shipped)
    code, _, err = ship(capsys, shipped, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "over it")
    assert code == 12 and "node spark-a runs a serve kvbake did not deploy" in err and "python build.py adopt" in err, err
    assert fleet_snapshot(rig, shipped) == before
    code, out, err = ship(capsys, shipped, "adopt", "--reason", "the bind-mount serve")
    assert code == 0, err
    status = json.loads(ship(capsys, shipped, "status", "--json")[1])
    assert {row["current"]["preset"] for row in status["nodes"]} == {"adopted"} and not status["diverged"]
    assert ship(capsys, shipped, "verify-running")[0] == 0
    deploy_control(capsys, shipped, "first baked release")
    assert serving_env(rig["a"]) == serving_env(rig["b"]) == set()
    for key in ("a", "b"):
        kept = Engine(rig[key].host).container_inspect(f"{CONTAINER}-kvbake-adopted")
        assert kept["Id"] == ids[key] and not kept["State"]["Running"]
    code, _, err = ship(capsys, shipped, "rollback")
    assert code == 0, err
    for key in ("a", "b"):
        serving = Engine(rig[key].host).container_inspect(CONTAINER)
        assert serving["Id"] == ids[key] and serving["State"]["Running"]
        assert sorted(m["Destination"] for m in serving["Mounts"]) == ["/opt/kvbake-standin", BAKED]
        assert "VLLM_DSV41_KV_PAIR=3" in serving["Config"]["Env"]
        assert Engine(rig[key].host).container_inspect(f"{CONTAINER}-kvbake-adopted") is None
    assert ship(capsys, shipped, "verify-running")[0] == 0
    code, _, err = ship(capsys, shipped, "rollback")
    assert code == 0 and serving_env(rig["a"]) == set(), err
    for key in ("a", "b"):
        assert Engine(rig[key].host).container_inspect(f"{CONTAINER}-kvbake-adopted")["Id"] == ids[key], "still the rollback target"
    code, _, err = ship(capsys, shipped, "deploy", "--preset", "packing-327680", "--image", shipped["digest"], "--reason", "next")
    assert code == 0, err
    for key in ("a", "b"):
        assert Engine(rig[key].host).container_inspect(f"{CONTAINER}-kvbake-adopted")["Id"] == ids[key], "restorable until released"
    code, _, err = ship(capsys, shipped, "adopt", "--release")
    assert code == 0, err
    for key in ("a", "b"):
        assert Engine(rig[key].host).container_inspect(f"{CONTAINER}-kvbake-adopted") is None, "released: removed"


def test_a_failed_first_deploy_after_adopt_restores_the_bind_mount_serve(capsys, shipped, rig, bind_mount_serve, tmp_path):
    """The launcher fails on spark-b (started second: spark-a then runs kvbake's container, and both adopted containers
    were set aside): every node runs its adopted container again, with its mount and switch, and nothing else moved."""
    ids = bind_mount_serve
    host = operator_host(tmp_path, rig, "operator", failing_launcher(tmp_path, "spark-b", when_switches=False))
    code, _, err = ship_with(capsys, shipped, host, "adopt", "--reason", "the bind-mount serve")
    assert code == 0, err
    before = fleet_snapshot(rig, shipped, host)
    code, _, err = ship_with(capsys, shipped, host, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "first baked")
    assert code == 12 and err.count("\n") == 1 and "launcher on spark-b exited 1 (launcher: GPU busy)" in err, err
    assert fleet_snapshot(rig, shipped, host) == before
    for key in ("a", "b"):
        engine = Engine(rig[key].host)
        serving = engine.container_inspect(CONTAINER)
        assert serving["Id"] == ids[key] and serving["State"]["Running"], f"spark-{key} runs another container"
        assert sorted((m["Type"], m["Destination"]) for m in serving["Mounts"]) == [("bind", "/opt/kvbake-standin"), ("bind", BAKED)]
        assert "VLLM_DSV41_KV_PAIR=3" in serving["Config"]["Env"]
        left = sorted(c.name for c in engine.client.container.list(all=True))
        fences = [name for name in left if generation_of(name) is not None]
        assert len(fences) == 1 and sorted(set(left) - set(fences)) == sorted([CONTAINER, STATE_NAME]), f"spark-{key} keeps {left}"
    code, out, err = ship_with(capsys, shipped, host, "status", "--json")
    assert code == 0 and {row["current"]["preset"] for row in json.loads(out)["nodes"]} == {"adopted"}, out + err
    assert ship_with(capsys, shipped, host, "verify-running")[0] == 0


MOD_LINE = "# patched where it runs, by the launcher mod"
LINKED = BAKED.rsplit("/", 2)[0] + "/linked_mod.py"  # a module the mod links into the package
LINKED_TARGET = "/workspace/mods/linked_mod.py"
COPIES = "kvbake-adopted"


def start_modded_rm_serve(rig: dict, key: str) -> str:
    """Start the serve with --rm from the base, then patch a vLLM file in its writable layer as a mod's run.sh does."""
    command = standin_serve()
    container = rig[key].client().run(BASE, command[1:], entrypoint=command[0], name=CONTAINER, detach=True, networks=["none"],
                                      remove=True, envs={"VLLM_DSV41_KV_PAIR": "3"}, mounts=[STANDIN_VLLM])
    Engine(rig[key].host).exec_in(CONTAINER, ["sh", "-c", f"echo '{MOD_LINE}' >> {BAKED} && mkdir -p /workspace/mods && "
                                              f"echo '{MOD_LINE}' > {LINKED_TARGET} && ln -sf {LINKED_TARGET} {LINKED}"])
    return container.id


@pytest.fixture()
def modded_rm_serve(rig, shipped):
    """The serve as eugr's launcher leaves it: a --rm container whose mod patched a vLLM file in its writable layer."""
    reset_nodes(rig, shipped["repository"])
    yield {key: start_modded_rm_serve(rig, key) for key in ("a", "b")}
    for key in ("a", "b"):
        engine = Engine(rig[key].host)
        engine.remove_container(f"{CONTAINER}-kvbake-adopted")
        engine.remove_container(CONTAINER)
        for reference in engine.tags_of_repository(COPIES):
            engine.untag(reference, in_use_too=True)
    reset_nodes(rig, shipped["repository"])


def test_a_rm_serve_with_a_mod_comes_back_from_its_copy_and_goes_home_without_it(capsys, shipped, rig, modded_rm_serve):
    ids = modded_rm_serve
    code, _, err = ship(capsys, shipped, "adopt", "--reason", "the modded serve")
    assert code == 0, err
    engines = {key: Engine(rig[key].host) for key in ("a", "b")}
    copies = {key: engine.tags_of_repository(COPIES) for key, engine in engines.items()}
    assert copies == {key: [f"{COPIES}:{ids[key][:12]}"] for key in ("a", "b")}, copies
    assert ship(capsys, shipped, "verify-running")[0] == 0
    engines["b"].exec_in(CONTAINER, ["sh", "-c", f"echo '# edited after adopt' >> {LINKED_TARGET}"])  # the link's target
    code, _, err = ship(capsys, shipped, "verify-running")
    assert code == 7 and f"spark-b: {LINKED} was edited in the adopted serve's container after adopt" in err, err
    engines["b"].exec_in(CONTAINER, ["sh", "-c", f"echo '{MOD_LINE}' > {LINKED_TARGET}"])
    assert ship(capsys, shipped, "verify-running")[0] == 0
    deploy_control(capsys, shipped, "first baked release")
    assert all(engine.container_inspect(f"{CONTAINER}-kvbake-adopted") is None for engine in engines.values()), "--rm: gone once set aside"
    code, _, err = ship(capsys, shipped, "rollback", "--to", "adopted")
    assert code == 0, err
    for key, engine in engines.items():
        serving = engine.container_inspect(CONTAINER)
        assert serving["Id"] != ids[key] and serving["Image"] == engine.image_id_of(copies[key][0]), "created again, from the copy"
        assert engine.exec_in(CONTAINER, ["tail", "-n", "1", BAKED]).strip() == MOD_LINE, f"spark-{key} lost its mod"
        assert engine.exec_in(CONTAINER, ["cat", LINKED]).strip() == MOD_LINE, f"spark-{key} lost its linked mod"
        assert "VLLM_DSV41_KV_PAIR=3" in serving["Config"]["Env"]
    code, out, err = ship(capsys, shipped, "verify-running")
    assert code == 0, out + err
    code, out, err = ship(capsys, shipped, "hand-back")
    assert code == 0, err
    for key, engine in engines.items():
        assert engine.tags_of_repository(COPIES) == [] and engine.container_inspect(STATE_NAME) is None
        assert engine.container_inspect(CONTAINER)["State"]["Running"], "hand-back never stops the serve"
    assert ship(capsys, shipped, "hand-back")[0] == 0, "a second run changes nothing"
    for key, engine in engines.items():  # the launcher's own stop and start, as before kvbake
        engine.stop(CONTAINER)
        start_modded_rm_serve(rig, key)
    code, _, err = ship(capsys, shipped, "adopt", "--reason", "adopted again")
    assert code == 0, err


def test_adopt_on_a_node_with_no_serve_changes_nothing(capsys, shipped, rig, bind_mount_serve):
    Engine(rig["b"].host).remove_container(CONTAINER)
    before = fleet_snapshot(rig, shipped)
    code, _, err = ship(capsys, shipped, "adopt")
    assert code == 12 and "adopt: spark-b runs no serve (no running container kvbake-serve)" in err and err.count("\n") == 1, err
    assert fleet_snapshot(rig, shipped) == before


def test_adopt_refuses_ranks_that_run_different_serves(capsys, shipped, rig, bind_mount_serve):
    client = rig["b"].client()
    client.container.remove(CONTAINER, force=True)
    command = standin_serve()
    client.run(BASE, command[1:], entrypoint=command[0], name=CONTAINER, detach=True, networks=["none"], envs={"VLLM_DSV41_KV_PAIR": "1"},
               mounts=[STANDIN_VLLM])
    before = fleet_snapshot(rig, shipped)
    code, _, err = ship(capsys, shipped, "adopt")
    assert code == 12 and "adopt: the ranks run different serves" in err and "nothing was changed" in err, err
    assert fleet_snapshot(rig, shipped) == before


def test_adopt_refuses_nodes_that_already_run_a_kvbake_release(capsys, shipped, rig):
    deploy_control(capsys, shipped, "baseline")
    code, _, err = run(capsys, "adopt", "--manifest", str(shipped["manifest"]), "--deploy", str(shipped["deploy"]))
    assert code == 12 and "already run a kvbake release" in err, err


# Plain values: only the option and the variable's name make them secrets (the credential scan sees nothing in them).
API_KEY = "kvbake-rig-plain-api-key-0123"
HF_TOKEN = "kvbake-rig-plain-hf-token-4567"


@pytest.fixture()
def rm_serve_with_secrets(rig, shipped, tmp_path, monkeypatch):
    """The bind-mount serve run with --rm (set aside, it is gone: a rollback recreates it from its spec), its API key on
    its command line and a token in its environment; kvbake runs where both are exported."""
    monkeypatch.setenv("VLLM_API_KEY", API_KEY)
    monkeypatch.setenv("HF_TOKEN", HF_TOKEN)
    reset_nodes(rig, shipped["repository"])
    yield start_bind_mount_serve(rig, seed_overlay(tmp_path), ("--api-key", API_KEY), {"HF_TOKEN": HF_TOKEN}, remove=True)
    reset_nodes(rig, shipped["repository"])


def journal_keeping_launcher(folder: Path, journal: Path) -> list[str]:
    """The stand-in launcher, which first keeps a copy of the journal (as the deploy wrote it on this host) in `folder`."""
    script = folder / "journal-keeping-launcher"
    script.write_text(f"#!/bin/sh\ncp {journal} {folder}/journal-seen-$KVBAKE_NODE.json\nexec {' '.join(STANDIN_LAUNCHER)}\n")
    script.chmod(0o755)
    return [str(script)]


def files_holding(folders: list[Path], rig: dict, values: tuple[str, ...]) -> list[str]:
    """Every file under `folders` and in each node's state container (records, journal copy, audit log) that holds one
    of `values`, by name."""
    found = [str(path) for folder in folders for path in holding(folder, values)]
    for key in ("a", "b"):
        with tempfile.TemporaryDirectory() as copy:
            assert Engine(rig[key].host).copy_out(STATE_NAME, STATE_DIR, Path(copy) / "state"), "the node keeps its records"
            found += [f"spark-{key}:{path.name}" for path in holding(Path(copy), values)]
    return found


def holding(folder: Path, values: tuple[str, ...]) -> list[Path]:
    return [path for path in folder.rglob("*") if path.is_file() and any(value.encode() in path.read_bytes() for value in values)]


@pytest.mark.once_on_classic  # its subject is what kvbake writes down, no image store
def test_an_adopted_serve_with_secrets_leaves_them_nowhere_and_is_recreated_with_them(capsys, shipped, rig, rm_serve_with_secrets, tmp_path):
    ids = rm_serve_with_secrets
    launcher = journal_keeping_launcher(tmp_path, tmp_path / "operator" / ".kvbake" / "deploy" / JOURNAL)
    host = operator_host(tmp_path, rig, "operator", launcher)
    code, _, err = ship_with(capsys, shipped, host, "adopt", "--reason", "the serve with secrets")
    assert code == 0, err
    code, _, err = ship_with(capsys, shipped, host, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "first baked")
    assert code == 0, err
    assert sorted(tmp_path.glob("journal-seen-*.json")), "the launcher kept the journal of the deploy"
    for key in ("a", "b"):
        assert Engine(rig[key].host).container_inspect(f"{CONTAINER}-kvbake-adopted") is None, "--rm: gone once set aside"
    code, _, err = ship_with(capsys, shipped, host, "rollback")
    assert code == 0, err
    for key in ("a", "b"):
        serving = Engine(rig[key].host).container_inspect(CONTAINER)
        assert serving["Id"] != ids[key] and serving["State"]["Running"], "recreated from its spec"
        assert serving["Config"]["Cmd"][-2:] == ["--api-key", API_KEY] and f"HF_TOKEN={HF_TOKEN}" in serving["Config"]["Env"]
    assert ship_with(capsys, shipped, host, "verify-running")[0] == 0
    assert files_holding([shipped["folder"], tmp_path], rig, (API_KEY, HF_TOKEN)) == []
