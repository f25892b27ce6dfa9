"""eugr's launch-cluster.sh as its author wrote it (tests/launchers), with real Ray and real vLLM (the CPU build), in
the two serves its users run. With Ray: the head runs the script with a mod (`--apply-mod`, whose run.sh patches a vLLM
file in each running container) and `exec` for the serve; the worker's Ray node is started over ssh. With vLLM's
multiprocessing backend (eugr's newer default): the same containers, one tensor-parallel group of two real vLLM ranks,
the worker's headless rank started by `docker exec` over ssh. An operator walks the runbook's commands over each serve,
as test_community_launchers.py does over run_cluster.sh's: init, the launcher retired, lock with the served-bytes
proof, build, push --sign, adopt, deploy, verify-running, validate with the serve's API key, rollback, rollback --to
adopted (both nodes' containers created again from adopt's copies, a mod intact), hand-back; then eugr's own `stop`,
`start -d` and `exec` work as before kvbake.

What differs from an operator's Spark, and why: this machine is both nodes, so `ssh 127.0.0.3` reaches the worker's
engine through the rig's sshd (tests/launchers/README.md allows it), and each node engine runs in an IPC and mount
namespace with a /dev/shm of its own (kvbake_rig/node_engine.py: eugr's `--ipc=host` would otherwise give both nodes'
ranks one /dev/shm, and vLLM takes ranks that share one for ranks of one node); the head's address comes from
LOCAL_IP, a variable the script's autodiscover.sh reads before it looks at `--eth-if` (the loopback interface's own
address, 127.0.0.1, is one Ray replaces by the machine's outward one); the Ray walk's serve is typed as the module
`vllm serve` runs (the CPU image has no `vllm` console script); the walks' image adds to the serving base the `vllm`
distribution record a field image has (kvbake_rig/launchers.py: field_base), which the headless rank's entry reads; and
the mod edits with python3 (the CPU image has no `patch`). In the Ray walk real vLLM serves on the head alone and the
worker is a real Ray node. The walks bind the script's fixed ports (Ray 6379, the dashboard 8265): they run once, in
the classic store's pass with run_cluster.sh's walk, one after the other on the same node engines, and hold the
machine-wide fixed-ports lock every real-Ray test takes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

from kvbake.engines.adapters.client import Engine
from kvbake.serve.core.serve_reading import read_serve
from kvbake_rig.launchers import ADDRESSES, EUGR_CONTAINER, MODEL_IN_CONTAINER, EugrCluster, ray_nodes_alive, wait_for_ray_nodes
from kvbake_rig.ports import free_port
from kvbake_rig.serve_shapes import RIG_API_KEY, within_this_machines_memlock

from conftest import run
from launcherwalk import (NODES, SERVE_ARGS, VALIDATE, LauncherRig, Operator, containers, containers_when, documented_walk, fixed_ports,  # noqa: F401
                          gang_restarts, remove_every_container, serves, wait_serving)

pytestmark = [pytest.mark.docker, pytest.mark.field_engines_only, pytest.mark.once_on_classic, pytest.mark.runs_last]
# The serve as the module `vllm serve` starts: the rig's CPU image installs vLLM without its console script and metadata.
VLLM_SERVE = ("python3", "-m", "vllm.entrypoints.openai.api_server", "--model")
MOD_LINE = "# edited where it runs, by the launcher's mod"
MOD_SCRIPT = f"""#!/bin/bash
set -e
package=$(python3 -c "import importlib.util; print(importlib.util.find_spec('vllm').submodule_search_locations[0])")
echo "{MOD_LINE}" >> "$package/version.py"
python3 -c "import vllm.version"
"""


def eugr_mod(folder: Path) -> Path:
    """A mod folder as eugr's `--apply-mod` takes it: a `run.sh` that patches a vLLM file (and compiles it, as the
    first import of the serve would)."""
    mod = folder / "kvbake-rig-mod"
    mod.mkdir(parents=True)
    (mod / "run.sh").write_text(MOD_SCRIPT)
    return mod


def mod_intact(host: str, container: str = EUGR_CONTAINER) -> bool:
    script = "import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec('vllm.version').origin).read_text())"
    return Engine(host).exec_in(container, ["python3", "-c", script]).rstrip().endswith(MOD_LINE)


@pytest.fixture()
def eugr(launcher_rig: LauncherRig, tmp_path: Path, fixed_ports: None) -> Iterator[tuple[EugrCluster, int]]:
    """eugr's launch-cluster.sh as written, with a mod, `exec vllm serve …` with its API key: the operator's serve."""
    cluster = EugrCluster(launcher_rig.hosts, tmp_path / "eugr", launcher_rig.model.folder, image=launcher_rig.image,
                          mods=(eugr_mod(tmp_path / "mods"),))
    port = free_port()
    try:
        cluster.open()
        cluster.exec_serve([*VLLM_SERVE, MODEL_IN_CONTAINER, "--port", str(port), *SERVE_ARGS, "--api-key", RIG_API_KEY])
        try:
            wait_serving(port)
        except AssertionError as failed:
            raise AssertionError(f"{failed}: {cluster.log()}") from None
        yield cluster, port
    finally:
        cluster.close()
        remove_every_container(launcher_rig)


def test_eugr_launch_cluster_sh_with_a_mod_is_read_replaced_and_brought_back_with_the_mod_then_runs_as_before(
        capsys, engine, launcher_rig, eugr, tmp_path, monkeypatch):
    cluster, port = eugr
    hosts = launcher_rig.hosts
    assert ray_nodes_alive(hosts["a"], EUGR_CONTAINER) == 2, "the worker, started over ssh, joined the head's cluster"
    assert all(mod_intact(host) for host in hosts.values()), "the mod patched vLLM on both nodes"
    assert serves(port) and not serves(port, key=None), "the serve needs its API key"
    before = {key: containers(host) for key, host in hosts.items()}
    cluster.detach()  # the runbook's retirement: the script is SIGKILLed, its trap (stop the cluster) never runs
    assert serves(port) and {key: containers(host) for key, host in hosts.items()} == before
    ops = Operator(capsys, launcher_rig, tmp_path, monkeypatch)

    written, said = ops.init()
    deploy = written["deploy.yaml"]
    assert "spark-a: its vLLM (pid " in said and "writes to the interactive `docker exec` that started it" in said
    assert all(f"{node}: {EUGR_CONTAINER} bears a name a launcher's exit trap stops" in said for node in NODES.values()), said
    assert {key: containers(host) for key, host in hosts.items()} == before, "init changes nothing on the nodes"
    assert [(n["name"], n["container"], n.get("address")) for n in deploy["nodes"]] == [
        ("spark-a", EUGR_CONTAINER, ADDRESSES["a"]), ("spark-b", EUGR_CONTAINER, ADDRESSES["b"])]
    # eugr's containers are privileged: init gives kvbake's serve the limits they ran with instead (memlock
    # unlimited). This machine's kernel lets no container raise its hard limit, so the test lowers it to the machine's
    # in deploy.yaml, as an operator on such a host would; on a Spark `memlock: -1` runs as init wrote it.
    within_this_machines_memlock(ops.project / "deploy.yaml")
    assert "spark-a serves preset control" in ops.ship("config", "--check")
    # the serve runs the mod's edit of vllm/version.py, which the reviewed chain does not hold: the release would drop
    # it, and lock says so until the operator states that change once
    code, out, err = run(capsys, "lock", "--donor", str(ops.donor), "--manifest", str(ops.project / "manifest.yaml"))
    assert code == 7 and out == "" and err.count("\n") == 1 and "vllm/version.py" in err and "--code-change" in err, (code, err)
    assert not (ops.project / "manifest.lock.json").exists(), "a refused lock writes no lock"
    out = ops.in_project("lock", "--donor", str(ops.donor), "--code-change", "the reviewed chain replaces the launcher's mod")
    assert "imported from the donor" in out
    (kept,) = (ops.project / "code-changes").glob("*.diff")
    assert "vllm/version.py" in kept.read_text(), "the mod's edit, which the release drops, is kept with the release"
    ops.in_project("build")
    ops.in_project("push", "--sign", str(ops.reviewer / "reviewer.key"))
    ops.ship("base", "sync")
    ops.ship("adopt", "--reason", "eugr cluster", "--launcher-retired")
    ops.ship("verify-running")

    steps = {"deploy control over the adopted cluster": lambda: ops.deploy("control"),
             "deploy packing over kvbake's cluster": lambda: ops.deploy("packing-x2")}
    clusters, addresses = gang_restarts(engine, steps)
    assert addresses == set(ADDRESSES.values()), "eugr gives both Ray nodes their address"
    assert "all ranks agree" in ops.ship("verify-running")
    ops.in_project("validate", "--preset", "packing-x2", "--endpoint", f"http://{ADDRESSES['a']}:{port}",
                   "--deploy", str(ops.project / "deploy.yaml"), "--corpus", str(launcher_rig.model.corpus), *VALIDATE)
    clusters += gang_restarts(engine, {"rollback to control": lambda: ops.ship("rollback"),
                                       "rollback --to adopted": lambda: ops.ship("rollback", "--to", "adopted")}, addresses)[0]
    assert len(set(clusters)) == len(clusters), "every step formed a cluster of its own"
    ops.ship("verify-running")
    assert all(mod_intact(host) for host in hosts.values()), "the serve came back from its copy, the mod intact"
    assert serves(port) and ray_nodes_alive(hosts["a"], EUGR_CONTAINER) == 2

    out = ops.ship("hand-back")
    assert ops.typed == documented_walk("eugr's `launch-cluster.sh`, start to home"), "docs/launchers.md's block is this walk"
    assert {key: set(containers(host)) for key, host in hosts.items()} == {"a": {EUGR_CONTAINER}, "b": {EUGR_CONTAINER}}
    assert serves(port), "hand-back never touches the serve"

    # the launcher as before kvbake: its own stop (the containers were --rm: they are gone), start -d with the mod, exec
    cluster.run("stop")
    assert containers_when(hosts, {"a": {}, "b": {}}) == {"a": {}, "b": {}}, "eugr's stop removed its containers"
    cluster.run("start", "-d")
    assert all(mod_intact(host) for host in hosts.values()) and ray_nodes_alive(hosts["a"], EUGR_CONTAINER) == 2
    cluster.exec_serve([*VLLM_SERVE, MODEL_IN_CONTAINER, "--port", str(port), *SERVE_ARGS, "--api-key", RIG_API_KEY])
    wait_serving(port)
    cluster.detach()
    out = ops.ship("adopt", "--reason", "the launcher's new run", "--launcher-retired")
    assert all(f"{node}: adopted {EUGR_CONTAINER} " in out for node in NODES.values()), out
    ops.ship("verify-running")


# ---------------------------------------------------------------------------------------------------------------
# The same containers with vLLM's multiprocessing backend, eugr's newer default: one tensor-parallel group of two
# ranks, the head's serve (`--nnodes 2 --node-rank 0`) started by the script's `exec`, the worker's (`--node-rank 1
# --headless`, through the entry `vllm serve` runs) by `docker exec` over ssh, as eugr's newer `exec` does on every
# node. Both ranks are real vLLM: the CPU build joins the two over gloo on loopback.

VLLM_CLI_SERVE = ("python3", "-m", "vllm.entrypoints.cli.main", "serve", "--model")


# The multiprocessing serve is started without --max-model-len, as many are: vLLM serves the model's own length
# (8192 for the tiny model), which init reads from /v1/models and config --check asks again.
MP_SERVE_ARGS = tuple(arg for at, arg in enumerate(SERVE_ARGS) if "--max-model-len" not in SERVE_ARGS[max(at - 1, 0):at + 1])
MODEL_LENGTH = 8192


def mp_serves(port: int, master_port: int) -> tuple[list[str], list[str]]:
    """The head's and the worker's command lines of one two-rank serve."""
    shared = ["--port", str(port), *MP_SERVE_ARGS, "--api-key", RIG_API_KEY, "--tensor-parallel-size", "2",
              "--distributed-executor-backend", "mp", "--nnodes", "2", "--master-addr", ADDRESSES["a"], "--master-port", str(master_port)]
    return ([*VLLM_SERVE, MODEL_IN_CONTAINER, *shared, "--node-rank", "0"],
            [*VLLM_CLI_SERVE, MODEL_IN_CONTAINER, *shared, "--node-rank", "1", "--headless"])


@pytest.fixture()
def eugr_mp(launcher_rig: LauncherRig, tmp_path: Path, fixed_ports: None) -> Iterator[tuple[EugrCluster, int]]:
    """eugr's containers (its kept copy starts Ray in both) serving one two-rank group with the multiprocessing backend."""
    cluster = EugrCluster(launcher_rig.hosts, tmp_path / "eugr", launcher_rig.model.folder, image=launcher_rig.image)
    port, master_port = free_port(), free_port()
    head, worker = mp_serves(port, master_port)
    try:
        cluster.open()
        cluster.exec_serve(head)
        wait_for_ray_nodes(launcher_rig.hosts["a"], EUGR_CONTAINER, 2)
        cluster.exec_worker_serve(worker)
        try:
            wait_serving(port)
        except AssertionError as failed:
            raise AssertionError(f"{failed}: {cluster.log()} {cluster.log('exec-worker.log')}") from None
        yield cluster, port
    finally:
        cluster.close()
        remove_every_container(launcher_rig)


