"""Deploy, rollback, verify-running and status against a real registry and two real node engines (one also over ssh)."""

from __future__ import annotations

import json
import shutil
import stat
import sys
import time
import xml.etree.ElementTree as ET

import pytest

from kvbake.engines.adapters.client import Engine
from kvbake_rig import NodeEngine
from kvbake_rig.ports import free_port

from conftest import run
from faultscenarios import failing_launcher, node_down_after_phase_one, node_down_after_the_other_was_retagged
from shiprig import BAKED, BASE, CONTAINER, REPO_ROOT, STANDIN_LAUNCHER, deploy_control, fleet_snapshot, serving_env, ship, ship_with, write_deploy

# On Docker 20.10 deploy and rollback are proven by the ssh test below, the demo, the runbook walk, the real serve and
# the mixed fleet (all default_engine_only); the rest of this module runs on the field's engines.
pytestmark = pytest.mark.docker


@pytest.mark.default_engine_only  # the ssh transport does not depend on the engine; the other profiles deploy over sockets
def test_deploy_verify_rollback_status_with_node_b_over_ssh(capsys, shipped, rig, tmp_path):
    """The whole flow with node B reached as production reaches nodes: DOCKER_HOST=ssh://user@host."""
    shutil.copytree(shipped["deploy"].parent / ".kvbake", tmp_path / ".kvbake", dirs_exist_ok=True)
    shipped = {**shipped, "deploy": write_deploy(tmp_path, {**rig, "b_host": rig["b_ssh"]}, STANDIN_LAUNCHER)}
    assert json.loads(shipped["deploy"].read_text())["nodes"][1]["host"].startswith("ssh://")
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
    code, out, err = ship(capsys, shipped, "status", "--json", "--html", str(tmp_path / "status.html"))
    status = json.loads(out)
    assert not status["diverged"] and {r["current"]["preset"] for r in status["nodes"]} == {"control"}
    assert {r["previous"]["preset"] for r in status["nodes"]} == {"packing-327680"}
    page = ET.fromstring((tmp_path / "status.html").read_text())
    rows = list(page.iter("{http://www.w3.org/1999/xhtml}tbody"))[0].findall("{http://www.w3.org/1999/xhtml}tr")
    assert [row.findtext("{http://www.w3.org/1999/xhtml}td") for row in rows] == [r["node"] for r in status["nodes"]]
    assert all("(control)" in "".join(row.itertext()) and "(packing-327680)" in "".join(row.itertext()) for row in rows)


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
    code, out, err = ship(capsys, shipped, "trace", "--json")
    ranks = {link["name"]: link for link in json.loads(out)["links"] if link["kind"] == "rank"}
    assert code == 7 and set(ranks) == {"spark-a", "spark-b"} and ranks["spark-b"]["holds"], err
    assert not ranks["spark-a"]["holds"] and BAKED in ranks["spark-a"]["broken"] and "rank spark-a" in err
    assert ship(capsys, shipped, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "repair")[0] == 0
    code, out, err = ship(capsys, shipped, "trace")
    assert code == 0 and out.rstrip().endswith("every link holds (24)"), err


def test_pythonpath_and_a_mount_inside_the_source_root_fail_verify_running(capsys, shipped, rig, tmp_path):
    """Other code can run without touching a baked file: PYTHONPATH ahead of the source root, or a mount over a
    package of it the chain does not patch. Both are named."""
    assert ship(capsys, shipped, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "override test")[0] == 0
    client = rig["a"].client()
    image = client.container.inspect(CONTAINER).image
    client.container.remove(CONTAINER, force=True)
    shadow = tmp_path / "attention"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("# shadowing package\n")
    unpatched = BAKED.rsplit("/vllm/", 1)[0] + "/vllm/v1/attention"
    client.run(image, ["-c", "import time; time.sleep(3600)"], entrypoint="python3", name=CONTAINER, detach=True,
               networks=["none"], envs={"PYTHONPATH": "/work/patched"}, volumes=[(str(shadow), unpatched, "ro")])
    code, _, err = ship(capsys, shipped, "verify-running", "--expect", "")
    assert code == 7, err
    assert "spark-a: PYTHONPATH is set to '/work/patched' in the container, not as the image sets it ('unset')" in err
    assert f"spark-a: a bind mount at {unpatched} is inside the source root" in err
    assert ship(capsys, shipped, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "repair")[0] == 0


