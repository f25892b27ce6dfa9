"""adopt's report of a restart policy it turned off, and its refusal of a container name Docker does not accept."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kvbake.errors import UsageError
from kvbake.ship import commands
from tests.unit.message_words import says


def adopted_release(restart: str | None, auto_remove: bool = False) -> SimpleNamespace:
    """One node's adopted release as adopt returns it; `restart` None: a record without a restart policy."""
    adopted = {"name": "hand-serve", "container_id": "c0ffee" * 10, "shape": "main", "exec": False, "changes": [],
               "spec": {"host": {"AutoRemove": True} if auto_remove else {}}}
    if restart is not None:
        adopted["restart"] = restart
    return SimpleNamespace(adopted=adopted, image="base:1", switches={}, max_model_len=4096, id="adopted-1")


def policy_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "restart policy" in line]


@pytest.mark.parametrize("policy", ["always", "unless-stopped", "on-failure"])
def test_adopt_report_says_the_kept_containers_restart_policy_is_off_and_the_launcher_must_go(policy):
    _, text = commands.adopt_report({"spark-a": adopted_release(policy)})
    [line] = policy_lines(text)
    assert line.startswith("spark-a: ") and says(line, policy) and says(line, "is off now")
    assert says(line, "rollback --to adopted") and says(line, "retire the launcher")


@pytest.mark.parametrize("restart", ["no", None], ids=["policy-no", "no-policy-recorded"])
def test_adopt_report_is_silent_about_restart_for_a_serve_without_a_policy(restart):
    _, text = commands.adopt_report({"spark-a": adopted_release(restart)})
    assert policy_lines(text) == []


def test_adopt_report_is_silent_about_restart_for_a_serve_started_with_rm():
    _, text = commands.adopt_report({"spark-a": adopted_release("always", auto_remove=True)})
    assert policy_lines(text) == []


def test_adopt_report_speaks_of_restart_only_for_the_node_whose_container_keeps_a_policy():
    _, text = commands.adopt_report({"spark-a": adopted_release("always", auto_remove=True), "spark-b": adopted_release("always")})
    assert [line.split(":")[0] for line in policy_lines(text)] == ["spark-b"]


def adopt_args(container: str) -> SimpleNamespace:
    return SimpleNamespace(reason="adopted the running serve", container=container, resume=False, revert=False, release=False,
                           break_lock=False)


@pytest.mark.parametrize("name", ["hand serve", "-serve", "serve/one"])
def test_adopt_refuses_a_container_name_docker_does_not_accept_naming_the_option_and_the_name(name):
    with pytest.raises(UsageError) as refused:
        commands.cmd_adopt(adopt_args(name))
    error = refused.value
    assert says(error.message, "adopt --container") and repr(name) in error.message
    assert error.fix is not None and says(error.fix, "docker ps")
