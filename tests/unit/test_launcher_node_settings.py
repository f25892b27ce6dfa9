"""The reference launcher's per-node settings (KVBAKE_NODE_LAUNCH_JSON), serve shapes and restart policy (no engine)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT / "scripts"))

import record_vllm_cli as recorder  # noqa: E402
from kvbake.launcher import cli as launcher  # noqa: E402
from kvbake.launcher.core import launch_plan as core  # noqa: E402
from kvbake.launcher.core.node_launch import LaunchInputError, Mount, NodeLaunch, read_node_launch, refuse_switches  # noqa: E402
from kvbake.launcher.core.launch_plan import to_main_log

SPARK = {"env": {"NCCL_SOCKET_IFNAME": "enp1s0f0np0", "GLOO_SOCKET_IFNAME": "enp1s0f0np0", "NCCL_IB_HCA": "rocep1s0f0"},
         "devices": ["/dev/infiniband"], "cap_add": ["IPC_LOCK"], "ulimits": {"memlock": -1, "stack": 67108864},
         "shm_size": "32g", "cache_mounts": ["/srv/cache/huggingface:/root/.cache/huggingface", "/srv/cache/triton:/root/.triton"]}


def env_for(node: dict | None = None, role: str = "head", **operator: str) -> dict[str, str]:
    env = recorder.sample_launcher_env(["--max-model-len", "163840"], role, 2, **operator)
    return {**env, **({"KVBAKE_NODE_LAUNCH_JSON": json.dumps(node)} if node is not None else {})}


def run_of(node: dict | None = None, **operator: str) -> core.DockerRun:
    step = core.plan(env_for(node, **operator))
    assert isinstance(step, core.DockerRun)
    return step


def values_of(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, token in enumerate(argv[:-1]) if token == flag]


def ranks_env(folder: Path, *switches: str) -> Path:
    path = folder / "ranks.env"
    path.write_text("# kvbake config sample: generated\n" + "".join(f"{s}\n" for s in switches))
    return path


# ---- per-node settings become docker run options ----

def test_the_nodes_settings_become_docker_run_options() -> None:
    step = run_of(SPARK)
    argv = step.argv()
    assert values_of(argv, "--device") == ["/dev/infiniband"]
    assert values_of(argv, "--cap-add") == ["IPC_LOCK"]
    assert values_of(argv, "--ulimit") == ["memlock=-1", "stack=67108864"]
    assert values_of(argv, "--shm-size") == ["32g"]
    assert set(SPARK["env"].items()) <= {tuple(e.split("=", 1)) for e in values_of(argv, "--env")}
    mounts = values_of(argv, "--mount")
    assert "type=bind,source=/srv/cache/huggingface,target=/root/.cache/huggingface" in mounts
    assert "type=bind,source=/models/dsv41,target=/models/served,readonly" in mounts


def test_cache_mounts_are_writable_and_the_model_stays_read_only() -> None:
    step = run_of(SPARK)
    assert step.mounts[0] == Mount("/models/dsv41", "/models/served")
    assert [m.writable for m in step.mounts] == [False, True, True]
    assert "readonly" not in step.mounts[1].spec()


def test_without_node_settings_nothing_is_added() -> None:
    for node in (None, {}):
        options = run_of(node).whales_options()
        assert (options["devices"], options["cap_add"], options["ulimit"], options["shm_size"]) == ([], [], [], "16g")


def test_the_node_shm_size_wins_over_shm_size() -> None:
    assert run_of({"shm_size": "1g"}, SHM_SIZE="8g").shm_size == "1g"
    assert run_of({}, SHM_SIZE="8g").shm_size == "8g"


def test_whales_options_carry_the_node_settings() -> None:
    options = run_of(SPARK).whales_options()
    assert options["devices"] == ["/dev/infiniband"] and options["cap_add"] == ["IPC_LOCK"]
    assert options["ulimit"] == ["memlock=-1", "stack=67108864"] and options["shm_size"] == "32g"
    assert ["type=bind", "source=/srv/cache/triton", "target=/root/.triton"] in options["mounts"]


def test_the_json_round_trips() -> None:
    node = read_node_launch(SPARK, "launch")
    assert read_node_launch(json.loads(node.to_json()), "launch") == node
    assert node.interfaces() == {"NCCL_SOCKET_IFNAME": ("enp1s0f0np0",), "GLOO_SOCKET_IFNAME": ("enp1s0f0np0",)}


# ---- restart policy and shapes ----

@pytest.mark.parametrize("shape", ["main", "exec", "ray"])
def test_ranks_never_restart_on_their_own(shape: str) -> None:
    step = run_of(SHAPE=shape)
    assert values_of(step.argv(), "--restart") == ["no"] and step.whales_options()["restart"] == "no"


def test_the_exec_shape_waits_then_starts_vllm_by_docker_exec() -> None:
    main, execd = run_of(SPARK), run_of(SPARK, SHAPE="exec")
    run_line, exec_line = execd.argv_lines()
    assert run_line[run_line.index("--entrypoint") + 1:] == ["sleep", execd.image, "infinity"]
    assert "--env-file" not in run_line
    assert exec_line[:6] == ["docker", "exec", "--detach", "--env-file", "/run/kvbake/ranks.env", "vllm-serve"]
    assert exec_line[6:] == to_main_log(["python3", *main.command]), "vLLM's output goes to docker logs"
    assert values_of(run_line, "--label")[-1] == "kvbake.launcher.shape=exec"
    assert execd.whales_options()["env_files"] == [] and execd.whales_options()["entrypoint"] == "sleep"
    assert execd.whales_exec() == {"command": to_main_log(["python3", *main.command]), "detach": True, "env_files": ["/run/kvbake/ranks.env"]}


def test_both_shapes_give_the_container_the_same_options_but_the_env_file() -> None:
    main, execd = run_of(SPARK), run_of(SPARK, SHAPE="exec")
    without_env_file = [t for t in main.run_options() if t not in ("--env-file", main.env_file)]
    assert [t for t in execd.run_options() if t != "kvbake.launcher.shape=exec"] == \
        [t for t in without_env_file if t != "kvbake.launcher.shape=main"]


def test_the_ray_shape_runs_a_ray_node_on_every_rank_and_vllm_on_the_head_alone() -> None:
    head, worker = run_of(SPARK, SHAPE="ray", RAY_PORT="6380"), run_of(SPARK, role="worker", SHAPE="ray", RAY_PORT="6380")
    head_run, head_exec = head.argv_lines()
    assert head_run[head_run.index("--entrypoint") + 1:] == ["ray", head.image, "start", "--block", "--head", "--port=6380"]
    assert head_exec[6:13] == to_main_log(["python3", "-m", "vllm.entrypoints.openai.api_server"])
    assert values_of(head_exec, "--distributed-executor-backend") == ["ray"]
    assert "--nnodes" not in head.vllm_args and "--master-addr" not in head.vllm_args, "Ray places the workers"
    assert values_of(list(head.vllm_args), "--tensor-parallel-size") == ["2"]
    (worker_run,) = worker.argv_lines()
    assert worker_run[worker_run.index("--entrypoint") + 1:] == ["ray", worker.image, "start", "--block", "--address=10.0.0.11:6380"]
    assert not worker.execs and head.execs
    for step in (head, worker):  # the actors a Ray node starts inherit its environment: the switches go to the container
        assert values_of(step.argv(), "--env-file") == ["/run/kvbake/ranks.env"] and step.whales_options()["env_files"] == ["/run/kvbake/ranks.env"]
        assert values_of(step.argv(), "--label")[-1] == "kvbake.launcher.shape=ray"


def test_the_ray_shape_keeps_a_preset_that_already_names_the_ray_backend() -> None:
    step = run_of(SHAPE="ray", KVBAKE_LAUNCHER_ARGS_JSON='["--max-model-len", "163840", "--distributed-executor-backend", "ray"]')
    assert list(step.vllm_args).count("--distributed-executor-backend") == 1


def test_only_the_ray_shape_needs_a_ray_port_of_its_own() -> None:
    assert run_of(RAY_PORT="8000").shape == "main"
    with pytest.raises(LaunchInputError, match="MASTER_PORT and RAY_PORT are both 6379"):
        run_of(SHAPE="ray", MASTER_PORT="6379")


class FakeContainers:
    def __init__(self) -> None:
        self.calls: list = []

    def exists(self, name: str) -> bool:
        return False

    def execute(self, name: str, **options) -> None:
        self.calls.append(("execute", name, options))


class FakeClient:
    def __init__(self) -> None:
        self.container, self.runs = FakeContainers(), []

    def run(self, image: str, command: list[str], **options) -> SimpleNamespace:
        self.runs.append((image, command, options))
        return SimpleNamespace(id="c0ffee00" * 8)


def test_a_ray_worker_is_started_without_an_exec() -> None:
    client, step = FakeClient(), run_of(SPARK, role="worker", SHAPE="ray")
    assert launcher.carry_out(client, step, "ssh://ops@spark-b").endswith("(c0ffee00c0ff, ray shape) on ssh://ops@spark-b")
    assert client.runs == [(step.image, ["start", "--block", "--address=10.0.0.11:6379"], step.whales_options())]
    assert client.container.calls == []


def test_the_exec_shape_runs_the_container_then_execs_vllm() -> None:
    client, step = FakeClient(), run_of(SPARK, SHAPE="exec")
    assert launcher.carry_out(client, step, "ssh://ops@spark-a").endswith("(c0ffee00c0ff, exec shape) on ssh://ops@spark-a")
    assert client.runs == [(step.image, ["infinity"], step.whales_options())]
    assert client.container.calls == [("execute", "vllm-serve", step.whales_exec())]


@pytest.mark.parametrize("shape", ["main", "exec", "ray"])
def test_python_on_whales_builds_the_printed_calls(shape: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The adapter's keyword arguments make the very docker commands --print shows (nothing is run)."""
    import python_on_whales.components.container.cli_wrapper as whales_cli

    def capture(command, **_):
        raise RuntimeError([str(token) for token in command])

    monkeypatch.setattr(whales_cli, "run", capture)
    client, step = launcher.DockerClient(host="ssh://ops@spark-a"), run_of(SPARK, SHAPE=shape)
    calls = [lambda: client.run(step.image, list(step.container_command()[1]), **step.whales_options())]
    calls += [lambda: client.container.execute(step.name, **step.whales_exec())] if step.execs else []
    built = []
    for call in calls:
        with pytest.raises(RuntimeError) as raised:
            call()
        built.append(raised.value.args[0])
    printed = step.argv_lines()
    assert len(built) == len(printed)
    run_built, run_printed = built[0], printed[0]
    image_at = run_built.index(step.image)
    assert run_built[1:5] == ["--host", "ssh://ops@spark-a", "container", "run"]
    assert run_built[image_at:] == run_printed[run_printed.index(step.image):]
    assert sorted(run_built[5:image_at]) == sorted(run_printed[2:run_printed.index(step.image)])
    if step.execs:
        assert built[1][1:4] == ["--host", "ssh://ops@spark-a", "exec"] and built[1][4:] == printed[1][2:]