def serving_container_ids(hosts: dict[str, str], name: str = "vllm-serve") -> dict[str, str]:
    return {key: Engine(host).container_inspect(name)["Id"] for key, host in hosts.items()}


def rank_serves(host: str, container: str) -> tuple[list[str], bool]:
    """The one vLLM serve a node's container runs (its arguments) and whether a Ray node runs beside it."""
    processes = Engine(host).processes(container)
    (serving,) = read_serve(processes).serving
    return serving.serve.args.argv(), any(p.argv and p.argv[0].endswith("raylet") for p in processes)


def test_eugr_containers_with_the_multiprocessing_backend_are_read_replaced_brought_back_and_handed_home(
        capsys, launcher_rig, eugr_mp, tmp_path, monkeypatch):
    cluster, port = eugr_mp
    hosts = launcher_rig.hosts
    assert serves(port) and not serves(port, key=None), "the two-rank serve answers, with its key"
    assert ray_nodes_alive(hosts["a"], EUGR_CONTAINER) == 2, "eugr's containers run a Ray node each, which the serve does not use"
    before = {key: containers(host) for key, host in hosts.items()}
    cluster.detach()  # the script and the worker's terminal SIGKILLed: no trap runs, both ranks keep serving
    assert serves(port) and {key: containers(host) for key, host in hosts.items()} == before
    ops = Operator(capsys, launcher_rig, tmp_path, monkeypatch)

    written, said = ops.init()
    assert all(f"{node}: its vLLM (pid " in said for node in NODES.values()), said
    assert all(f"{node}: {EUGR_CONTAINER} bears a name a launcher's exit trap stops" in said for node in NODES.values()), said
    control = written["manifest.yaml"]["presets"]["control"]
    assert control["max_model_len"] == MODEL_LENGTH and "/v1/models" in control["note"], "the length the serve's API names"
    env = written["deploy.yaml"]["launcher"]["env"]
    assert env["SHAPE"] == "exec" and not any(name.startswith("RAY_") for name in env), "no rank serves through Ray"
    assert json.loads(env["CONTAINER_ENV"])["VLLM_HOST_IP"] == "{node_address}", "each rank keeps the address eugr gave it"
    assert not any(n["launch"].get("ray_start") for n in written["deploy.yaml"]["nodes"])
    assert {key: containers(host) for key, host in hosts.items()} == before, "init changes nothing on the nodes"
    within_this_machines_memlock(ops.project / "deploy.yaml")  # as in eugr's walk above: the machine's memlock limit
    assert "spark-a serves preset control" in ops.ship("config", "--check")
    ops.in_project("lock", "--donor", str(ops.donor))  # no mod: the chain's changes alone differ from the serve
    ops.in_project("build")
    ops.in_project("push", "--sign", str(ops.reviewer / "reviewer.key"))
    ops.ship("base", "sync")
    ops.ship("adopt", "--reason", "eugr multiprocessing serve", "--launcher-retired")
    ops.ship("verify-running")

    ops.deploy("control")
    replaced = [serving_container_ids(hosts)]
    assert serves(port) and "all ranks agree" in ops.ship("verify-running")
    ops.deploy("packing-x2")
    replaced.append(serving_container_ids(hosts))
    assert all(replaced[0][key] != replaced[1][key] for key in hosts), "the deploy replaced both ranks"
    assert serves(port) and "all ranks agree" in ops.ship("verify-running")
    (head_args, head_ray), (worker_args, worker_ray) = (rank_serves(hosts[key], "vllm-serve") for key in ("a", "b"))
    assert "--headless" in worker_args and "--headless" not in head_args and not (head_ray or worker_ray), "kvbake's ranks, no Ray node"
    ops.in_project("validate", "--preset", "packing-x2", "--endpoint", f"http://{ADDRESSES['a']}:{port}",
                   "--deploy", str(ops.project / "deploy.yaml"), "--corpus", str(launcher_rig.model.corpus), *VALIDATE)
    ops.ship("rollback")
    ops.ship("rollback", "--to", "adopted")
    ops.ship("verify-running")
    assert serves(port) and ray_nodes_alive(hosts["a"], EUGR_CONTAINER) == 2, "eugr's containers are back, Ray node included"
    assert "--headless" in rank_serves(hosts["b"], EUGR_CONTAINER)[0], "the worker's rank runs again as it ran"

    ops.ship("hand-back")
    assert ops.typed == documented_walk("eugr's containers with the multiprocessing backend, start to home")
    assert {key: set(containers(host)) for key, host in hosts.items()} == {"a": {EUGR_CONTAINER}, "b": {EUGR_CONTAINER}}
    assert serves(port), "hand-back never touches the serve"

    # the launcher as before kvbake: its stop removes both containers, start -d and the two ranks' execs serve again
    cluster.run("stop")
    assert containers_when(hosts, {"a": {}, "b": {}}) == {"a": {}, "b": {}}, "eugr's stop removed its containers"
    cluster.run("start", "-d")
    head, worker = mp_serves(port, free_port())
    cluster.exec_serve(head)
    cluster.exec_worker_serve(worker)
    wait_serving(port)
