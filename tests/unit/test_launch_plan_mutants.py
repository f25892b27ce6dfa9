"""The launcher plan's refusals each name the setting and the fix to apply, and the Ray, mount and secret settings read
when a variable is unset."""

from __future__ import annotations

import json

import pytest

from kvbake.launcher.core import launch_plan as core
from kvbake.launcher.core.node_launch import LaunchInputError, NodeLaunch

from message_words import says
from test_launcher import env_for

TOKEN = "hf_" + "q1W2e3R4t5" * 4  # shaped like a Hugging Face token; never a real one


def refused(call) -> LaunchInputError:
    with pytest.raises(LaunchInputError) as caught:
        call()
    return caught.value


def without(env: dict[str, str], *names: str) -> dict[str, str]:
    return {name: value for name, value in env.items() if name not in names}


# ---- mounts over the container's working directory ----

def test_an_extra_mount_over_the_working_directory_is_named_as_an_extra_mount():
    error = refused(lambda: core.read_extra_mounts({"EXTRA_MOUNTS": '["/srv/v:/workspace/vllm"]', "KVBAKE_WORKDIR": "/workspace"}, "/opt/src"))
    assert says(error.cause, "EXTRA_MOUNTS target /workspace/vllm")


def test_without_a_working_directory_an_extra_mount_of_vllm_at_the_root_is_refused():
    error = refused(lambda: core.read_extra_mounts({"EXTRA_MOUNTS": '["/srv/v:/vllm"]'}, "/opt/src"))
    assert says(error.cause, "EXTRA_MOUNTS target /vllm") and says(error.cause, "working directory /")


def test_a_node_cache_mount_over_the_working_directory_is_named_as_a_cache_mount():
    env = {"KVBAKE_NODE_LAUNCH_JSON": json.dumps({"cache_mounts": ["/srv/c:/workspace/vllm"]}), "KVBAKE_WORKDIR": "/workspace"}
    error = refused(lambda: core.read_node_settings(env, "/opt/src", (), {}))
    assert says(error.cause, "KVBAKE_NODE_LAUNCH_JSON.cache_mounts target /workspace/vllm")


def test_without_a_working_directory_a_node_cache_mount_of_vllm_at_the_root_is_refused():
    env = {"KVBAKE_NODE_LAUNCH_JSON": json.dumps({"cache_mounts": ["/srv/c:/vllm"]})}
    error = refused(lambda: core.read_node_settings(env, "/opt/src", (), {}))
    assert says(error.cause, "KVBAKE_NODE_LAUNCH_JSON.cache_mounts target /vllm")


# ---- the model ----

def test_no_hub_model_reads_as_an_empty_id():
    assert core.read_hub_model({}) == "" and core.read_hub_model({"MODEL_DIR": "/models/m"}) == ""


def test_a_model_that_is_no_hub_id_or_given_twice_says_which_setting_to_change():
    error = refused(lambda: core.read_hub_model({"MODEL": "not a model"}))
    assert error.fix.startswith("set MODEL to ORG/NAME") and says(error.fix, "MODEL_DIR")
    error = refused(lambda: core.read_model_dir({"MODEL": "org/m", "MODEL_DIR": "/models/m"}))
    assert error.fix.startswith("keep MODEL_DIR") and says(error.fix, "MODEL")


# ---- RAY_START_ARGS ----

def test_ray_start_options_outside_the_ray_shape_say_to_pick_it():
    error = refused(lambda: core.read_ray_start({"RAY_START_ARGS": '["--num-cpus=4"]'}, "main", NodeLaunch(), "10.0.0.11"))
    assert says(error.cause, "SHAPE is main") and error.fix.startswith("set SHAPE=ray")


@pytest.mark.parametrize("option", ["--port=6380", "--address=10.0.0.11:6379", "--head", "num-cpus=4"])
def test_a_ray_start_option_the_launcher_gives_itself_is_refused_naming_every_such_option(option):
    error = refused(lambda: core.read_ray_start({"RAY_START_ARGS": json.dumps([option])}, "ray", NodeLaunch(), "10.0.0.11"))
    assert says(error.cause, option) and error.fix.startswith("give only options of your own")
    assert all(says(error.fix, own) for own in core.RAY_OWN_OPTIONS)


def test_ray_start_options_need_a_node_address_only_where_they_use_it():
    assert core.read_ray_start({"RAY_START_ARGS": '["--num-cpus=4"]'}, "ray", NodeLaunch(), "") == ("--num-cpus=4",)
    error = refused(lambda: core.read_ray_start({"RAY_START_ARGS": '["--node-ip-address={node_address}"]'}, "ray", NodeLaunch(), ""))
    assert says(error.cause, "KVBAKE_NODE_ADDRESS") and error.fix.startswith("give every node an address:")


def test_the_settings_read_ray_start_options_without_a_node_address_unless_they_use_it():
    env = without(env_for(SHAPE="ray", RAY_START_ARGS='["--num-cpus=4"]'), "KVBAKE_NODE_ADDRESS")
    assert core.read_settings(env).ray_start == ("--num-cpus=4",)
    env = without(env_for(SHAPE="ray", RAY_START_ARGS='["--node-ip-address={node_address}"]'), "KVBAKE_NODE_ADDRESS")
    assert says(refused(lambda: core.read_settings(env)).cause, "KVBAKE_NODE_ADDRESS")


# ---- SECRET_ENV ----

def test_a_secret_entry_that_is_no_variable_name_is_named_and_the_fix_shows_an_example():
    error = refused(lambda: core.read_secret_env({"SECRET_ENV": '["HF-TOKEN"]', "HF-TOKEN": TOKEN}, {}))
    assert says(error.cause, "SECRET_ENV entry 'HF-TOKEN'")
    assert error.fix.startswith("set SECRET_ENV to a JSON array of names") and error.fix.endswith(core.EXAMPLES["SECRET_ENV"])


def test_a_secret_also_given_as_a_container_variable_is_named_and_the_fix_keeps_it_secret():
    error = refused(lambda: core.read_secret_env({"SECRET_ENV": '["HF_TOKEN"]', "HF_TOKEN": TOKEN}, {"HF_TOKEN": "x"}))
    assert says(error.cause, "SECRET_ENV and CONTAINER_ENV both give HF_TOKEN")
    assert error.fix.startswith("give a secret in SECRET_ENV only")


def test_secrets_are_passed_by_name_after_every_other_run_option():
    step = core.plan(env_for(SECRET_ENV='["HF_TOKEN"]', HF_TOKEN=TOKEN))
    options = step.run_options()
    assert options[:3] == ["--detach", "--name", step.name] and "--env-file" in options
    at = options.index("HF_TOKEN")
    assert options[at - 1] == "--env" and TOKEN not in options
