"""Every refusal of a node's own launch settings tells the operator what to do: its fix starts with the action."""

from __future__ import annotations

import pytest

from kvbake.launcher.core.node_launch import LaunchInputError, NodeLaunch, read_node_launch, refuse_switches

FIXES = [
    ({"env": {"PYTHONPATH": "/srv/p"}}, "remove it; kvbake's verify-running refuses a serve that sets it"),
    ({"env": {"KVBAKE_IMAGE": "x"}}, "rename or remove it"),
    ({"env": {"NCCL_DEBUG": 1}}, "fix nodes[].launch in the deployment file"),
    ({"env": {"NCCL_SOCKET_IFNAME": "enp1s0 f0"}}, "set NCCL_SOCKET_IFNAME to the node's interface"),
    ({"devices": "/dev/infiniband"}, "give launch.devices as node paths"),
    ({"cap_add": ["ipc_lock"]}, "give launch.cap_add as capability names"),
    ({"cap_add": ["ALL"]}, "name only the capabilities the serve needs"),
    ({"ulimits": {"openfiles": 1024}}, "give launch.ulimits as NAME: VALUE"),
    ({"shm_size": "16 GB"}, "give a number with an optional b, k, m or g suffix"),
    ({"cache_mounts": ["/srv/cache"]}, "give launch.cache_mounts as"),
    ({"cache_mounts": ["/srv/a:/usr/lib/python3/dist-packages/x"]}, "mount it elsewhere"),
    ({"cache_mounts": ["/srv/a:/root/.cache", "/srv/b:/root/.cache/huggingface"]}, "give every mount its own folder"),
    ({"shmsize": "1g"}, "fix nodes[].launch in the deployment file"),
]


@pytest.mark.parametrize(("node", "action"), FIXES, ids=[f"{i}-{next(iter(node))}" for i, (node, _) in enumerate(FIXES)])
def test_each_refusal_starts_its_fix_with_the_action(node: dict, action: str) -> None:
    with pytest.raises(LaunchInputError) as caught:
        read_node_launch(node, "launch")
    assert caught.value.fix.startswith(action)


def test_a_node_switch_is_refused_with_where_switches_come_from() -> None:
    with pytest.raises(LaunchInputError) as caught:
        refuse_switches(NodeLaunch(env={"VLLM_A": "1"}), ["VLLM_A"], "launch")
    assert caught.value.fix.startswith("remove it; switches come from the preset") and caught.value.fix.endswith("identical on every rank")
