"""The launcher's plan names the variable it refuses and what to set, reads absent variables as empty, and keeps its bounds."""

from __future__ import annotations

import json

import pytest

from kvbake.launcher.core import launch_plan as core
from kvbake.launcher.core.node_launch import LaunchInputError

from message_words import says
from test_launcher import env_for


def refusal(env: dict[str, str]) -> LaunchInputError:
    with pytest.raises(LaunchInputError) as caught:
        core.plan(env)
    return caught.value


def without(env: dict[str, str], *names: str) -> dict[str, str]:
    return {name: value for name, value in env.items() if name not in names}


def preset_of(length: int, nnodes: int = 2) -> dict[str, str]:
    return {**env_for(preset_args=["--max-model-len", str(length)], nnodes=nnodes), "KVBAKE_MAX_MODEL_LEN": str(length)}


# ---- each refusal names its variable and says what to set ----

@pytest.mark.parametrize(("variable", "value"), [
    ("KVBAKE_IMAGE", "registry.example/x:current extra"), ("SERVED_MODEL_NAME", "my model"), ("VLLM_HOST", "0.0.0.0 x"),
    ("KVBAKE_HEAD_ADDRESS", "10.0.0.11 x")])
def test_a_value_with_whitespace_is_refused_naming_its_variable(variable: str, value: str) -> None:
    error = refusal({**env_for(), variable: value})
    assert says(error.cause, f"{variable}={value!r}") and error.fix


def test_an_image_with_whitespace_is_told_to_come_through_kvbake_deploy() -> None:
    assert says(refusal({**env_for(), "KVBAKE_IMAGE": "a b"}).fix, "kvbake deploy")


def test_a_head_address_with_whitespace_is_told_to_fix_the_deployment_file() -> None:
    assert says(refusal({**env_for(), "KVBAKE_HEAD_ADDRESS": "a b"}).fix, "deployment file")


@pytest.mark.parametrize(("variable", "value", "to_set"), [
    ("MODEL_DIR", "models/dsv41", "MODEL_DIR"), ("SOURCE_ROOT", "usr/lib", "SOURCE_ROOT")])
def test_a_relative_path_is_refused_naming_its_variable(variable: str, value: str, to_set: str) -> None:
    error = refusal({**env_for(), variable: value})
    assert says(error.cause, f"{variable}={value!r}") and says(error.fix, to_set)


@pytest.mark.parametrize(("variable", "to_set"), [("KVBAKE_CONTAINER", "launcher.container"), ("KVBAKE_ROLE", "kvbake deploy")])
def test_an_unset_variable_is_refused_with_what_to_set(variable: str, to_set: str) -> None:
    error = refusal(without(env_for(), variable))
    assert says(error.cause, variable) and says(error.fix, to_set)


@pytest.mark.parametrize(("variable", "value"), [
    ("KVBAKE_NNODES", "1025"), ("KVBAKE_NODE_RANK", "two"), ("TENSOR_PARALLEL_SIZE", "4097"), ("KVBAKE_MAX_MODEL_LEN", "many")])
def test_a_number_out_of_reach_is_refused_naming_its_variable(variable: str, value: str) -> None:
    error = refusal({**env_for(), variable: value})
    assert says(error.cause, variable) and error.fix


def test_a_model_length_that_is_no_number_is_told_to_come_through_kvbake_deploy() -> None:
    assert says(refusal({**env_for(), "KVBAKE_MAX_MODEL_LEN": "many"}).fix, "kvbake deploy")


# ---- an absent variable reads as empty ----

@pytest.mark.parametrize("variable", ["KVBAKE_NNODES", "KVBAKE_NODE_RANK", "KVBAKE_MAX_MODEL_LEN"])
def test_an_absent_number_is_refused_as_an_empty_value(variable: str) -> None:
    assert says(refusal(without(env_for(), variable)).cause, f"{variable}=''")


def test_one_node_without_a_head_address_has_an_empty_one() -> None:
    topology = core.read_topology(without(env_for(nnodes=1), "KVBAKE_HEAD_ADDRESS"))
    assert (topology.nnodes, topology.head_address) == (1, "")


def test_one_node_may_leave_the_head_address_empty() -> None:
    assert core.read_topology({**env_for(nnodes=1), "KVBAKE_HEAD_ADDRESS": ""}).head_address == ""


def test_without_preset_and_node_names_the_labels_are_empty() -> None:
    step = core.plan(without(env_for(), "KVBAKE_PRESET", "KVBAKE_NODE"))
    assert (step.labels["kvbake.launcher.preset"], step.labels["kvbake.launcher.node"]) == ("", "")


def test_without_a_node_address_the_container_env_is_kept_as_given() -> None:
    step = core.plan({**without(env_for(), "KVBAKE_NODE_ADDRESS"), "CONTAINER_ENV": json.dumps({"NCCL_DEBUG": "INFO"})})
    assert step.envs == {"NCCL_DEBUG": "INFO"}


