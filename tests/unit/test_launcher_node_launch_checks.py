"""A node's own launch settings: what each check accepts and refuses, the field each refusal names and the fix it carries."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from kvbake.launcher.core.node_launch import (LaunchInputError, NodeLaunch, absolute_path, interface_names, read_node_launch,
                                              refuse_switches)

from message_words import says


def refusal(node: object) -> LaunchInputError:
    with pytest.raises(LaunchInputError) as caught:
        read_node_launch(node, "launch")
    return caught.value


# ---- paths ----

@pytest.mark.parametrize("path", ["/srv/a,b", "/srv/a b", "/srv/a:b"])
def test_a_path_a_bind_mount_cannot_carry_is_refused(path: str) -> None:
    with pytest.raises(LaunchInputError) as caught:
        absolute_path("MODEL_DIR", path, "set MODEL_DIR")
    assert says(caught.value.cause, f"MODEL_DIR={path!r}") and caught.value.fix


@pytest.mark.parametrize("path", ["/", "//", "///"])
def test_the_root_folder_is_refused_as_the_root_folder(path: str) -> None:
    with pytest.raises(LaunchInputError) as caught:
        absolute_path("MODEL_DIR", path, "set MODEL_DIR")
    assert says(caught.value.cause, "root folder")


@pytest.mark.parametrize(("path", "kept"), [("/X", "/X"), ("/srv/X", "/srv/X"), ("/srv/XX/", "/srv/XX"), ("/srv/m//", "/srv/m")])
def test_a_path_loses_only_its_trailing_slashes(path: str, kept: str) -> None:
    assert absolute_path("MODEL_DIR", path, "set MODEL_DIR") == kept


# ---- env ----

@pytest.mark.parametrize("value", ["enp1s0f0np0,=ib0", "=enp1s0f0np0,=ib0", "^docker0,lo", "X", "=X", "^X"])
def test_an_interface_list_in_each_form_nccl_reads_is_accepted(value: str) -> None:
    assert read_node_launch({"env": {"NCCL_SOCKET_IFNAME": value}}, "launch").env == {"NCCL_SOCKET_IFNAME": value}


@pytest.mark.parametrize("value", [" enp1s0", "enp1s0=", "enp1s0 ", "=", "^", "enp1s0,", "enp1s0f0np0xxxxx"])
def test_an_interface_list_that_names_no_interface_is_refused(value: str) -> None:
    error = refusal({"env": {"GLOO_SOCKET_IFNAME": value}})
    assert says(error.cause, "launch.env GLOO_SOCKET_IFNAME") and says(error.fix, "GLOO_SOCKET_IFNAME")


def test_the_interfaces_asked_for_are_the_names_without_their_exact_mark() -> None:
    assert interface_names("=X1,Xeth0") == ("X1", "Xeth0")
    assert NodeLaunch(env={"NCCL_SOCKET_IFNAME": "=X"}).interfaces() == {"NCCL_SOCKET_IFNAME": ("X",)}


@pytest.mark.parametrize("env", [{"1NCCL": "x"}, {"NCCL-DEBUG": "x"}, {"NCCL_DEBUG": "a\nb"}, {"NCCL_DEBUG": "a\0b"},
                                 {"NCCL_DEBUG": "a\nb\0"}, {5: "x"}])
def test_a_variable_that_is_not_name_and_one_line_value_is_refused(env: dict) -> None:
    error = refusal({"env": env})
    assert says(error.cause, "launch.env entry") and says(error.fix, "nodes[].launch")


def test_env_that_is_not_a_mapping_is_refused_with_where_to_fix_it() -> None:
    error = refusal({"env": ["NCCL_DEBUG=INFO"]})
    assert says(error.cause, "launch.env") and says(error.fix, "nodes[].launch")


# ---- devices ----

@pytest.mark.parametrize("device", ["/dev/infiniband", "/dev/a:/dev/b", "/dev/a:/dev/b:rwm", "/dev/a:/dev/b:r", "/dev/a:/dev/b:mw"])
def test_a_device_in_each_docker_form_is_accepted(device: str) -> None:
    assert read_node_launch({"devices": [device]}, "launch").devices == (device,)


@pytest.mark.parametrize("device", ["/dev/a:/dev/b:rr", "/dev/a:/dev/b:x", "/dev/a:/dev/b:r:w", "/dev/a:/dev/b:RW", 5, "dev/a"])
def test_a_device_outside_docker_forms_is_refused_with_the_form(device: object) -> None:
    error = refusal({"devices": [device]})
    assert says(error.cause, "launch.devices") and says(error.fix, "give launch.devices as node paths")


# ---- capabilities ----

@pytest.mark.parametrize("capability", ["ALL", "CAP_ALL"])
def test_every_capability_at_once_is_refused(capability: str) -> None:
    error = refusal({"cap_add": ["IPC_LOCK", capability]})
    assert says(error.cause, "launch.cap_add gives ALL") and says(error.fix, "IPC_LOCK")


# ---- ulimits ----

@pytest.mark.parametrize(("value", "kept"), [("1024:2048", "1024:2048"), ("2048:2048", "2048:2048"), ("1024:-1", "1024:-1"),
                                             ("-1:-1", "-1:-1"), (-1, "-1"), (65536, "65536")])
def test_a_ulimit_with_soft_not_above_hard_is_accepted(value: object, kept: str) -> None:
    assert read_node_launch({"ulimits": {"memlock": value}}, "launch").ulimits == {"memlock": kept}


@pytest.mark.parametrize("value", ["2049:2048", "-1:2048", "1024:", "many", True, 1.5, Decimal("1024"), None])
def test_a_ulimit_that_is_not_an_integer_or_has_soft_above_hard_is_refused(value: object) -> None:
    error = refusal({"ulimits": {"memlock": value}})
    assert says(error.cause, "launch.ulimits memlock") and says(error.fix, "give launch.ulimits as NAME: VALUE")


def test_an_unknown_ulimit_is_refused_listing_dockers_names() -> None:
    error = refusal({"ulimits": {"openfiles": 1024}})
    assert says(error.cause, "core, cpu, data") and error.fix


def test_ulimits_that_are_not_a_mapping_are_refused_with_the_form() -> None:
    error = refusal({"ulimits": ["memlock=-1"]})
    assert says(error.cause, "launch.ulimits") and says(error.fix, "give launch.ulimits as NAME: VALUE")


# ---- cache mounts ----

@pytest.mark.parametrize("entry", [5, None, "/srv/cache"])
def test_a_cache_mount_that_is_not_source_colon_target_is_refused(entry: object) -> None:
    error = refusal({"cache_mounts": [entry]})
    assert says(error.cause, f"launch.cache_mounts entry {entry!r}") and says(error.fix, "give launch.cache_mounts as")


def test_a_cache_mount_is_split_at_its_first_colon_and_each_side_is_named() -> None:
    error = refusal({"cache_mounts": ["/srv/a:/b:/c"]})
    assert says(error.cause, "launch.cache_mounts target='/b:/c'") and says(error.fix, "give launch.cache_mounts as")
    error = refusal({"cache_mounts": ["srv/a:/root/.cache"]})
    assert says(error.cause, "launch.cache_mounts source='srv/a'") and says(error.fix, "give launch.cache_mounts as")


def test_cache_mounts_that_are_not_a_list_are_refused_with_the_form() -> None:
    error = refusal({"cache_mounts": "/srv/a:/root/.cache"})
    assert says(error.cause, "launch.cache_mounts") and says(error.fix, "give launch.cache_mounts as")


# ---- the launch object ----

def test_a_launch_that_is_not_a_mapping_is_refused_naming_where() -> None:
    error = refusal(["env"])
    assert says(error.cause, "launch") and says(error.fix, "nodes[].launch")


def test_unknown_keys_are_listed_with_the_known_ones() -> None:
    error = refusal({"shmsize": "1g", "mounts": []})
    assert says(error.cause, "mounts, shmsize") and says(error.cause, "env, devices, cap_add, ulimits, shm_size, cache_mounts")


def test_every_switch_a_node_sets_is_listed() -> None:
    with pytest.raises(LaunchInputError) as caught:
        refuse_switches(NodeLaunch(env={"VLLM_B": "1", "VLLM_A": "1"}), ["VLLM_A", "VLLM_B"], "launch")
    assert says(caught.value.cause, "launch.env sets VLLM_A, VLLM_B")


def test_the_json_of_equal_settings_is_the_same_text_whatever_their_order() -> None:
    first = NodeLaunch(env={"B": "1", "A": "2"}, ulimits={"stack": "1", "memlock": "-1"})
    second = NodeLaunch(env={"A": "2", "B": "1"}, ulimits={"memlock": "-1", "stack": "1"})
    assert first == second and first.to_json() == second.to_json()
    assert list(json.loads(first.to_json())) == sorted(json.loads(first.to_json()))
