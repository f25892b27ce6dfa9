"""eugr's launch-cluster.sh as its author wrote it (tests/launchers), with real Ray and real vLLM (the CPU build): the
head runs the script with a mod (`--apply-mod`, whose run.sh patches a vLLM file in each running container) and `exec`
for the serve; the worker is started over ssh. An operator walks the runbook's commands over that serve, as
test_community_launchers.py does over run_cluster.sh's: init, the launcher retired, lock with the served-bytes proof,
build, push --sign, adopt, deploy, verify-running, validate with the serve's API key, rollback, rollback --to adopted
(both nodes' containers created again from adopt's copies, the mod intact), hand-back; then eugr's own `stop`, `start
-d` and `exec` work as before kvbake, and adopt works again.

What differs from an operator's Spark, and why: this machine is both nodes, so `ssh 127.0.0.3` reaches the worker's
engine through the rig's sshd (tests/launchers/README.md allows it); the head's address comes from LOCAL_IP, a variable
the script's autodiscover.sh reads before it looks at `--eth-if` (the loopback interface's own address, 127.0.0.1, is
one Ray replaces by the machine's outward one); the serve is typed as the module `vllm serve` runs (the CPU image has
no `vllm` console script); and the mod edits with python3 (the CPU image has no `patch`). vLLM's CPU build cannot run
one tensor-parallel group across two nodes: real vLLM serves on the head alone and the worker is a real Ray node.
The walk binds the script's fixed ports (Ray 6379, the dashboard 8265): it runs once, on the classic store, after
run_cluster.sh's walk in the same pass, and holds the machine-wide fixed-ports lock every real-Ray test takes."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from kvbake.engines.adapters.client import Engine
from kvbake_rig.launchers import ADDRESSES, EUGR_CONTAINER, MODEL_IN_CONTAINER, EugrCluster, ray_nodes_alive
from kvbake_rig.ports import free_port
from kvbake_rig.serve_shapes import RIG_API_KEY, within_this_machines_memlock

from conftest import run
from launcherwalk import (NODES, SERVE_ARGS, VALIDATE, LauncherRig, Operator, containers, documented_walk, fixed_ports,  # noqa: F401
                          gang_restarts, launcher_rig, remove_every_container, serves, wait_serving)

pytestmark = [pytest.mark.docker, pytest.mark.field_engines_only, pytest.mark.once_on_classic]
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
    assert {key: containers(host) for key, host in hosts.items()} == {"a": {}, "b": {}}, "eugr's stop removed its containers"
    cluster.run("start", "-d")
    assert all(mod_intact(host) for host in hosts.values()) and ray_nodes_alive(hosts["a"], EUGR_CONTAINER) == 2
    cluster.exec_serve([*VLLM_SERVE, MODEL_IN_CONTAINER, "--port", str(port), *SERVE_ARGS, "--api-key", RIG_API_KEY])
    wait_serving(port)
    cluster.detach()
    out = ops.ship("adopt", "--reason", "the launcher's new run", "--launcher-retired")
    assert all(f"{node}: adopted {EUGR_CONTAINER} " in out for node in NODES.values()), out
    ops.ship("verify-running")
