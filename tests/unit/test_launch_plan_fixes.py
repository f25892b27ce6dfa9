"""Every refusal of the launcher's plan starts its fix with the action, and the refusals the catalogue does not reach."""

from __future__ import annotations

import json

import pytest

from kvbake.launcher.core import launch_plan as core
from kvbake.launcher.core.node_launch import LaunchInputError

from message_words import says
from test_launcher import BAD_INPUTS, env_for

# The action each catalogue entry's fix starts with, in the catalogue's order.
FIX_ACTIONS = [
    "run the launcher through kvbake deploy", "set launcher.container in the deployment file", "run the launcher through kvbake deploy",
    "run the launcher through kvbake deploy", "run the launcher through kvbake deploy", "run the launcher through kvbake deploy",
    "give exactly one node role: head", "give the head node an address:", "run the launcher through kvbake deploy",
    "set KVBAKE_LAUNCHER_ARGS_JSON to a JSON array", "set KVBAKE_LAUNCHER_ARGS_JSON to a JSON array", "run the launcher through kvbake deploy",
    "remove them from the preset's launcher_args", "set MODEL_DIR in launcher.env", "set MODEL_DIR in launcher.env",
    "set MODEL_DIR in launcher.env", "set MODEL_DIR in launcher.env", "set MODEL_DIR in launcher.env", "set SERVED_MODEL_NAME to one name",
    "set VLLM_HOST to the address", "set VLLM_PORT to a TCP port", "set VLLM_PORT to a TCP port", "set MASTER_PORT to a TCP port",
    "give the API and the multi-node rendezvous different ports", "set TENSOR_PARALLEL_SIZE in launcher.env", "set GPUS=all",
    "set SHM_SIZE to a number", "set SOURCE_ROOT to the manifest's base.source_root", "set EXTRA_MOUNTS to a JSON array",
    "set CONTAINER_ENV to a JSON object", "set DRAFTER_ARGS to a JSON array", "set EXTRA_MOUNTS to a JSON array",
    "set EXTRA_MOUNTS to a JSON array", "mount it elsewhere", "mount it elsewhere", "mount it elsewhere", "mount it elsewhere",
    "give every mount its own folder", "mount it elsewhere", "mount it elsewhere", "mount it elsewhere", "mount it elsewhere",
    "mount it elsewhere", "remove it", "set CONTAINER_ENV to a JSON object", "give every node an address:",
    "set DRAFTER_ARGS in launcher.env", "put {url} where", "set drafter.max_positions in the deployment file",
    "give each option in one place only", "set KVBAKE_STOP=1",
]


def refusal(env: dict[str, str]) -> LaunchInputError:
    with pytest.raises(LaunchInputError) as caught:
        core.plan(env)
    return caught.value


def test_the_catalogue_and_its_actions_line_up() -> None:
    assert len(FIX_ACTIONS) == len(BAD_INPUTS)


@pytest.mark.parametrize(("overrides", "action"), [(case[0], action) for case, action in zip(BAD_INPUTS, FIX_ACTIONS)],
                         ids=[f"{i}-{action.split()[1]}" for i, action in enumerate(FIX_ACTIONS)])
def test_each_refusal_starts_its_fix_with_the_action(overrides: dict, action: str) -> None:
    error = refusal({**env_for(), **overrides})
    assert error.fix.startswith(action) and says(error.fix, action)


def test_an_unknown_shape_names_the_shapes_and_how_to_pick_one() -> None:
    error = refusal({**env_for(), "SHAPE": "k8s"})
    assert says(error.cause, "SHAPE='k8s'") and says(error.cause, "main, exec, ray")
    assert says(error.fix, "set SHAPE=main") and error.fix.endswith("in launcher.env")


def test_the_ray_shape_refuses_another_backend_and_shared_ports() -> None:
    error = refusal({**env_for(preset_args=["--max-model-len", "8192", "--distributed-executor-backend", "mp"]), "SHAPE": "ray"})
    assert says(error.cause, "--distributed-executor-backend mp") and error.fix.startswith("drop --distributed-executor-backend")
    assert error.fix.endswith("or use SHAPE=main")
    for ports in ({"VLLM_PORT": "8000", "RAY_PORT": "8000"}, {"MASTER_PORT": "29500", "RAY_PORT": "29500"}):
        error = refusal({**env_for(), "SHAPE": "ray", **ports})
        assert says(error.cause, "RAY_PORT") and error.fix.startswith("give the Ray head a port of its own")
    error = refusal({**env_for(), "SHAPE": "ray", "VLLM_PORT": "8000", "MASTER_PORT": "8000", "RAY_PORT": "6379"})
    assert says(error.cause, "VLLM_PORT and MASTER_PORT are both 8000"), "the ray shape keeps the API and rendezvous apart too"


def test_an_option_value_is_read_in_each_spelling_and_a_trailing_option_gives_none() -> None:
    assert core.option_values(["--max-model-len=a=b", "--max-model-len", "5", "--max-model-len"], "--max-model-len") == ["a=b", "5"]
    assert core.option_values(["--x", "--max-model-len"], "--max-model-len") == []


