"""`deploy --dry-run` on the rig's node engines: it changes nothing, and what it prints is what kvbake-launch-vllm then
creates with the same variables, option by option (devices, capabilities, ulimits, /dev/shm, mounts, variables,
restart policy, entrypoint and arguments), in every serve shape: main, exec, and the Ray cluster (with the reference
launcher's own plan run with the stand-in programs, since the stand-in base has no Ray)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import time

import pytest

from kvbake.engines.adapters.client import Engine
from kvbake_rig.ports import free_port
from kvbake.serve.core.serve_reading import read_serve

from shiprig import CONTAINER, fleet_snapshot, reset_nodes, ship_with, write_deploy

pytestmark = pytest.mark.docker

LAUNCH_VLLM = str(Path(sys.executable).parent / "kvbake-launch-vllm")
# The Ray shape runs `ray start --block` as each container's main process; the stand-in base has no Ray, so that shape
# is launched by the reference launcher's own checked plan with the stand-in programs (scripts/standin_reference_launcher.py).
STANDIN_REFERENCE_LAUNCHER = [sys.executable, str(Path(__file__).resolve().parents[2] / "scripts" / "standin_reference_launcher.py")]
SOURCE_ROOT = "/usr/local/lib/python3.11/dist-packages"
# Settings a CPU-only engine accepts: no GPU, no InfiniBand; the loopback interface; limits no higher than the host's
# hard limits (an engine that may not raise memlock refuses memlock=-1 when it starts the container).
NODE_LAUNCH = {"env": {"NCCL_SOCKET_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "lo", "NCCL_DEBUG": "INFO"},
               "devices": ["/dev/null:/dev/kvbake-null"], "cap_add": ["SYS_NICE"], "ulimits": {"memlock": 65536, "nofile": "1024:2048"},
               "shm_size": "256m"}
SIZES = {"b": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}


def deployment(folder: Path, rig: dict, shape: str) -> Path:
    """The rig's two nodes served by kvbake-launch-vllm, each with its own launch settings and a writable cache."""
    (folder / "model").mkdir(parents=True, exist_ok=True)
    env = {"MODEL_DIR": str(folder / "model"), "GPUS": "none", "SOURCE_ROOT": SOURCE_ROOT, "SHAPE": shape,
           "VLLM_HOST": "127.0.0.1", "VLLM_PORT": "18431", "MASTER_PORT": "18432"}
    if shape == "ray":  # its Ray node and the head's serve listen on the host network: ports free on this machine
        env.update({"VLLM_PORT": str(free_port()), "MASTER_PORT": str(free_port()), "RAY_PORT": str(free_port())})
    path = write_deploy(folder, rig, STANDIN_REFERENCE_LAUNCHER if shape == "ray" else [LAUNCH_VLLM], env=env)
    document = json.loads(path.read_text())
    for node in document["nodes"]:
        cache = folder / "cache" / node["name"]
        cache.mkdir(parents=True, exist_ok=True)
        node["launch"] = {**NODE_LAUNCH, "cache_mounts": [f"{cache}:/root/.cache/huggingface"]}
    path.write_text(json.dumps(document))
    return path