def test_a_mount_that_puts_a_vllm_in_the_working_directory_fails_verify_running(capsys, shipped, rig, tmp_path):
    """`python -m` searches the working directory first (`/` when the image sets none): a `vllm` package mounted right
    there is imported instead of the baked one, without covering any baked file."""
    assert ship(capsys, shipped, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "workdir test")[0] == 0
    client = rig["a"].client()
    image = client.container.inspect(CONTAINER).image
    workdir = (Engine(rig["a"].host).inspect_image(image)["Config"]["WorkingDir"] or "/").rstrip("/") or "/"
    shadow = tmp_path / "vllm"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("# shadowing package\n")
    target = f"{workdir.rstrip('/')}/vllm"
    client.container.remove(CONTAINER, force=True)
    client.run(image, ["-c", "import time; time.sleep(3600)"], entrypoint="python3", name=CONTAINER, detach=True,
               networks=["none"], volumes=[(str(shadow), target, "ro")])
    code, _, err = ship(capsys, shipped, "verify-running", "--expect", "")
    assert code == 7 and f"spark-a: a bind mount at {target} puts a vllm in the working directory {workdir}" in err, err
    assert ship(capsys, shipped, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "repair")[0] == 0


def test_a_failing_launcher_on_one_node_reverts_every_node(capsys, shipped, rig, tmp_path):
    assert ship(capsys, shipped, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "baseline")[0] == 0
    deploy_file = write_deploy(tmp_path, rig, failing_launcher(tmp_path, "spark-b", when_switches=True))
    shutil.copytree(shipped["deploy"].parent / ".kvbake", tmp_path / ".kvbake", dirs_exist_ok=True)
    before = fleet_snapshot(rig, shipped, deploy_file)
    code, _, err = ship_with(capsys, shipped, deploy_file, "deploy", "--preset", "packing-327680", "--image", shipped["digest"], "--reason", "fault")
    assert code == 12 and "launcher on spark-b exited 1 (launcher: GPU busy)" in err, err
    assert fleet_snapshot(rig, shipped, deploy_file) == before
    code, out, err = ship_with(capsys, shipped, deploy_file, "verify-running")
    assert code == 0, err


def test_node_b_down_after_phase_one_changes_nothing(capsys, shipped, rig, monkeypatch):
    node_down_after_phase_one(capsys, shipped, rig, monkeypatch, down="b")


def test_node_b_down_after_a_was_retagged_is_diverged_then_repaired(capsys, shipped, rig, monkeypatch):
    node_down_after_the_other_was_retagged(capsys, shipped, rig, monkeypatch, down="b")


