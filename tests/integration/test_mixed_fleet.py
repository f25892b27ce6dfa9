"""A mixed fleet: one node on the classic store, one on the containerd store, as during a node-by-node upgrade.
Both pull the base and the release from the registry; deploy, verify-running, rollback and faults hold across them."""

from __future__ import annotations

import json
import shutil
import stat
import sys
from pathlib import Path
from typing import Iterator

import pytest

from kvbake.engines.adapters.client import Engine
from kvbake_rig import LocalRegistry, NodeEngine
from kvbake_rig.recipes import available_recipes

from conftest import run, ship_standin
from faultscenarios import (failed_first_deploy, failed_second_deploy, kill_then_resume_and_again_then_revert, node_down_after_phase_one,
                            node_down_after_the_other_was_retagged)
from shiprig import write_deploy

pytestmark = [pytest.mark.docker, pytest.mark.default_engine_only]
REPO_ROOT = Path(__file__).resolve().parents[2]
BASE = "kvbake-standin/vllm-base:0.33.0"
CONTAINER = "kvbake-serve"
LAUNCHER = [sys.executable, str(REPO_ROOT / "scripts" / "standin_launcher.py")]


def pick(store: str) -> str:
    """A profile of the wanted store; the newest engine first."""
    names = sorted((r.name for r in available_recipes().values() if r.containerd_store == (store == "containerd")), reverse=True)
    assert names, f"no {store}-store engine here: bash scripts/setup.sh installs one"
    return names[0]


