"""What bringing an adopted serve back needs: the secrets its container, its exec'd vLLM and its exec'd Ray node were
started with (by name), refused with the command that sets them when missing; its create spec with only the restart
policy left out when two specs are compared, and the policy handed over for a serve an earlier kvbake recorded without
its name."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kvbake.errors import RolloutError
from kvbake.ship.adapters.adopted_serve import hand_over_restart_policy, refuse_missing_secrets, secrets_needed, without_restart_policy
from kvbake.ship.core.create_spec import create_spec


def test_the_secrets_needed_are_those_of_the_container_the_execd_serve_and_the_execd_ray_node():
    adopted = SimpleNamespace(adopted={"spec": {"secret_env": ["HF_TOKEN"]},
                                       "exec": {"secret_env": ["OPENAI_API_KEY"], "secret_args": ["VLLM_API_KEY"]},
                                       "ray_exec": {"secret_env": ["RAY_TOKEN"]}})
    assert secrets_needed(adopted) == ("HF_TOKEN", "OPENAI_API_KEY", "RAY_TOKEN", "VLLM_API_KEY")


def test_a_serve_adopted_without_a_spec_or_an_exec_needs_no_secret():
    assert secrets_needed(SimpleNamespace(adopted={})) == ()
    assert secrets_needed(SimpleNamespace(adopted=None)) == ()


def test_only_the_restart_policy_leaves_the_host_settings():
    spec = {"image": "sha256:i", "config": {"Cmd": ["x"]},
            "host": {"RestartPolicy": {"Name": "unless-stopped"}, "ShmSize": 16, "restartpolicy": 1}}
    assert without_restart_policy(spec) == {"image": "sha256:i", "config": {"Cmd": ["x"]},
                                            "host": {"ShmSize": 16, "restartpolicy": 1}}
    assert spec["host"]["RestartPolicy"] == {"Name": "unless-stopped"}, "the spec itself is left as it is"
    assert without_restart_policy({"image": "sha256:i"}) == {"image": "sha256:i", "host": {}}


def test_a_missing_secret_is_refused_naming_each_and_the_command_that_sets_them(monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    adopted = SimpleNamespace(adopted={"spec": {"secret_env": ["VLLM_API_KEY", "HF_TOKEN"]}})
    with pytest.raises(RolloutError) as refused:
        refuse_missing_secrets({"a": None, "b": adopted})
    assert refused.value.message.startswith("node b: the adopted serve needs HF_TOKEN, VLLM_API_KEY to come back")
    assert refused.value.fix.startswith("export HF_TOKEN VLLM_API_KEY where kvbake runs")


class Node:
    """An engine that knows its containers by name only and records the restart policies set."""

    def __init__(self, containers: dict[str, dict]) -> None:
        self.containers = containers
        self.policies: list[tuple[str, str]] = []

    def container_inspect(self, name: str) -> dict | None:
        return self.containers.get(name)

    def set_restart_policy(self, container: str, policy: str) -> None:
        self.policies.append((container, policy))


def test_an_adopted_serve_recorded_without_its_name_hands_over_its_restart_policy_under_the_launchers_name():
    recreated = {"Id": "new-id", "Name": "/serve", "Image": "sha256:i", "Config": {"Cmd": ["vllm", "serve", "/m"]},
                 "HostConfig": {"RestartPolicy": {"Name": "unless-stopped"}, "NetworkMode": "host"}}
    adopted = SimpleNamespace(adopted={"container_id": "old-id", "spec": create_spec(recreated)}, kept_as=None)
    node = Node({"serve": recreated})
    hand_over_restart_policy(node, adopted, "serve", True)
    assert node.policies == [("new-id", "no")]