def test_a_second_deploy_while_one_runs_is_refused_by_the_lock(capsys, shipped, rig, tmp_path):
    import subprocess
    import time

    deploy_control(capsys, shipped, "baseline")
    slow = tmp_path / "slow-launcher"
    slow.write_text(f"#!/bin/sh\nsleep 8\nexec {sys.executable} {REPO_ROOT / 'scripts/standin_launcher.py'}\n")
    slow.chmod(slow.stat().st_mode | stat.S_IEXEC)
    slow_deploy = write_deploy(tmp_path, rig, [str(slow)])
    shutil.copytree(shipped["deploy"].parent / ".kvbake", tmp_path / ".kvbake", dirs_exist_ok=True)
    first = subprocess.Popen([sys.executable, "build.py", "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "slow",
                              "--manifest", str(shipped["manifest"]), "--deploy", str(slow_deploy)], cwd=REPO_ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while Engine(rig["a"].host).container_inspect("kvbake-lock") is None and time.monotonic() < deadline:
            time.sleep(0.2)
        code, _, err = ship(capsys, shipped, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "second")
        assert code == 12 and "is locked by" in err, err
    finally:
        out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err


def test_rollback_target_absent_on_one_node_is_refused_in_phase_one(capsys, shipped, rig):
    deploy_control(capsys, shipped, "baseline")
    client = rig["b"].client()
    image = client.image.inspect(f"{shipped['repository']}:current").id
    client.image.remove(f"{shipped['repository']}:current")
    try:
        code, _, err = ship(capsys, shipped, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "target gone")
        assert code == 12 and "spark-b records release" in err and "no current image" in err, err
        assert serving_env(rig["a"]) == serving_env(rig["b"]) == set()
    finally:
        client.image.tag(image, f"{shipped['repository']}:current")


@pytest.mark.parametrize("argv,code,fragment", [
    (("--preset", "nope"), 14, "unknown preset 'nope'"),
    (("--preset", "longctx-524288"), 14, "is held"),
    (("--preset", "longctx-1048576", "--allow-untested"), 14, "needs a reason"),
])
def test_bad_presets_are_refused_before_any_change(capsys, shipped, rig, argv, code, fragment):
    got, _, err = ship(capsys, shipped, "deploy", *argv, "--image", shipped["digest"])
    assert got == code and fragment in err, err


def test_unreachable_node_and_rollback_without_previous(capsys, shipped, rig, tmp_path):
    broken = tmp_path / "deploy.yaml"
    document = json.loads(shipped["deploy"].read_text())
    document["nodes"][1]["host"] = f"unix://{tmp_path}/gone.sock"
    broken.write_text(json.dumps(document))
    code, _, err = run(capsys, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "x",
                       "--manifest", str(shipped["manifest"]), "--deploy", str(broken))
    assert code == 12 and "node spark-b" in err and "unreachable" in err
    code, _, err = ship(capsys, shipped, "deploy", "--preset", "packing-327680", "--image", shipped["digest"], "--reason", "a previous")
    assert code == 0, err
    deploy_control(capsys, shipped, "baseline")  # whatever ran before this test: previous is now packing-327680
    client = rig["a"].client()
    previous = client.image.inspect(f"{shipped['repository']}:previous").id
    client.image.remove(f"{shipped['repository']}:previous")
    try:
        code, _, err = ship(capsys, shipped, "rollback")
        assert code == 12 and "no previous release on spark-a" in err, err
    finally:
        client.image.tag(previous, f"{shipped['repository']}:previous")


def test_a_worker_unreachable_over_ssh_is_one_line_and_nothing_moves(capsys, shipped, rig, tmp_path):
    """A worker whose ssh endpoint answers nothing (a node down, a wrong port): deploy stops on it before any node
    changes, in one line that names the node and the engine it could not reach."""
    deploy_control(capsys, shipped, "baseline")
    before = fleet_snapshot(rig, shipped)
    broken = tmp_path / "deploy.yaml"
    document = json.loads(shipped["deploy"].read_text())
    port = free_port()  # nothing listens there
    document["nodes"][1]["host"] = f"ssh://root@127.0.0.1:{port}"
    broken.write_text(json.dumps(document))
    code, _, err = ship_with(capsys, shipped, broken, "deploy", "--preset", "packing-327680", "--image", shipped["digest"],
                             "--reason", "worker down")
    assert code == 12 and "node spark-b" in err and "unreachable" in err and "ssh://root@127.0.0.1" in err, err
    assert "Connection refused" in err and f"ssh -p {port} root@127.0.0.1 docker version" in err, "the fix names the ssh check"
    assert len(err.strip().splitlines()) == 1, err
    assert fleet_snapshot(rig, shipped) == before, "a node changed although the worker was never reached"
    assert fleet_snapshot(rig, shipped, broken) == before, "the failed deploy left a journal or a diverged marker"


def test_a_stale_lock_needs_break_lock_and_is_audited(capsys, shipped, rig):
    deploy_control(capsys, shipped, "baseline")
    node = Engine(rig["a"].host)
    labels = {"kvbake.lock.owner": "ops@gone:1", "kvbake.lock.since": "1000", "kvbake.lock.deploy": "deploy-old"}
    assert node.create_marker(f"{shipped['repository']}:current", "kvbake-lock", labels)
    code, _, err = ship(capsys, shipped, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "stale")
    assert code == 12 and "stale lock from ops@gone:1" in err and "--break-lock" in err, err
    code, _, err = ship(capsys, shipped, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "stale", "--break-lock")
    assert code == 0, err
    from kvbake.ship.adapters.nodestate import NodeState

    audit = NodeState("spark-a", node).read().audit
    assert "broke stale lock of ops@gone:1 (deploy deploy-old" in audit
    assert node.container_inspect("kvbake-lock") is None


def test_a_node_without_the_base_is_refused_in_phase_one(capsys, shipped, rig, tmp_path):
    deploy_control(capsys, shipped, "baseline")
    with NodeEngine(tmp_path / "c", name="c") as bare:
        document = json.loads(shipped["deploy"].read_text())
        document["nodes"].append({"name": "spark-c", "host": bare.host, "role": "worker"})
        with_bare = tmp_path / "deploy.yaml"
        with_bare.write_text(json.dumps(document))
        code, _, err = run(capsys, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "bare",
                           "--manifest", str(shipped["manifest"]), "--deploy", str(with_bare))
        assert code == 12 and "node spark-c lacks the base image" in err, err
        assert Engine(bare.host).inspect_image(shipped["digest"]) is None


def forged_config_image(engine: Engine, shipped: dict, tmp_path) -> str:
    """The release's image with one more ENV line: the same layers and labels, another config; pushed by digest."""
    context = tmp_path / "forged"
    context.mkdir()
    source = engine.require_image(shipped["digest"])["Id"]
    (context / "Dockerfile").write_text(f"FROM {source}\nENV PYTHONPATH=/opt/shadow\n")
    tag = f"{shipped['repository']}:forged-config"
    engine.legacy_build(context, context / "Dockerfile", tag)
    engine.push(tag)
    digests = [d for d in engine.client.image.inspect(tag).repo_digests or [] if d.startswith(shipped["repository"] + "@")]
    assert digests, "the registry's digest of the forged image"
    return digests[0]


def test_an_image_that_differs_only_in_its_config_is_refused_in_phase_one(capsys, engine, shipped, rig, tmp_path):
    """Same layers, same labels, another config (ENV PYTHONPATH=/opt/shadow), pushed under its own digest: phase 1
    compares the pulled image's config digest with the lock's on the node's store and refuses it before any tag moves
    or any serve restarts, on the classic and the containerd store alike."""
    deploy_control(capsys, shipped, "baseline")
    forged = forged_config_image(engine, shipped, tmp_path)
    pulled = engine.inspect_image(forged)
    assert pulled["RootFS"]["Layers"] == engine.inspect_image(shipped["digest"])["RootFS"]["Layers"]
    before = fleet_snapshot(rig, shipped)
    code, _, err = ship(capsys, shipped, "deploy", "--preset", "control", "--image", forged, "--reason", "forged")
    assert code == 12 and f"node spark-a: {forged} is not the release's image (config sha256:" in err, err
    assert "other Env" in err and "not the lock's" in err and err.count("\n") == 1, err
    assert fleet_snapshot(rig, shipped) == before
    assert ship(capsys, shipped, "verify-running")[0] == 0


NO_PYTHON3 = "kvbake-test/no-python3:1"  # the base with its python3 moved off PATH: the process probe cannot run there


def without_python3_on_path(client) -> tuple[str, str, dict[str, str]]:
    """The base with python3 moved to /opt/py (off PATH), committed on the node: image, interpreter, environment."""
    move = "mkdir -p /opt/py && cp /usr/bin/python3.11 /opt/py/python3 && rm -f /usr/bin/python3 /usr/bin/python3.11 /usr/local/bin/python3*"
    client.run(BASE, ["-c", move], entrypoint="sh", name="no-python3-build", networks=["none"])
    client.container.commit("no-python3-build", NO_PYTHON3)
    client.container.remove("no-python3-build", force=True)
    return NO_PYTHON3, "/opt/py/python3", {"PYTHONHOME": "/usr"}


@pytest.mark.parametrize("python3", ["on PATH", pytest.param("off PATH", marks=pytest.mark.once_on_classic)])  # no store is its subject
def test_a_second_vllm_serve_on_a_node_fails_verify_running_and_stops_deploy_and_rollback(capsys, shipped, rig, tmp_path, python3):
    """An old launcher's serve beside kvbake's on one GPU node: verify-running names it, deploy and rollback refuse it
    before anything moves; also when its image has no python3 on PATH (the process probe cannot run: `docker top`
    reads it)."""
    from kvbake_rig.serve_shapes import STANDIN_VLLM, standin_serve
    from serveshapes import serves

    deploy_control(capsys, shipped, "one serve per node")
    assert ship(capsys, shipped, "deploy", "--preset", "packing-327680", "--image", shipped["digest"], "--reason", "packing")[0] == 0
    (tmp_path / "model").mkdir()
    command = standin_serve(4096)
    client = rig["b"].client()
    image, interpreter, env = (BASE, command[0], {}) if python3 == "on PATH" else without_python3_on_path(client)
    client.run(image, command[1:], entrypoint=interpreter, name="old-launcher-serve", detach=True, networks=["none"], envs=env,
               mounts=[STANDIN_VLLM, ["type=bind", f"source={tmp_path / 'model'}", "target=/models/standin", "readonly"]])
    try:
        deadline = time.monotonic() + 20
        started = (lambda: serves(Engine(rig["b"].host), "old-launcher-serve")) if python3 == "on PATH" else (
            lambda: any("vllm serve" in command for _, command in Engine(rig["b"].host).top("old-launcher-serve")))
        while not started():
            assert time.monotonic() < deadline, "the second serve never started its vLLM process"
            time.sleep(0.2)
        code, _, err = ship(capsys, shipped, "verify-running")
        assert code == 7 and "spark-b: a second vLLM serve runs in old-launcher-serve (neither kvbake's nor the adopted one)" in err, err
        before = fleet_snapshot(rig, shipped)
        for argv in (("deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "again"), ("rollback",)):
            code, _, err = ship(capsys, shipped, *argv)
            assert code == 12 and "node spark-b runs another vLLM serve in old-launcher-serve" in err, err
            assert fleet_snapshot(rig, shipped) == before, f"{argv[0]} changed a node"
    finally:
        client.container.remove("old-launcher-serve", force=True)
        if python3 == "off PATH":
            client.image.remove(NO_PYTHON3, force=True)
    assert ship(capsys, shipped, "verify-running")[0] == 0
