"""The serve shapes on real Ray: the Ray stand-in base on both nodes, head (127.0.0.2) and worker (127.0.0.3) joined on
loopback. kvbake reads the cluster, adopts it, deploys, rolls back and returns to it; a watch on the GCS proves from
Ray's own node table that every old Ray node is gone before the first new one runs, and that every new cluster forms of
its two new nodes.

Only current eugr's shape (`ray start` by docker exec beside `sleep infinity`, in a --rm container) runs here as the
rig starts it: the kept copy of eugr's launch-cluster.sh always runs its Ray node as the container's main process, so
no real script starts this shape. vLLM's run_cluster.sh runs as written, with real vLLM, in
test_community_launchers.py, under the same watch."""

from __future__ import annotations

import json
from typing import Iterator

import pytest

from kvbake.engines.adapters.client import Engine
from kvbake_rig.ports import fixed_ports_held
from kvbake_rig.serve_shapes import RAY_BASE, RAY_NO_EGRESS, RAY_NODE_IPS, REAL_RAY_SHAPES, RIG_SECRETS, SHAPES

from conftest import ship_standin
from kvbake_rig.gcs_polls import alive, gang_down_seen, stop_order_failures, timeline
from raywatch import GcsWatch
from serveshapes import NODES, clear_nodes, signed_by_a_reviewer
from shiprig import reset_nodes
from test_serve_shapes import Walk

pytestmark = [pytest.mark.docker, pytest.mark.field_engines_only, pytest.mark.once_on_containerd, pytest.mark.runs_first]
EUGR_CURRENT = "eugr current, real ray"


@pytest.fixture(scope="module")
def ray_shipped(engine: Engine, rig: dict, tmp_path_factory) -> dict:
    """The stand-in chain locked on the Ray stand-in base, built and pushed as its own repository; both nodes hold
    that base, as they hold the stand-in base."""
    assert engine.inspect_image(RAY_BASE) is not None, f"{RAY_BASE} is missing: run scripts/standin_ray_base.py"
    for key in NODES:
        if Engine(rig[key].host).inspect_image(RAY_BASE) is None:
            rig[key].client().image.load(engine.client.image.save(RAY_BASE))
    folder = tmp_path_factory.mktemp("standin-ray") / "standin"
    manifest, record = ship_standin(folder, rig["registry"].address, base=RAY_BASE, name="standin-ray")
    digest = record["pinned"]
    return {"manifest": manifest, "digest": digest, "folder": folder, "repository": digest.split("@")[0]}


@pytest.fixture(scope="module")
def ray_reviewer(ray_shipped: dict, tmp_path_factory) -> Path:
    return signed_by_a_reviewer(ray_shipped, tmp_path_factory.mktemp("ray-reviewer"))


@pytest.fixture()
def ray_rig(rig, ray_shipped, monkeypatch) -> Iterator[None]:
    """Both nodes reset to the Ray stand-in, the real-Ray shapes in the walk's table, and Ray's fixed ports (its
    client server's 10001 on the head's address) held against another pass's real Ray."""
    with fixed_ports_held():
        reset_nodes(rig, ray_shipped["repository"])
        for name, value in RIG_SECRETS.items():
            monkeypatch.setenv(name, value)
        for shape, entry in REAL_RAY_SHAPES.items():
            monkeypatch.setitem(SHAPES, shape, entry)
        yield
        clear_nodes(rig, tuple({name for _, names in REAL_RAY_SHAPES.values() for name in names.values()}))
        reset_nodes(rig, ray_shipped["repository"])


# current eugr's cluster (`ray start` by docker exec beside `sleep infinity`, --rm: only its raylet shows the node, and
# bringing it back recreates the container and runs `ray start` again, rebuilt from the raylet's own arguments, before
# the head's vLLM)
@pytest.mark.parametrize("shape", [EUGR_CURRENT])
def test_a_ray_cluster_on_real_ray_restarts_as_a_gang_as_its_gcs_shows(capsys, engine, rig, tmp_path, ray_shipped, ray_rig, ray_reviewer, shape):
    walk = Walk(capsys, ray_shipped, rig, tmp_path, shape)
    original = walk.original
    assert walk.serves_the_api(), "the pair serves before kvbake"
    with GcsWatch(engine, f"{RAY_NODE_IPS['a']}:{walk.ports.ray}") as watch:
        adopted_cluster = watch.wait_for(lambda poll: len(alive(poll)) == 2)
        assert {info["ip"] for info in adopted_cluster["nodes"].values()} == set(RAY_NODE_IPS.values()), "head and worker joined"
        described = walk.init(tmp_path / "project", ray_reviewer)
        assert walk.state() == original, "init changes nothing on the nodes"
        assert described["check"]["nodes"] == {NODES["a"]: "control"}
        launch = described["deploy"]["launcher"]["env"]
        assert (launch["SHAPE"], launch["RAY_PORT"]) == ("ray", str(walk.ports.ray))
        assert "--node-ip-address={node_address}" in json.loads(launch["RAY_START_ARGS"])
        assert RAY_NO_EGRESS.items() <= json.loads(launch["CONTAINER_ENV"]).items(), "kvbake's Ray nodes get the egress block too"
        assert {n["name"]: n["address"] for n in described["deploy"]["nodes"]} == {NODES[k]: ip for k, ip in RAY_NODE_IPS.items()}
        walk.run("adopt", "--reason", shape)
        walk.run("verify-running")
        steps = {"deploy control over the adopted cluster": lambda: walk.deploy("control"),
                 "deploy packing over kvbake's cluster": lambda: walk.deploy("packing-327680"),
                 "rollback to control": lambda: walk.run("rollback"),
                 "rollback --to adopted": lambda: walk.run("rollback", "--to", "adopted")}
        clusters = [adopted_cluster["cluster"]]
        for name, step in steps.items():
            old, new, polls = watch.gang_restart(step)
            assert stop_order_failures(old, new, polls) == [], f"{name}: {timeline(polls)}"
            assert old["cluster"] == clusters[-1] and new["cluster"] not in clusters, name
            clusters.append(new["cluster"])
            assert {info["ip"] for info in new["nodes"].values()} == set(RAY_NODE_IPS.values()), name
            assert gang_down_seen(new, polls), f"{name}: the old gang was down first: {timeline(polls)}"
            walk.run("verify-running")
    final = walk.state()
    assert walk.adopted_serves(final) == walk.adopted_serves(original)
    assert all(walk.kvbake_gone(final, key) for key in NODES) and walk.serves_the_api(), "the original serve answers again"