@pytest.fixture(scope="module")
def fleet(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """A registry and two nodes of different stores, each holding the base pulled from the registry."""
    root = tmp_path_factory.mktemp("mixed")
    recipes = available_recipes()
    with LocalRegistry(root / "registry") as registry, \
            NodeEngine(root / "a", name="a", recipe=recipes[pick("classic")]) as node_a, \
            NodeEngine(root / "b", name="b", recipe=recipes[pick("containerd")]) as node_b:
        shared = f"{registry.address}/kvbake/standin-base:0.33.0"
        engine.tag(BASE, shared)
        try:
            engine.push(shared)
        finally:
            engine.untag(shared)
        for node in (node_a, node_b):
            client = node.client()
            client.image.pull(shared, quiet=True)
            client.image.tag(shared, BASE)
        yield {"root": root, "registry": registry, "a": node_a, "b": node_b, "b_host": node_b.host}


@pytest.fixture(scope="module")
def shipped(engine: Engine, fleet: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("standin") / "standin"
    manifest, record = ship_standin(folder, fleet["registry"].address)
    return {"manifest": manifest, "digest": record["pinned"], "config": record["config_digest"], "folder": folder,
            "repository": record["pinned"].split("@")[0], "deploy": write_deploy(folder, fleet, LAUNCHER)}


def ship(capsys, shipped: dict, *argv: str, deploy: Path | None = None) -> tuple[int, str, str]:
    return run(capsys, *argv, "--manifest", str(shipped["manifest"]), "--deploy", str(deploy or shipped["deploy"]))


def running_image(node: NodeEngine) -> str:
    return Engine(node.host).container_inspect(CONTAINER)["Image"]


def serving_env(node: NodeEngine) -> set[str]:
    return {e for e in Engine(node.host).container_inspect(CONTAINER)["Config"]["Env"] if e.startswith("VLLM_")}


def test_the_nodes_really_run_different_stores(fleet):
    stores = {name: Engine(fleet[name].host).profile().store for name in ("a", "b")}
    assert stores == {"a": "classic", "b": "containerd"}


def test_deploy_verify_rollback_across_stores(capsys, shipped, fleet):
    code, out, err = ship(capsys, shipped, "deploy", "--preset", "control", "--reason", "mixed fleet")
    assert code == 0, err
    # Each store names the same release by its own ID: the config digest on classic, the manifest digest on containerd.
    assert running_image(fleet["a"]) == shipped["config"]
    assert running_image(fleet["b"]) == shipped["digest"].rpartition("@")[2]
    code, out, err = ship(capsys, shipped, "verify-running", "--expect", "")
    assert code == 0 and "all ranks agree" in out, err
    code, _, err = ship(capsys, shipped, "deploy", "--preset", "packing-327680", "--image", shipped["digest"], "--reason", "packing")
    assert code == 0, err
    assert serving_env(fleet["a"]) == serving_env(fleet["b"]) and "VLLM_DSV41_KV_PAIR=3" in serving_env(fleet["a"])
    code, _, err = ship(capsys, shipped, "rollback")
    assert code == 0, err
    assert serving_env(fleet["a"]) == serving_env(fleet["b"]) == set()
    status = json.loads(ship(capsys, shipped, "status", "--json")[1])
    assert not status["diverged"] and {r["current"]["preset"] for r in status["nodes"]} == {"control"}


def test_a_failing_launcher_on_the_containerd_node_reverts_both(capsys, shipped, fleet, tmp_path):
    assert ship(capsys, shipped, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "baseline")[0] == 0
    before = {n: (running_image(fleet[n]), serving_env(fleet[n])) for n in ("a", "b")}
    wrapper = tmp_path / "flaky-launcher"
    wrapper.write_text(f"#!/bin/sh\n[ \"$KVBAKE_NODE\" = spark-b ] && [ -n \"$(grep KV_PAIR \"$KVBAKE_ENV_FILE\")\" ] "
                       f"&& {{ echo 'launcher: GPU busy' >&2; exit 3; }}\nexec {' '.join(LAUNCHER)}\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    flaky = write_deploy(tmp_path, fleet, [str(wrapper)])
    shutil.copytree(shipped["deploy"].parent / ".kvbake", tmp_path / ".kvbake", dirs_exist_ok=True)
    code, _, err = ship(capsys, shipped, "deploy", "--preset", "packing-327680", "--image", shipped["digest"], "--reason", "fault", deploy=flaky)
    assert code == 12 and "launcher on spark-b exited 3" in err, err
    assert {n: (running_image(fleet[n]), serving_env(fleet[n])) for n in ("a", "b")} == before
    assert ship(capsys, shipped, "verify-running")[0] == 0


def test_same_layers_under_another_manifest_is_not_the_release(capsys, engine, shipped, fleet, tmp_path):
    """On the containerd store, the release is its pulled manifest: the same config and layers loaded from a
    `docker save` get another manifest digest, and verify-running names it."""
    assert ship(capsys, shipped, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "baseline")[0] == 0
    client = fleet["b"].client()
    env = Engine(fleet["b"].host).container_inspect(CONTAINER)["Config"]["Env"]
    client.container.remove(CONTAINER, force=True)
    loaded = client.image.load(engine.client.image.save(shipped["config"]))
    other = client.image.inspect(loaded[0] if loaded else shipped["config"]).id
    assert other != shipped["digest"].rpartition("@")[2]
    client.run(other, ["-c", "import time; time.sleep(3600)"], entrypoint="python3", name=CONTAINER, detach=True,
               networks=["none"], envs=dict(item.split("=", 1) for item in env))
    code, _, err = ship(capsys, shipped, "verify-running")
    assert code == 7 and "spark-b: the container runs image" in err and "not the release's manifest digest" in err, err
    assert ship(capsys, shipped, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "repair")[0] == 0


def test_a_lock_made_on_one_profile_builds_and_pushes_thin_from_a_containerd_store_base_pulled_from_a_registry(capsys, shipped, fleet):
    """The lock comes from the default engine; node B's containerd store holds the base as the registry's compressed
    blobs. The build there names those blobs, gives the same config digest, and its push uploads only the thin layer."""
    host = fleet["b"].host
    code, out, err = run(capsys, "build", "--manifest", str(shipped["manifest"]), "--host", host, "--json")
    assert code == 0, err
    built = json.loads(out)
    assert built["config_digest"] == shipped["config"] and built["engine"]["store"] == "containerd"
    assert built["image_id"] != built["config_digest"]
    registry = fleet["registry"].address
    code, out, err = run(capsys, "push", "--manifest", str(shipped["manifest"]), "--host", host, "--registry", registry, "--json")
    assert code == 0, err
    record = json.loads(out)
    assert record["status"] == "already present"  # the same release, pushed from the classic engine before
    assert record["config_digest"] == shipped["config"]


def test_a_base_named_by_another_stores_id_is_not_found_and_the_profile_is_named(capsys, shipped, fleet, tmp_path):
    project = tmp_path / "by-id"
    shutil.copytree(shipped["manifest"].parent, project, ignore=shutil.ignore_patterns(".kvbake"))
    manifest = project / "manifest.yaml"
    config_digest = json.loads((project / "manifest.lock.json").read_text())["base"]["config_digest"]
    manifest.write_text(manifest.read_text().replace("image: kvbake-standin/vllm-base:0.33.0", f"image: {config_digest}"))
    code, _, err = run(capsys, "lock", "--manifest", str(manifest), "--host", fleet["b"].host)
    assert code == 6 and f"image {config_digest} is not present on {fleet['b'].host} (docker-26.1-containerd" in err, err
    assert err.count("\n") == 1


def test_a_failed_first_deploy_on_the_containerd_node_leaves_both_new(capsys, shipped, fleet, tmp_path):
    failed_first_deploy(capsys, shipped, fleet, tmp_path, failing="spark-b")


def test_a_failed_second_deploy_on_the_classic_node_keeps_both_as_they_were(capsys, shipped, fleet, tmp_path):
    failed_second_deploy(capsys, shipped, fleet, tmp_path, failing="spark-a")


def test_the_containerd_node_down_after_phase_one_changes_nothing(capsys, shipped, fleet, monkeypatch):
    node_down_after_phase_one(capsys, shipped, fleet, monkeypatch, down="b")


def test_the_containerd_node_down_after_the_classic_one_was_retagged_is_diverged_then_repaired(capsys, shipped, fleet, monkeypatch):
    node_down_after_the_other_was_retagged(capsys, shipped, fleet, monkeypatch, down="b")


@pytest.mark.parametrize("at", [2, 4])  # 2: before the classic node is retagged; 4: both retagged, before any restart
def test_a_kill_mid_deploy_across_stores_then_resume_and_again_then_revert(capsys, shipped, fleet, tmp_path, at):
    kill_then_resume_and_again_then_revert(capsys, shipped, fleet, tmp_path, at)


def test_a_node_switched_to_another_store_is_named_and_reseated(capsys, shipped, fleet):
    """Upgrading a node's store (classic ↔ containerd) leaves its images behind: the next deploy names the change and
    the fix, and `--reseat` brings the node back in. Runs last: it switches node B's store."""
    assert ship(capsys, shipped, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "before the switch")[0] == 0
    node = fleet["b"]
    node.stop()
    (node.root / "daemon.json").write_text("{}\n")  # the classic store
    node.recipe = next(r for r in available_recipes().values() if r.dockerd == node.recipe.dockerd and not r.containerd_store)
    node.start()
    assert Engine(node.host).profile().store == "classic"
    code, _, err = ship(capsys, shipped, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "after")
    assert code == 12 and "node spark-b ran docker-26.1-containerd at the last deploy and runs docker-26.1-classic now" in err, err
    assert "deploy with --reseat spark-b" in err and err.count("\n") == 1
    code, _, err = ship(capsys, shipped, "deploy", "--preset", "control", "--reseat", "spark-a", "--reason", "wrong node")
    assert code == 12 and "--reseat spark-a: that node's image store did not change" in err, err
    shared = f"{fleet['registry'].address}/kvbake/standin-base:0.33.0"
    client = node.client()
    client.image.pull(shared, quiet=True)
    client.image.tag(shared, BASE)
    code, _, err = ship(capsys, shipped, "deploy", "--preset", "control", "--image", shipped["digest"], "--reseat", "spark-b", "--reason", "reseat")
    assert code == 0, err
    assert running_image(fleet["b"]) == shipped["config"]  # now a classic-store ID
    code, out, err = ship(capsys, shipped, "verify-running", "--expect", "")
    assert code == 0 and "all ranks agree" in out, err