# ---- refusals: exit 2, one line, the field named ----

BAD_NODE_SETTINGS = [
    ({"env": {"PYTHONPATH": "/srv/p"}}, "PYTHONPATH"),
    ({"env": {"LD_PRELOAD": "/x.so"}}, "LD_PRELOAD"),
    ({"env": {"KVBAKE_IMAGE": "x"}}, "KVBAKE_IMAGE"),
    ({"env": {"NCCL_DEBUG": 1}}, "NCCL_DEBUG"),
    ({"env": {"NCCL_SOCKET_IFNAME": "enp1s0 f0"}}, "NCCL_SOCKET_IFNAME"),
    ({"env": {"GLOO_SOCKET_IFNAME": ""}}, "GLOO_SOCKET_IFNAME"),
    ({"env": ["NCCL_DEBUG=INFO"]}, ".env"),
    ({"devices": "/dev/infiniband"}, ".devices"),
    ({"devices": ["dev/infiniband"]}, "devices path"),
    ({"devices": ["/dev/null:/dev/x:rwx"]}, "HOST[:CONTAINER[:PERMISSIONS]]"),
    ({"cap_add": ["ipc_lock"]}, ".cap_add"),
    ({"cap_add": ["ALL"]}, "ALL"),
    ({"ulimits": {"memlock": "unlimited"}}, "memlock"),
    ({"ulimits": {"openfiles": 1024}}, "openfiles"),
    ({"ulimits": {"nofile": "4096:1024"}}, "soft limit above"),
    ({"ulimits": {"stack": True}}, "stack"),
    ({"shm_size": "16 GB"}, "shm_size"),
    ({"cache_mounts": ["/srv/cache"]}, "SOURCE:TARGET"),
    ({"cache_mounts": ["/srv/a:relative"]}, "cache_mounts target"),
    ({"cache_mounts": ["/srv/a:/usr/local/lib/python3.12/dist-packages/vllm"]}, "Python package folder"),
    ({"cache_mounts": ["/srv/a:/usr/local"]}, "Python sources"),
    ({"cache_mounts": ["/srv/a:/opt/venv/lib/python3.12/site-packages/x"]}, "Python package folder"),
    ({"cache_mounts": ["/srv/a:/models/served/cache"]}, "/models/served"),
    ({"cache_mounts": ["/srv/a:/root/.cache", "/srv/b:/root/.cache/huggingface"]}, "overlaps the mount at /root/.cache"),
    ({"shmsize": "1g"}, "unknown key"),
]