def test_a_mount_entry_is_split_at_its_first_colon_and_each_side_is_named() -> None:
    error = refusal({**env_for(), "EXTRA_MOUNTS": '["/srv/a:/b:/c"]'})
    assert says(error.cause, "EXTRA_MOUNTS target='/b:/c'") and error.fix.startswith("set EXTRA_MOUNTS to a JSON array")
    error = refusal({**env_for(), "EXTRA_MOUNTS": '["/srv/a:opt"]'})
    assert says(error.cause, "EXTRA_MOUNTS target='opt'")
    error = refusal({**env_for(), "EXTRA_MOUNTS": '["/srv/a:/opt/x", "/srv/b:/opt/x/y"]'})
    assert says(error.cause, "overlaps the mount at /opt/x")


def test_container_env_fills_in_the_head_address() -> None:
    step = core.plan({**env_for(role="worker"), "CONTAINER_ENV": json.dumps({"HEAD": "{head_address}:1", "ME": "{node_address}"})})
    assert step.envs["HEAD"] == env_for()["KVBAKE_HEAD_ADDRESS"] + ":1" and step.envs["ME"] == env_for(role="worker")["KVBAKE_NODE_ADDRESS"]


def test_without_a_drafter_url_there_are_no_drafter_arguments_and_max_positions_may_be_unset() -> None:
    assert core.read_drafter_args({}, []) == ()
    assert core.read_drafter_args({"KVBAKE_DRAFTER_URL": "http://d:8100", "DRAFTER_ARGS": '["--drafter", "{url}"]'}, []) == (
        "--drafter", "http://d:8100")
    with pytest.raises(LaunchInputError) as caught:
        core.read_drafter_args({"KVBAKE_DRAFTER_URL": "http://d:8100", "DRAFTER_ARGS": '["--d", "{url}", "--n", "{max_positions}"]'}, [])
    assert says(caught.value.cause, "no max_positions")
    with pytest.raises(LaunchInputError) as caught:
        core.read_drafter_args({"KVBAKE_DRAFTER_URL": "http://d", "DRAFTER_ARGS": '["--port", "{url}", "--host", "h"]'},
                               ["--host", "x", "--port", "1"])
    assert says(caught.value.cause, "--host, --port")


def test_node_settings_may_not_cover_a_mount_nor_repeat_a_container_variable() -> None:
    node = {"cache_mounts": ["/srv/cache:/opt/extra/cache"]}
    error = refusal({**env_for(), "EXTRA_MOUNTS": '["/srv/x:/opt/extra"]', "KVBAKE_NODE_LAUNCH_JSON": json.dumps(node)})
    assert says(error.cause, "KVBAKE_NODE_LAUNCH_JSON.cache_mounts target /opt/extra/cache") and error.fix.startswith("give every mount")
    node = {"env": {"B": "1", "A": "2"}}
    error = refusal({**env_for(), "CONTAINER_ENV": '{"A": "1", "B": "2"}', "KVBAKE_NODE_LAUNCH_JSON": json.dumps(node)})
    assert says(error.cause, "both set A, B") and error.fix.startswith("give each variable in one place") and error.fix.endswith("place only")


def test_a_container_variable_that_is_a_switch_is_refused() -> None:
    step = core.plan({**env_for(), "CONTAINER_ENV": '{"VLLM_B": "1", "VLLM_A": "2"}'})
    with pytest.raises(LaunchInputError) as caught:
        core.refuse_switch_names(step, ["VLLM_A", "VLLM_B", "VLLM_C"])
    assert says(caught.value.cause, "VLLM_A, VLLM_B is set by") and caught.value.fix.startswith("remove it there")
    assert caught.value.fix.endswith("identical on every rank")
    core.refuse_switch_names(step, ["VLLM_C"])


def test_an_unset_engine_host_says_to_set_it() -> None:
    with pytest.raises(LaunchInputError) as caught:
        core.engine_host({})
    assert says(caught.value.cause, "DOCKER_HOST") and caught.value.fix.startswith("set DOCKER_HOST to the node's engine")
    assert caught.value.fix.endswith("e.g. ssh://ops@spark-a")


def test_a_drafter_template_without_its_url_or_positions_is_refused_with_what_to_do() -> None:
    with pytest.raises(LaunchInputError) as caught:
        core.read_drafter_args({"KVBAKE_DRAFTER_URL": "http://d", "DRAFTER_ARGS": '["--d", "fixed"]'}, [])
    assert says(caught.value.cause, "DRAFTER_ARGS does not use {url}")
    with pytest.raises(LaunchInputError) as caught:
        core.read_drafter_args({"KVBAKE_DRAFTER_URL": "http://d", "DRAFTER_ARGS": '["--d", "{url}", "{max_positions}"]'}, [])
    assert caught.value.fix.endswith("drop {max_positions} from DRAFTER_ARGS")