def test_without_a_node_address_a_container_variable_using_it_is_refused() -> None:
    error = refusal({**without(env_for(), "KVBAKE_NODE_ADDRESS"), "CONTAINER_ENV": json.dumps({"ME": "{node_address}"})})
    assert says(error.cause, "KVBAKE_NODE_ADDRESS") and says(error.cause, "CONTAINER_ENV ME")


# ---- bounds ----

@pytest.mark.parametrize(("port", "accepted"), [("1", True), ("65535", True), ("0", False), ("65536", False)])
def test_a_port_is_one_to_65535(port: str, accepted: bool) -> None:
    env = {**env_for(), "VLLM_PORT": port}
    if accepted:
        assert core.plan(env).vllm_args[core.plan(env).vllm_args.index("--port") + 1] == port
    else:
        assert says(refusal(env).cause, "VLLM_PORT")


def test_the_model_length_is_one_to_two_to_the_fortieth() -> None:
    for length in (1, 2**40):
        assert core.read_preset_args(preset_of(length))[1] == str(length)
    error = refusal(preset_of(2**40 + 1))
    assert says(error.cause, f"KVBAKE_MAX_MODEL_LEN={2**40 + 1}")


def test_the_tensor_parallel_size_reaches_4096() -> None:
    assert core.read_tensor_parallel_size({"TENSOR_PARALLEL_SIZE": "4096"}, 2) == 4096
    with pytest.raises(LaunchInputError):
        core.read_tensor_parallel_size({"TENSOR_PARALLEL_SIZE": "4097"}, 2)


def test_the_node_count_reaches_1024() -> None:
    env = {**env_for(role="worker"), "KVBAKE_NNODES": "1024", "KVBAKE_NODE_RANK": "1023"}
    assert (core.read_topology(env).nnodes, core.read_topology(env).node_rank) == (1024, 1023)


# ---- what a refusal lists ----

def test_per_node_options_in_the_preset_are_listed_with_the_preset_name() -> None:
    error = refusal(env_for(preset_args=["--max-model-len", "163840", "--model", "x", "--headless"]))
    assert says(error.cause, "preset sample") and says(error.cause, "--headless, --model")


def test_a_preset_without_a_name_is_shown_as_a_question_mark() -> None:
    error = refusal(without(env_for(preset_args=["--max-model-len", "163840", "--headless"]), "KVBAKE_PRESET"))
    assert says(error.cause, "preset ?") and not says(error.cause, "None")


def test_an_unknown_gpus_value_lists_the_choices() -> None:
    assert says(refusal({**env_for(), "GPUS": "some"}).cause, "all, none")


def test_a_mount_source_and_an_overlapping_mount_are_named() -> None:
    assert says(refusal({**env_for(), "EXTRA_MOUNTS": '["srv/a:/opt/a"]'}).cause, "EXTRA_MOUNTS source='srv/a'")
    error = refusal({**env_for(), "EXTRA_MOUNTS": '["/srv/a:/opt/x", "/srv/b:/opt/x/y"]'})
    assert says(error.cause, "EXTRA_MOUNTS target /opt/x/y")


# ---- option names in every spelling vLLM accepts ----

@pytest.mark.parametrize(("token", "name"), [
    ("--max_model_len", "--max-model-len"), ("--compilation-config.level=3", "--compilation-config"),
    ("--speculative_config.method", "--speculative-config"), ("-tp", "--tensor-parallel-size"), ("-n", "--nnodes"),
    ("-x", "-x"), ("--port=8000", "--port"), ("-1", None), ("-0.5", None), ("8000", None)])
def test_a_token_names_the_option_vllm_registers(token: str, name: str | None) -> None:
    assert core.option_name(token) == name


def test_a_short_option_with_an_underscore_is_left_as_given() -> None:
    assert core.option_name("-a_b") == "-a_b"


# ---- what a fix names ----

@pytest.mark.parametrize("variable", ["KVBAKE_ROLE", "KVBAKE_IMAGE"])
def test_an_unset_kvbake_variable_points_to_the_variables_list(variable: str) -> None:
    error = refusal(without(env_for(), variable))
    assert says(error.fix, "KVBAKE_*") and says(error.fix, "docs/launcher.md")


def test_unset_preset_arguments_are_named_with_how_kvbake_passes_them() -> None:
    error = refusal(without(env_for(), "KVBAKE_LAUNCHER_ARGS_JSON"))
    assert says(error.cause, "KVBAKE_LAUNCHER_ARGS_JSON") and says(error.fix, "JSON")


def test_a_bad_container_name_is_told_the_pattern_a_name_matches() -> None:
    error = refusal({**env_for(), "KVBAKE_CONTAINER": "-serve"})
    assert says(error.cause, "KVBAKE_CONTAINER='-serve'") and says(error.fix, core.CONTAINER_NAME.pattern.strip("^$"))


def test_an_unknown_shape_is_told_every_shape_it_can_pick() -> None:
    error = refusal({**env_for(), "SHAPE": "k8s"})
    assert all(says(error.fix, f"SHAPE={shape}") for shape in core.SHAPES)