@pytest.mark.parametrize(("node", "named"), BAD_NODE_SETTINGS, ids=[f"{i}-{named}" for i, (_, named) in enumerate(BAD_NODE_SETTINGS)])
def test_bad_node_settings_exit_2_naming_the_field(node: dict, named: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    env = {**env_for(node), "KVBAKE_ENV_FILE": str(ranks_env(tmp_path))}
    for argv in ([], ["--print"]):
        assert launcher.run(argv, env) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1
        assert captured.err.startswith("kvbake-launch-vllm: KVBAKE_NODE_LAUNCH_JSON") and named in captured.err and "; fix: " in captured.err


@pytest.mark.parametrize(("env", "named"), [
    ({"KVBAKE_NODE_LAUNCH_JSON": "[1]"}, "KVBAKE_NODE_LAUNCH_JSON is not a JSON object"),
    ({"SHAPE": "swarm"}, "SHAPE='swarm'"),
    ({"SHAPE": "ray", "RAY_PORT": "8000"}, "VLLM_PORT and RAY_PORT are both 8000"),
    ({"SHAPE": "ray", "KVBAKE_LAUNCHER_ARGS_JSON": '["--max-model-len", "163840", "--distributed-executor-backend=mp"]'},
     "SHAPE=ray but the preset gives --distributed-executor-backend mp"),
    ({"KVBAKE_NODE_LAUNCH_JSON": json.dumps({"env": {"VLLM_HOST_IP": "10.0.0.11"}}), "CONTAINER_ENV": '{"VLLM_HOST_IP": "x"}'},
     "both set VLLM_HOST_IP"),
    ({"KVBAKE_NODE_LAUNCH_JSON": json.dumps({"cache_mounts": ["/srv/a:/opt/tok/cache"]}), "EXTRA_MOUNTS": '["/srv/t:/opt/tok"]'},
     "overlaps the mount at /opt/tok"),
    ({"KVBAKE_NODE_LAUNCH_JSON": json.dumps({"cache_mounts": ["/srv/a:/opt/vllm/cache"]}), "SOURCE_ROOT": "/opt/vllm"}, "Python sources"),
])
def test_settings_that_disagree_with_the_operators_exit_2(env: dict, named: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert launcher.run(["--print"], {**env_for(), "KVBAKE_ENV_FILE": str(ranks_env(tmp_path)), **env}) == 2
    err = capsys.readouterr().err
    assert named in err and err.count("\n") == 1


def test_a_switch_of_ranks_env_in_the_nodes_env_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    env = {**env_for({"env": {"VLLM_DSV41_KV_PAIR": "3"}}), "KVBAKE_ENV_FILE": str(ranks_env(tmp_path, "VLLM_DSV41_KV_PAIR=3"))}
    assert launcher.run(["--print"], env) == 2
    assert "VLLM_DSV41_KV_PAIR" in capsys.readouterr().err
    env["KVBAKE_ENV_FILE"] = str(ranks_env(tmp_path, "VLLM_EXL3_TF_PROMPT_ALIAS=1"))
    assert launcher.run(["--print"], env) == 0


def test_a_manifest_switch_is_refused_by_name() -> None:
    with pytest.raises(LaunchInputError) as raised:
        refuse_switches(NodeLaunch(env={"VLLM_DSV41_KV_PAIR": "3", "NCCL_DEBUG": "INFO"}), ["VLLM_DSV41_KV_PAIR"], "nodes[spark-a].launch")
    assert raised.value.cause.startswith("nodes[spark-a].launch.env sets VLLM_DSV41_KV_PAIR")


def test_print_of_the_exec_shape_is_two_lines(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    env = {**env_for(SPARK, SHAPE="exec"), "KVBAKE_ENV_FILE": str(ranks_env(tmp_path)), "DOCKER_HOST": ""}
    assert launcher.run(["--print"], env) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines] == [["docker", "run"], ["docker", "exec"]]
    assert "--ulimit memlock=-1" in lines[0] and "--device /dev/infiniband" in lines[0] and lines[0].endswith(" infinity")
