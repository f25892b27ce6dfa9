"""A secret `ray start` option (`--redis-password`) carried by name: init writes the variable its value is restored from,
never the value; kvbake's launcher gives `ray start` the value from its own environment at launch time, shows it by name
with --print, and refuses in one line (exit 2) without it. An option whose value only looks like a credential is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbake.engines.core.procfs import Process
from kvbake.errors import IntegrityError
from kvbake.launcher.core import launch_plan as core
from kvbake.launcher.core.node_launch import LaunchInputError, read_node_launch
from kvbake.serve.core.serve_description import describe
from kvbake.ship.core.create_spec import create_spec, with_secrets
from kvbake.ship.core.init_documents import deploy_document, launcher_env
from fake_engine import FakeEngine
from test_init_description import ROOT, SWITCHES, node, serve_argv
from test_launcher import env_for, launcher
from test_project_init_nodes import DIGEST, IMAGE_ENV, IMAGE_ID, node_engine, nodes, run_init, written  # noqa: F401 (a fixture)

# A plain value: nothing but the option that gives it makes it a secret (the credential scan sees nothing in it).
PASSWORD = "plain-ray-redis-value-7"
REFERENCE = "--redis-password={secret:RAY_REDIS_PASSWORD}"
HEAD_SERVE = ("--max-model-len", "163840", "--port", "9000", "--distributed-executor-backend", "ray")


def ray_pair(head_ray: tuple[str, ...], worker_ray: tuple[str, ...]) -> list:
    """A Ray cluster as init describes it: the head's Ray node with vLLM exec'd beside it, a worker's Ray node alone."""
    head = node("spark-a", serve_argv("--distributed-executor-backend", "ray"), execd=True, ray=("ray", "start", "--block", *head_ray))
    worker = node("spark-b", None, ray=("ray", "start", "--block", "--address=10.0.0.11:6380", *worker_ray))
    return [head, worker]


def held_anywhere(*documents) -> bool:
    return PASSWORD in json.dumps(documents)


# ---- init: the option by its variable's name ----

def test_init_writes_the_redis_password_by_its_variables_name_and_its_value_in_no_file(nodes, tmp_path: Path):
    nodes["ssh://ops@spark-a"] = node_engine("spark-a", HEAD_SERVE, [], execd=True)
    container = nodes["ssh://ops@spark-a"].containers["vllm_node"]
    serve = next(p for p in container["Processes"] if p.pid != 1)
    head_ray = ("ray", "start", "--head", "--port=6380", "--block", "--redis-password", PASSWORD)
    container["Processes"] = (Process(1, 0, head_ray, serve.env, "/", "/usr/bin/python3"), serve)
    container["Config"]["Cmd"] = list(head_ray)
    worker = FakeEngine("spark-b")
    worker.images[IMAGE_ID] = {"Id": IMAGE_ID, "RepoDigests": [DIGEST], "Config": {"Env": list(IMAGE_ENV)}}
    worker.run_serving("ray_node", IMAGE_ID, IMAGE_ENV, main=("ray", "start", "--block", "--address=10.0.0.11:6380",
                                                               f"--redis-password={PASSWORD}"))
    worker.containers["ray_node"]["Processes"] = worker.containers["ray_node"]["Processes"][:1]
    nodes["ssh://ops@spark-b"] = worker
    data, text = run_init(tmp_path)
    env = written(tmp_path, "deploy.yaml")["launcher"]["env"]
    assert json.loads(env["RAY_START_ARGS"]) == [REFERENCE], "both Ray nodes gave it: one reference every node shares"
    assert "RAY_REDIS_PASSWORD" not in env.get("SECRET_ENV", ""), "Ray reads no variable: the container is not given it"
    assert "secrets (by name only; export them where kvbake deploy runs): RAY_REDIS_PASSWORD" in text.splitlines()
    files = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert {path.name for path in files} >= {"manifest.yaml", "deploy.yaml"}
    assert [path for path in files if PASSWORD.encode() in path.read_bytes()] == [], "the value is in no file init wrote"
    assert not held_anywhere(data, text)


def test_a_redis_password_the_head_alone_gives_is_that_nodes_own_and_the_secret_env_stays_vllms():
    described = describe(ray_pair(("--head", "--port=6380", "--redis-password", PASSWORD), ()), SWITCHES, ROOT)
    assert described.ray_start == () and described.ray_secrets == ("RAY_REDIS_PASSWORD",)
    assert described.node_launch["spark-a"]["ray_start"] == [REFERENCE] and "spark-b" not in described.node_launch
    assert "RAY_START_ARGS" not in launcher_env(described, ROOT) and "SECRET_ENV" not in launcher_env(described, ROOT)
    assert not held_anywhere(deploy_document(ray_pair(("--head",), ()), described, ROOT), described.node_launch)


def test_every_spelling_of_the_option_is_kept_by_name_and_a_bare_or_empty_one_holds_no_secret():
    for given in (("--redis-password", PASSWORD), (f"--redis-password={PASSWORD}",), (f"--redis_password={PASSWORD}",)):
        described = describe(ray_pair(("--head", *given), given), SWITCHES, ROOT)
        assert described.ray_start[0].endswith("={secret:RAY_REDIS_PASSWORD}") and not held_anywhere(described.ray_start)
    described = describe(ray_pair(("--head", "--redis-password=", "--num-cpus=2"), ()), SWITCHES, ROOT)
    assert described.node_launch["spark-a"]["ray_start"] == ["--redis-password=", "--num-cpus=2"] and described.ray_secrets == ()


