"""vLLM's run_cluster.sh as its authors wrote it (tests/launchers), with real Ray and real vLLM (the CPU build): it
starts today's serve on two node engines, then an operator walks the runbook's commands over it: init (which names the
launcher's ties), the launcher retired, lock from the donor with the served-bytes proof, build, push --sign, adopt,
deploy, verify-running, validate against a serve that needs its API key, rollback, rollback --to adopted (the
launcher's own serve under its own names), hand-back; then the launcher runs as before kvbake and adopt works again.
eugr's launch-cluster.sh walks the same way in test_launcher_eugr.py.

Real vLLM serves on the head alone (a group of one rank) and the worker is a real Ray node that joins the head's
cluster; kvbake still restarts both as a gang (test_launcher_eugr.py runs a group of two real ranks, with vLLM's
multiprocessing backend). The walk binds the script's fixed port (Ray 6379): it runs once, at the end of the classic
store's pass (once_on_classic, runs_last), with eugr's walks, one after the other on the same node engines, each
holding the machine-wide fixed-ports lock."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

from kvbake.engines.adapters.client import Engine
from kvbake_rig.launchers import ADDRESSES, MODEL_IN_CONTAINER, RAY_PORT, RunClusterPair, ray_nodes_alive
from kvbake_rig.ports import free_port
from kvbake_rig.serve_shapes import RIG_API_KEY

from launcherwalk import (LAUNCHER_CONTAINER, NODES, SERVE_ARGS, VALIDATE, LauncherRig, Operator, containers, documented_walk,
                          fixed_ports, gang_restarts, remove_every_container, serves, wait_serving)  # noqa: F401 - fixtures by name

pytestmark = [pytest.mark.docker, pytest.mark.field_engines_only, pytest.mark.once_on_classic, pytest.mark.runs_last]


@pytest.fixture()
def run_cluster(launcher_rig: LauncherRig, tmp_path: Path, fixed_ports: None) -> Iterator[tuple[RunClusterPair, dict[str, str], int]]:
    """run_cluster.sh as written, head then worker, and vLLM exec'd on the head with its API key: the operator's serve."""
    pair = RunClusterPair(launcher_rig.hosts, tmp_path / "run_cluster", launcher_rig.model.folder, image=launcher_rig.image)
    port = free_port()
    try:
        names = pair.start()
        pair.exec_serve(names["a"], ["--model", MODEL_IN_CONTAINER, "--port", str(port), *SERVE_ARGS, "--api-key", RIG_API_KEY])
        wait_serving(port)
        yield pair, names, port
    finally:
        pair.interrupt()
        remove_every_container(launcher_rig)


def test_run_cluster_sh_as_written_is_read_replaced_validated_and_brought_back_under_its_own_names(
        capsys, engine, launcher_rig, run_cluster, tmp_path, monkeypatch):
    pair, names, port = run_cluster
    assert ray_nodes_alive(launcher_rig.hosts["a"], names["a"]) == 2, "the worker's Ray node joined the head's"
    assert serves(port) and not serves(port, key=None), "the serve needs its API key"
    before = {key: containers(host) for key, host in launcher_rig.hosts.items()}
    pair.detach()  # the runbook's "retire your launcher": the script ends without its EXIT trap, the serve runs on
    assert serves(port) and {key: containers(host) for key, host in launcher_rig.hosts.items()} == before
    ops = Operator(capsys, launcher_rig, tmp_path, monkeypatch)

    written, said = ops.init()
    deploy = written["deploy.yaml"]
    assert f"tied to its launcher: spark-a: {names['a']} was started by `docker run` in the foreground" in said
    assert f"tied to its launcher: spark-b: {names['b']} was started by `docker run` in the foreground" in said
    assert "spark-a: its vLLM (pid " in said and "writes to the interactive `docker exec` that started it" in said
    assert {key: containers(host) for key, host in launcher_rig.hosts.items()} == before, "init changes nothing on the nodes"
    assert [(n["name"], n["container"], n.get("address")) for n in deploy["nodes"]] == [
        ("spark-a", names["a"], ADDRESSES["a"]), ("spark-b", names["b"], ADDRESSES["b"])]
    assert deploy["nodes"][0]["launch"]["ray_start"] == ["--node-ip-address={node_address}"], "the head's own option"
    assert "ray_start" not in deploy["nodes"][1]["launch"], "the worker's ray start was given no option of its own"
    env = deploy["launcher"]["env"]
    assert (env["SHAPE"], env["RAY_PORT"], env["TENSOR_PARALLEL_SIZE"]) == ("ray", str(RAY_PORT), "1")
    assert json.loads(env["SECRET_ENV"]) == ["VLLM_API_KEY"] and RIG_API_KEY not in json.dumps(written)
    control = written["manifest.yaml"]["presets"]["control"]
    assert control["max_model_len"] == 4096 and control["launcher_args"] == ["--port", str(port), *SERVE_ARGS[:2], *SERVE_ARGS[4:]]
    assert "spark-a serves preset control" in ops.ship("config", "--check")

    out = ops.in_project("lock", "--donor", str(ops.donor))
    assert "imported from the donor" in out
    ops.in_project("build")
    ops.in_project("push", "--sign", str(ops.reviewer / "reviewer.key"))
    ops.ship("base", "sync")
    code, err = ops.refused("adopt", "--reason", "run_cluster.sh pair")
    assert code == 12 and "still tied to its launcher" in err and "adopt --launcher-retired" in err
    assert {key: containers(host) for key, host in launcher_rig.hosts.items()} == before, "a refused adopt changes nothing"
    ops.ship("adopt", "--reason", "run_cluster.sh pair", "--launcher-retired")  # its scripts were ended without their traps
    ops.ship("verify-running")

    steps = {"deploy control over the adopted cluster": lambda: ops.deploy("control"),
             "deploy packing over kvbake's cluster": lambda: ops.deploy("packing-x2")}
    clusters, addresses = gang_restarts(engine, steps)
    head = Engine(launcher_rig.hosts["a"])
    assert "KV cache size" in head.container_logs(LAUNCHER_CONTAINER), "vLLM's output is in docker logs of kvbake's serve"
    assert not any(name.startswith("node-") and state[0] for key in NODES for name, state in containers(launcher_rig.hosts[key]).items())
    out = ops.ship("verify-running")
    assert "all ranks agree" in out
    ops.in_project("validate", "--preset", "packing-x2", "--endpoint", f"http://{ADDRESSES['a']}:{port}",
                   "--deploy", str(ops.project / "deploy.yaml"), "--corpus", str(launcher_rig.model.corpus), *VALIDATE)
    clusters += gang_restarts(engine, {"rollback to control": lambda: ops.ship("rollback"),
                                       "rollback --to adopted": lambda: ops.ship("rollback", "--to", "adopted")}, addresses)[0]
    assert len(set(clusters)) == len(clusters), "every step formed a cluster of its own"
    ops.ship("verify-running")
    back = {key: containers(host) for key, host in launcher_rig.hosts.items()}
    for key in NODES:
        assert back[key][names[key]] == before[key][names[key]], "the launcher's own container, under its own name, runs again"
        assert LAUNCHER_CONTAINER not in back[key], "kvbake's serve is gone"
    assert serves(port) and ray_nodes_alive(launcher_rig.hosts["a"], names["a"]) == 2

    out = ops.ship("hand-back")
    assert ops.typed == documented_walk("The `run_cluster.sh` pair, start to home"), "docs/launchers.md's block is this walk"
    home = {key: containers(host) for key, host in launcher_rig.hosts.items()}
    assert home == {key: {names[key]: before[key][names[key]]} for key in NODES}, "the launcher's containers alone, kvbake's gone"
    for key, node in NODES.items():
        assert Engine(launcher_rig.hosts[key]).image_id_of(f"{written['manifest.yaml']['output']['repository']}:current") is None
        assert f"{node}: {names[key]} runs on" in out
        assert "deploy" in (ops.project / ".kvbake" / "home" / f"{node}.audit.log").read_text(), "the audit log is kept here"
    assert serves(port), "hand-back never touches the serve"
    assert "nothing of kvbake's is left" in ops.ship("hand-back"), "a second run is harmless"

    # the launcher as before kvbake: its serve stopped as its own trap stops it, then run_cluster.sh started again
    for key in ("b", "a"):
        Engine(launcher_rig.hosts[key]).client.container.stop(names[key])
        Engine(launcher_rig.hosts[key]).client.container.remove(names[key])
    again = pair.start()
    pair.exec_serve(again["a"], ["--model", MODEL_IN_CONTAINER, "--port", str(port), *SERVE_ARGS, "--api-key", RIG_API_KEY])
    wait_serving(port)
    assert set(again.values()).isdisjoint(names.values()) and ray_nodes_alive(launcher_rig.hosts["a"], again["a"]) == 2
    pair.detach()
    out = ops.ship("adopt", "--reason", "the launcher's new run", "--launcher-retired")  # new node-<n> names, found by processes
    assert all(f"{node}: adopted {again[key]} " in out for key, node in NODES.items()), out
    ops.ship("verify-running")


# eugr's mods edit the running container's files; the CPU image has no `patch`, so this one edits with python3.
