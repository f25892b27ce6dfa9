"""The Ray side of init's serve description: the options of a `ray start` command line, each rank's own address, the
Ray nodes' shared options and their refusal; and the model folder of a mount whose source ends in a slash or an X."""

from __future__ import annotations

import pytest

from kvbake.serve.core.serve_description import NodeServe, classify_mounts, node_address_of, ray_options, ray_start_options


def ray_node(name: str, *options: str, env: dict | None = None) -> NodeServe:
    return NodeServe(name, f"ssh://{name}", {"Name": f"/{name}"}, None, {}, ray_node=("ray", "start", *options), ray_env=dict(env or {}))


@pytest.mark.parametrize(("argv", "options"), [
    (("ray", "start", "--head", "--port=6380"), [("--head", None), ("--port", "6380")]),
    (("ray", "start", "--num-cpus", "4", "--block"), [("--num-cpus", "4"), ("--block", None)]),
    (("ray", "--logging-level=debug", "start", "--head"), [("--head", None)]),
    (("ray", "start", "--port=6380", "stray", "--head"), [("--port", "6380"), ("--head", None)]),
    (("python3", "-m", "server", "--flag"), []),
])
def test_the_options_after_start_are_read_in_order_and_a_flag_has_no_value(argv, options):
    assert ray_options(argv) == options


@pytest.mark.parametrize(("node", "address"), [
    (ray_node("a", "--block", env={"RAY_OVERRIDE_NODE_IP_ADDRESS": "10.0.0.12"}), "10.0.0.12"),
    (ray_node("a", "--block", "--node-ip-address=10.0.0.13"), "10.0.0.13"),
    (ray_node("a", "--block", "--node-ip-address", "10.0.0.13", env={"RAY_OVERRIDE_NODE_IP_ADDRESS": "10.0.0.12"}), "10.0.0.12"),
    (ray_node("a", "--block", "--node-ip-address=10.0.0.13", env={"VLLM_HOST_IP": "10.0.0.11"}), "10.0.0.11"),
])
def test_a_ranks_address_is_vllm_host_ip_else_rays_override_else_its_node_ip_address(node, address):
    assert node_address_of(node) == address


def test_only_the_node_ip_address_option_holding_the_nodes_own_address_becomes_a_placeholder():
    head = ray_node("a", "--block", "--head", "--node-ip-address=10.0.0.11", "--dashboard-host=10.0.0.11", "--disable-usage-stats")
    assert ray_start_options([head], head) == (("--node-ip-address={node_address}", "--dashboard-host=10.0.0.11", "--disable-usage-stats"), {})


def test_a_node_ip_address_other_than_the_nodes_own_is_kept_as_given():
    head = ray_node("a", "--block", "--head", "--node-ip-address=10.0.0.99", env={"VLLM_HOST_IP": "10.0.0.11"})
    assert ray_start_options([head], head) == (("--node-ip-address=10.0.0.99",), {})


def test_ray_nodes_started_with_other_options_share_what_they_agree_on_and_each_keeps_its_own_in_order():
    """eugr's run-cluster-node.sh: the dashboard's options on the head only; both give their own --node-ip-address."""
    head = ray_node("a", "--block", "--head", "--port", "6379", "--node-ip-address", "10.0.0.11", "--include-dashboard=True",
                    "--dashboard-host", "0.0.0.0", "--dashboard-port", "8265", "--disable-usage-stats")
    worker = ray_node("b", "--block", "--address=10.0.0.11:6379", "--node-ip-address", "10.0.0.12")
    shared, own = ray_start_options([head, worker], head)
    assert shared == ("--node-ip-address={node_address}",)
    assert own == {"a": ("--include-dashboard=True", "--dashboard-host=0.0.0.0", "--dashboard-port=8265", "--disable-usage-stats")}


def test_a_worker_may_give_options_the_head_does_not():
    head = ray_node("a", "--block", "--head", "--num-cpus=4")
    worker = ray_node("b", "--block", "--address=10.0.0.11:6380", "--num-cpus=8", "--object-store-memory=1000")
    assert ray_start_options([head, worker], head) == ((), {"a": ("--num-cpus=4",), "b": ("--num-cpus=8", "--object-store-memory=1000")})


def test_a_serve_whose_head_is_no_ray_node_has_no_ray_options():
    head = NodeServe("a", "ssh://a", {"Name": "/a"}, None, {})
    worker = ray_node("b", "--block", "--address=10.0.0.11:6380", "--num-cpus=8")
    assert ray_start_options([head, worker], head) == ((), {})


@pytest.mark.parametrize(("source", "model_dir"), [
    ("/srv/models/", "/srv/models/m"),
    ("/srv/modelsX", "/srv/modelsX/m"),
])
def test_a_model_in_a_subfolder_of_a_mount_is_found_under_the_mounts_source(source, model_dir):
    mounts = classify_mounts({"Mounts": [{"Type": "bind", "Source": source, "Destination": "/models", "RW": False}]},
                             "/models/m", "/usr/local/lib/python3.12/dist-packages")
    assert (mounts.model_dir, mounts.model_target) == (model_dir, "/models/m")