def test_ray_nodes_whose_passwords_differ_are_refused_since_one_variable_cannot_carry_both():
    with pytest.raises(IntegrityError, match="init: the Ray nodes give --redis-password different values, which one variable "
                                             r"\(RAY_REDIS_PASSWORD\) cannot carry; fix: start every Ray node with the same"):
        describe(ray_pair(("--head", f"--redis-password={PASSWORD}"), ("--redis-password=another-value",)), SWITCHES, ROOT)


def test_an_option_whose_value_only_looks_like_a_credential_is_refused_before_init_writes_anything():
    storage = "--storage=https://ops:plain-pass@store.lan/ray"
    with pytest.raises(IntegrityError, match="init: the Ray node on spark-a gives --storage a value that looks like a credential, "
                                             "which init would write in clear into deploy.yaml; fix: start the Ray nodes without it"):
        describe(ray_pair(("--head", "--port=6380", storage), ()), SWITCHES, ROOT)


# ---- the launcher: the value from its own environment, on the right node's `ray start` ----

def ray_env(role: str = "head", password: str | None = PASSWORD, **operator: str) -> dict[str, str]:
    env = env_for(role=role, SHAPE="ray", **operator)
    return env if password is None else {**env, "RAY_REDIS_PASSWORD": password}


def test_the_head_alone_gets_the_password_from_the_launchers_environment_and_print_shows_its_name():
    own = json.dumps({"ray_start": [REFERENCE]})
    head = core.plan(ray_env(KVBAKE_NODE_LAUNCH_JSON=own))
    assert head.cluster_command == ("ray", "start", "--block", "--head", "--port=6379", f"--redis-password={PASSWORD}")
    assert head.container_command() == ("ray", ("start", "--block", "--head", "--port=6379", f"--redis-password={PASSWORD}"))
    assert head.argv()[-1] == REFERENCE and not held_anywhere(head.argv_lines()), "--print shows the variable's name"
    worker = core.plan(ray_env("worker"))
    assert worker.cluster_command == ("ray", "start", "--block", "--address=10.0.0.11:6379") and not worker.withheld


def test_a_shared_reference_gives_every_node_the_password_after_its_node_address():
    shared = json.dumps(["--node-ip-address={node_address}", REFERENCE])
    for role, address in (("head", "10.0.0.11"), ("worker", "10.0.0.12")):
        step = core.plan(ray_env(role, RAY_START_ARGS=shared))
        assert step.cluster_command[-2:] == (f"--node-ip-address={address}", f"--redis-password={PASSWORD}")
        assert step.argv()[-2:] == [f"--node-ip-address={address}", REFERENCE]


def test_the_written_deployment_and_the_launcher_agree_on_the_reference():
    described = describe(ray_pair(("--head", "--redis-password", PASSWORD), ("--redis-password", PASSWORD)), SWITCHES, ROOT)
    shared = launcher_env(described, ROOT)["RAY_START_ARGS"]
    assert PASSWORD not in shared
    assert core.plan(ray_env("worker", RAY_START_ARGS=shared)).cluster_command[-1] == f"--redis-password={PASSWORD}"


@pytest.mark.parametrize("password", [None, ""])
def test_without_the_variable_the_launcher_refuses_in_one_line_with_exit_2(password, capsys):
    env = ray_env(password=password, RAY_START_ARGS=json.dumps([REFERENCE]))
    with pytest.raises(LaunchInputError) as caught:
        core.plan(env)
    assert caught.value.one_line() == (
        "kvbake-launch-vllm: RAY_START_ARGS gives --redis-password from RAY_REDIS_PASSWORD, which is not set where the launcher "
        "runs; fix: export RAY_REDIS_PASSWORD in the environment kvbake deploy runs in (kvbake records the secret by name only)")
    assert launcher.run(["--print"], env) == 2
    assert capsys.readouterr().err.splitlines() == [caught.value.one_line()]
    own = ray_env("worker", password=password, KVBAKE_NODE_LAUNCH_JSON=json.dumps({"ray_start": [REFERENCE]}))
    with pytest.raises(LaunchInputError, match="KVBAKE_NODE_LAUNCH_JSON.ray_start gives --redis-password from RAY_REDIS_PASSWORD"):
        core.plan(own)


def test_a_reference_that_is_not_an_options_whole_value_is_refused_by_the_deployment_file():
    for option in ("--redis-password=x{secret:RAY_REDIS_PASSWORD}", "--redis-password={secret:1X}"):
        with pytest.raises(LaunchInputError, match="nodes.spark-a.launch.ray_start gives --redis-password a secret reference that "
                                                   "is not its whole value"):
            read_node_launch({"ray_start": [option]}, "nodes.spark-a.launch")
    assert read_node_launch({"ray_start": [REFERENCE]}, "nodes.spark-a.launch").ray_start == (REFERENCE,)


# ---- adopt: the Ray node's create spec by name ----

def test_an_adopted_ray_nodes_create_spec_keeps_the_password_by_name_and_gets_it_back():
    config = {"Cmd": ["ray", "start", "--block", "--head", "--redis-password", PASSWORD], "Env": ["PATH=/usr/bin"], "Labels": {}}
    spec = create_spec({"Id": "c1", "Image": "sha256:i", "Name": "/node-1", "Config": config, "HostConfig": {}})
    assert not held_anywhere(spec) and spec["secret_args"] == ["RAY_REDIS_PASSWORD"]
    assert with_secrets(spec, {"RAY_REDIS_PASSWORD": PASSWORD})["config"]["Cmd"] == config["Cmd"]
