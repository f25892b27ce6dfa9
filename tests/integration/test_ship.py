"""Deploy, rollback, verify-running and status against a real registry and two real node engines (one over ssh)."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path
from typing import Iterator

import pytest

from kvbake.engine import Engine
from kvbake.rig import LocalRegistry, LoopbackSshd, NodeEngine, prepare_ssh_client

from conftest import run

pytestmark = pytest.mark.docker
REPO_ROOT = Path(__file__).resolve().parents[2]
BASE = "kvbake-standin/vllm-base:0.33.0"
CONTAINER = "kvbake-serve"
BAKED = "/usr/local/lib/python3.11/dist-packages/vllm/v1/kv_cache_interface.py"


@pytest.fixture(scope="module")
def rig(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """A plain registry, node A on a unix socket, node B through ssh; both hold the stand-in base."""
    root = tmp_path_factory.mktemp("ship")
    ssh_client = prepare_ssh_client(root / "ssh-client")
    with pytest.MonkeyPatch.context() as patch, LocalRegistry(root / "registry") as registry, \
            NodeEngine(root / "a", name="a") as node_a, NodeEngine(root / "b", name="b") as node_b, \
            LoopbackSshd(root / "sshd", ssh_client, node_b.host) as gateway:
        patch.setenv("PATH", ssh_client.env()["PATH"])
        for node in (node_a, node_b):
            node.client().image.load(engine.client.image.save(BASE))
        yield {"root": root, "registry": registry, "a": node_a, "b": node_b, "b_host": gateway.ssh_host()}


def write_deploy(folder: Path, rig: dict, launcher: list[str]) -> Path:
    path = folder / "deploy.yaml"
    path.write_text(json.dumps({
        "format": 1,
        "nodes": [{"name": "spark-a", "host": rig["a"].host, "role": "head"}, {"name": "spark-b", "host": rig["b_host"], "role": "worker"}],
        "launcher": {"command": launcher, "container": CONTAINER, "timeout_s": 120},
    }))
    return path


@pytest.fixture(scope="module")
def shipped(engine: Engine, rig: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The stand-in, locked for the rig's registry, built and pushed; returns paths and the digest reference."""
    from kvbake.cli import main

    folder = tmp_path_factory.mktemp("standin") / "standin"
    shutil.copytree(REPO_ROOT / "examples" / "standin", folder, ignore=shutil.ignore_patterns(".kvbake"))
    manifest = folder / "manifest.yaml"
    repository = f"{rig['registry'].address}/kvbake/standin-kvpack"
    manifest.write_text(manifest.read_text().replace("127.0.0.1:5000/kvbake/standin-kvpack", repository))
    assert main(["lock", "--manifest", str(manifest)]) == 0
    assert main(["build", "--manifest", str(manifest)]) == 0
    assert main(["push", "--manifest", str(manifest)]) == 0
    record = json.loads(next((folder / ".kvbake" / "pushes").glob("*.json")).read_text())
    digest = record["pinned"]
    assert digest.startswith(repository + "@sha256:")
    launcher = [str(Path(os.sys.executable)), str(REPO_ROOT / "scripts" / "standin_launcher.py")]
    return {"manifest": manifest, "digest": digest, "deploy": write_deploy(folder, rig, launcher), "folder": folder,
            "repository": repository}


def ship(capsys, shipped: dict, *argv: str) -> tuple[int, str, str]:
    return run(capsys, *argv, "--manifest", str(shipped["manifest"]), "--deploy", str(shipped["deploy"]))


def serving_env(node: NodeEngine) -> set[str]:
    return {e for e in Engine(node.host).container_inspect(CONTAINER)["Config"]["Env"] if e.startswith("VLLM_")}


def test_deploy_verify_rollback_status(capsys, shipped, rig):
    code, out, err = ship(capsys, shipped, "deploy", "--preset", "control", "--reason", "first")
    assert code == 0, err
    assert "verify-running passed on every rank" in out
    code, out, err = ship(capsys, shipped, "verify-running", "--expect", "")
    assert code == 0 and "all ranks agree" in out, err
    code, out, err = ship(capsys, shipped, "deploy", "--preset", "packing-327680", "--image", shipped["digest"], "--reason", "packing")
    assert code == 0, err
    assert serving_env(rig["a"]) == serving_env(rig["b"]) and "VLLM_DSV41_KV_PAIR=3" in serving_env(rig["a"])
    code, out, err = ship(capsys, shipped, "verify-running", "--expect", "")
    assert code == 7 and "switch VLLM_DSV41_KV_PAIR is 3, expected unset" in err
    code, out, err = ship(capsys, shipped, "rollback")
    assert code == 0, err
    assert serving_env(rig["a"]) == serving_env(rig["b"]) == set()
    code, out, err = ship(capsys, shipped, "status", "--json")
    status = json.loads(out)
    assert not status["diverged"] and {r["current"]["preset"] for r in status["nodes"]} == {"control"}
    assert {r["previous"]["preset"] for r in status["nodes"]} == {"packing-327680"}


def test_a_bind_mount_over_a_baked_file_fails_verify_running(capsys, shipped, rig, tmp_path):
    assert ship(capsys, shipped, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "mount test")[0] == 0
    client = rig["a"].client()
    image = client.container.inspect(CONTAINER).image
    client.container.remove(CONTAINER, force=True)
    patched = tmp_path / "kv_cache_interface.py"
    patched.write_text("# hand-patched\n")
    client.run(image, ["-c", "import time; time.sleep(3600)"], entrypoint="python3", name=CONTAINER, detach=True,
               networks=["none"], volumes=[(str(patched), BAKED, "ro")])
    code, _, err = ship(capsys, shipped, "verify-running", "--expect", "")
    assert code == 7 and f"mount at {BAKED} covers baked file" in err
    assert ship(capsys, shipped, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "repair")[0] == 0


def test_a_failing_launcher_on_one_node_reverts_every_node(capsys, shipped, rig, tmp_path):
    assert ship(capsys, shipped, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "baseline")[0] == 0
    before = {n: serving_env(rig[n]) for n in ("a", "b")}
    wrapper = tmp_path / "flaky-launcher"
    wrapper.write_text(f"#!/bin/sh\n[ \"$KVBAKE_NODE\" = spark-b ] && [ -z \"$KVBAKE_ALLOW\" ] && [ -n \"$(grep KV_PAIR \"$KVBAKE_ENV_FILE\")\" ] "
                       f"&& {{ echo 'launcher: GPU busy' >&2; exit 3; }}\nexec {os.sys.executable} {REPO_ROOT / 'scripts/standin_launcher.py'}\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    deploy_file = write_deploy(tmp_path, rig, [str(wrapper)])
    deploy_file_state = shipped["deploy"].parent / ".kvbake"
    shutil.copytree(deploy_file_state, tmp_path / ".kvbake", dirs_exist_ok=True)
    code, _, err = run(capsys, "deploy", "--preset", "packing-327680", "--image", shipped["digest"], "--reason", "fault",
                       "--manifest", str(shipped["manifest"]), "--deploy", str(deploy_file))
    assert code == 12 and "launcher on spark-b exited 3" in err, err
    assert {n: serving_env(rig[n]) for n in ("a", "b")} == before
    code, out, err = run(capsys, "verify-running", "--manifest", str(shipped["manifest"]), "--deploy", str(deploy_file))
    assert code == 0, err