def project_state(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def options_of(argv: list[str]) -> dict[str, list[str]]:
    """docker run's options as printed: each flag with its values, in order (`--detach` alone)."""
    options: dict[str, list[str]] = {}
    i = 2
    while argv[i] != "--entrypoint":
        if argv[i] == "--detach":
            i += 1
            continue
        options.setdefault(argv[i], []).append(argv[i + 1])
        i += 2
    return options


def tag_current(engine: Engine, digest: str, repository: str) -> None:
    """What a deploy's phase 1 and retag do before the launcher runs: the release pulled by digest, tagged current."""
    engine.pull(digest)
    engine.tag(engine.image_id_of(digest), f"{repository}:current")


def launch_as_printed(node: dict, launcher: list[str]) -> str:
    """Run kvbake-launch-vllm with the variables the dry run printed, its switches file where they point (the dry run
    wrote it to a temporary folder it removed; its lines are in the report)."""
    env_file = Path(node["variables"]["KVBAKE_ENV_FILE"])
    env_file.parent.mkdir(parents=True, exist_ok=True)
    env_file.write_text("# the dry run's switches\n" + "".join(f"{line}\n" for line in node["ranks_env"]))
    done = subprocess.run(launcher, env={**os.environ, **node["variables"]}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def assert_container_is_the_printed_call(engine: Engine, call: list[str], node: dict) -> dict:
    found = engine.container_inspect(CONTAINER)
    assert found is not None
    host, config, options = found["HostConfig"], found["Config"], options_of(call)
    assert host["RestartPolicy"]["Name"] == options["--restart"][0] == "no"
    assert [(d["PathOnHost"], d["PathInContainer"]) for d in host["Devices"]] == \
        [tuple(value.split(":")[:2]) for value in options["--device"]]
    assert {c.removeprefix("CAP_") for c in host["CapAdd"]} == {c.removeprefix("CAP_") for c in options["--cap-add"]} == {"SYS_NICE"}
    printed_ulimits = [value.partition("=") for value in options["--ulimit"]]
    assert [(u["Name"], u["Soft"], u["Hard"]) for u in host["Ulimits"]] == \
        [(name, int(v.split(":")[0]), int(v.split(":")[-1])) for name, _, v in printed_ulimits]
    size = options["--shm-size"][0]
    assert host["ShmSize"] == int(size[:-1]) * SIZES[size[-1]] == 256 * 1024 ** 2
    mounts = [(m["Type"], m["Source"], m["Target"], bool(m.get("ReadOnly"))) for m in host["Mounts"]]
    printed_mounts = [dict(f.partition("=")[::2] if "=" in f else (f, True) for f in value.split(",")) for value in options["--mount"]]
    assert mounts == [(m["type"], m["source"], m["target"], bool(m.get("readonly"))) for m in printed_mounts]
    assert ("bind", node["variables"]["MODEL_DIR"], "/models/served", True) in mounts
    assert any(target == "/root/.cache/huggingface" and not read_only for _, _, target, read_only in mounts)
    assert set(options["--env"]) <= set(config["Env"])
    assert {"NCCL_SOCKET_IFNAME=lo", "GLOO_SOCKET_IFNAME=lo"} <= set(config["Env"])
    assert host["NetworkMode"] == options["--network"][0] == "host" and host["IpcMode"] == "host"
    assert config["Labels"] == {**config["Labels"], **dict(v.split("=", 1) for v in options["--label"])}
    image_at = call.index(found["Config"]["Image"])
    assert config["Entrypoint"] == [call[call.index("--entrypoint") + 1]] and config["Cmd"] == call[image_at + 1:]
    return found


def exec_serve_of(engine: Engine) -> list[str]:
    """The argv of the vLLM serve docker exec started in the container (it takes a moment to appear)."""
    deadline = time.monotonic() + 20
    while not (serving := read_serve(engine.processes(CONTAINER)).serving):
        assert time.monotonic() < deadline, "the exec'd serve never ran"
        time.sleep(0.2)
    return list(serving[0].process.argv)


CALLS = {"main": [["docker", "run"]], "exec": [["docker", "run"], ["docker", "exec"]],
         "ray": [["docker", "run"], ["docker", "exec"]]}


@pytest.mark.parametrize("shape", ["main", "exec", "ray"])
def test_the_dry_run_changes_nothing_and_the_launcher_then_creates_what_it_printed(shape, capsys, shipped, rig, tmp_path):
    reset_nodes(rig, shipped["repository"])
    folder = tmp_path / "deployment"
    deploy_file = deployment(folder, rig, shape)
    before, files_before = fleet_snapshot(rig, shipped, deploy_file), project_state(shipped["folder"]) | project_state(folder)
    code, out, err = ship_with(capsys, shipped, deploy_file, "deploy", "--dry-run", "--json", "--preset", "control",
                               "--image", shipped["digest"])
    assert code == 0, err
    assert fleet_snapshot(rig, shipped, deploy_file) == before
    assert project_state(shipped["folder"]) | project_state(folder) == files_before
    nodes = json.loads(out)["nodes"]
    assert [n["node"] for n in nodes] == ["spark-a", "spark-b"]
    try:
        for node, key in zip(nodes, ("a", "b")):
            tag_current(Engine(rig[key].host), shipped["digest"], shipped["repository"])
            calls = [shlex.split(line) for line in node["calls"]]
            # a Ray worker's container is its Ray node alone: the head's vLLM places the worker's rank there
            assert [c[:2] for c in calls] == (CALLS[shape][:1] if (shape, key) == ("ray", "b") else CALLS[shape])
            assert node["variables"]["DOCKER_HOST"] == (rig["a"].host if key == "a" else rig["b_host"])
            started = launch_as_printed(node, STANDIN_REFERENCE_LAUNCHER if shape == "ray" else [LAUNCH_VLLM])
            found = assert_container_is_the_printed_call(Engine(rig[key].host), calls[0], node)
            switches = {line for line in node["ranks_env"]}
            if shape == "ray":
                ray_port = node["variables"]["RAY_PORT"]
                ray_node = ["start", "--block", *(["--head", f"--port={ray_port}"] if key == "a" else [f"--address=127.0.0.1:{ray_port}"])]
                assert found["Config"]["Cmd"][-len(ray_node):] == ray_node and found["State"]["Running"]
                assert calls[0][calls[0].index("--env-file") + 1] == node["variables"]["KVBAKE_ENV_FILE"]
                assert switches <= set(found["Config"]["Env"]), "the Ray node carries the switches its actors inherit"
                if key == "a":
                    served = exec_serve_of(Engine(rig[key].host))
                    assert served[served.index("--distributed-executor-backend") + 1] == "ray" and "--nnodes" not in served
                    assert served[served.index("--port") + 1] == node["variables"]["VLLM_PORT"]
                    assert calls[1][calls[1].index("--env-file") + 1] == node["variables"]["KVBAKE_ENV_FILE"]
            elif shape == "main":
                assert calls[0][calls[0].index("--env-file") + 1] == node["variables"]["KVBAKE_ENV_FILE"]
                assert switches <= set(found["Config"]["Env"])
            else:
                assert "--env-file" not in calls[0] and not switches & set(found["Config"]["Env"])
                assert found["Config"]["Entrypoint"] == ["sleep"] and found["Config"]["Cmd"] == ["infinity"]
                # The engine forgets a finished exec (the stand-in image has no vLLM entry module, so it ends at once);
                # the launcher's line says its docker exec was accepted after the container started.
                assert found["State"]["Running"] and started.rstrip().endswith(f"exec shape) on {node['variables']['DOCKER_HOST']}")
                assert calls[1][calls[1].index("--env-file") + 1] == node["variables"]["KVBAKE_ENV_FILE"]
    finally:
        shutil.rmtree(Path(nodes[0]["variables"]["KVBAKE_ENV_FILE"]).parents[1], ignore_errors=True)
        reset_nodes(rig, shipped["repository"])
