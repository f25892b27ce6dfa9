"""The deployment file: nodes, start order, readiness probe, drafter and launcher variables, and what is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbake.deployfile import Drafter, Readiness, load_deployment
from kvbake.errors import ManifestError

NODES = [{"name": "spark-a", "host": "ssh://ops@spark-a", "role": "head", "address": "10.0.0.1"},
         {"name": "spark-b", "host": "ssh://ops@spark-b", "role": "worker"},
         {"name": "spark-c", "host": "unix:///run/c.sock", "role": "worker"}]
LAUNCHER = {"command": ["/opt/serve/launch.sh"], "container": "vllm-serve"}


def deployment_file(tmp_path: Path, **extra) -> Path:
    path = tmp_path / "deploy.yaml"
    path.write_text(json.dumps({"format": 1, "nodes": NODES, "launcher": LAUNCHER, **extra}))
    return path


def test_the_defaults_keep_todays_behaviour(tmp_path: Path) -> None:
    deployment = load_deployment(deployment_file(tmp_path))
    assert (deployment.start, deployment.readiness, deployment.drafter, dict(deployment.launcher.env)) == ("in-order", None, None, {})
    assert deployment.start_groups() == (("spark-a",), ("spark-b",), ("spark-c",))
    assert [n.address for n in deployment.nodes] == ["10.0.0.1", "", ""] and deployment.head().name == "spark-a"


@pytest.mark.parametrize(("start", "groups"), [
    ("workers-first", (("spark-b", "spark-c"), ("spark-a",))),
    ("together", (("spark-a", "spark-b", "spark-c"),)),
    ("in-order", (("spark-a",), ("spark-b",), ("spark-c",))),
])
def test_start_orders(tmp_path: Path, start: str, groups: tuple) -> None:
    assert load_deployment(deployment_file(tmp_path, start=start)).start_groups() == groups


def test_readiness_drafter_and_launcher_variables(tmp_path: Path) -> None:
    deployment = load_deployment(deployment_file(
        tmp_path, readiness={"url": "http://spark-a:8000/health", "timeout_s": 900}, drafter={"url": "http://x86:8100", "max_positions": 327680},
        launcher={**LAUNCHER, "env": {"MODEL_DIR": "/models/dsv41", "VLLM_PORT": "8000"}}))
    assert deployment.readiness == Readiness("http://spark-a:8000/health", 200, 900, 1.0)
    assert deployment.drafter == Drafter("http://x86:8100", 327680)
    assert dict(deployment.launcher.env) == {"MODEL_DIR": "/models/dsv41", "VLLM_PORT": "8000"}


@pytest.mark.parametrize(("extra", "named"), [
    ({"start": "sometime"}, ("start", "'sometime'", "'in-order'", "'workers-first'", "'together'")),
    ({"readiness": {"url": "ftp://a/health"}}, ("readiness.url", "'ftp://a/health'")),
    ({"readiness": {"url": "http://a/health", "status": 99}}, ("readiness.status", "99", "100")),
    ({"readiness": {"url": "http://user:pw@a/health"}}, ("readiness.url", "userinfo")),
    ({"drafter": {"max_positions": 4}}, ("drafter", "'url'")),
    ({"launcher": {**LAUNCHER, "env": {"KVBAKE_IMAGE": "x"}}}, ("launcher.env", "KVBAKE_IMAGE")),
    ({"launcher": {**LAUNCHER, "env": {"DOCKER_HOST": "x"}}}, ("launcher.env", "DOCKER_HOST")),
    ({"launcher": {**LAUNCHER, "env": {"lower": "x"}}}, ("launcher.env", "'lower'")),
    ({"nodes": [NODES[0], {**NODES[1], "role": "head"}]}, ("more than one head", "spark-a", "spark-b")),
    ({"launcher": {**LAUNCHER, "container": "node-21907"}}, ("launcher.container node-21907", "run_cluster.sh", "exit trap")),
    ({"launcher": {**LAUNCHER, "container": "vllm_node"}}, ("launcher.container vllm_node", "launch-cluster.sh", "exit trap")),
])
def test_what_the_file_may_not_say(tmp_path: Path, extra: dict, named: tuple[str, ...]) -> None:
    with pytest.raises(ManifestError) as caught:
        load_deployment(deployment_file(tmp_path, **extra))
    assert caught.value.exit_code == 3
    assert "deploy.yaml" in caught.value.message
    assert all(field in caught.value.message for field in named), caught.value.message
    if "nodes" in extra:
        assert "role: head" in caught.value.fix


@pytest.mark.parametrize("name", ["vllm-serve", "node-a", "node-1x", "my-node-7", "vllm_node2"])
def test_a_container_name_no_launcher_trap_stops_is_kept(tmp_path: Path, name: str) -> None:
    assert load_deployment(deployment_file(tmp_path, launcher={**LAUNCHER, "container": name})).launcher.container == name
