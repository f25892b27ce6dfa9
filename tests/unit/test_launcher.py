"""The reference launcher's (kvbake-launch-vllm) pure core and adapter (no engine), and its command lines against vLLM's recorded parser."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from python_on_whales.exceptions import DockerException

ROOT = Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT / "scripts"))

import record_vllm_cli as recorder  # noqa: E402
from kvbake.launcher import cli as launcher  # noqa: E402
from kvbake.launcher.core import launch_plan as core  # noqa: E402
from kvbake.manifest import load_manifest  # noqa: E402
from kvbake.serve.core.presets import choose_preset  # noqa: E402
from kvbake.serve.core.runtime_config import settings_of_preset  # noqa: E402

FIXTURES = {version: json.loads((ROOT / "tests" / "data" / f"vllm_cli_options_{version}.json").read_text())
            for version in ("0.32.0", "0.33.0")}
PRODUCTION = FIXTURES["0.33.0"]
NUMBER = re.compile(r"-[0-9.]+")
ROLES = (("head", 2), ("worker", 2), ("head", 1))


def env_for(preset_args=("--max-model-len", "163840"), role="head", nnodes=2, **operator) -> dict[str, str]:
    return recorder.sample_launcher_env(list(preset_args), role, nnodes, **operator)


def run_of(**kwargs) -> core.DockerRun:
    step = core.plan(env_for(**kwargs))
    assert isinstance(step, core.DockerRun)
    return step


# ---- the checker: a command line against a recorded parser ----

def option_spec(token: str, options: dict) -> tuple[str, dict | None]:
    """The option a token names as vLLM's parser normalises it (`--a_b` = `--a-b`, `--a.b` is `--a`'s JSON key)."""
    name = token.partition("=")[0]
    if name.startswith("--"):
        name = "--" + name[2:].partition(".")[0].replace("_", "-")
    return name, options.get(name)


def values_taken(spec: dict, rest: list[str]) -> int:
    """How many following tokens the option consumes, as argparse counts them (no inline `=value`)."""
    free = next((i for i, token in enumerate(rest) if token.startswith("-") and not NUMBER.fullmatch(token)), len(rest))
    arity = spec["arity"]
    if arity in ("value", "optional"):
        return min(free, 1)
    if arity in ("one-or-more", "any"):
        return free
    return int(arity)


def fixture_problems(argv: list[str], fixture: dict, positional_slots: int) -> list[str]:
    """Every way `argv` breaks the recorded parser: an unknown or deprecated option, a flag given a value, a missing
    value, a value outside the choices, a stray value (a positional the entry does not expect)."""
    options, problems, i, positionals = fixture["options"], [], 0, 0
    while i < len(argv):
        token, i = argv[i], i + 1
        if not token.startswith("-") or NUMBER.fullmatch(token):
            positionals += 1
            if positionals > positional_slots:
                problems.append(f"stray value {token!r}")
            continue
        name, spec = option_spec(token, options)
        if spec is None:
            problems.append(f"{name} is not an option of vLLM {fixture['vllm_version']}")
            continue
        if spec["deprecated"]:
            problems.append(f"{name} is deprecated")
        inline = "=" in token
        if not spec["takes_value"]:
            if inline:
                problems.append(f"{name} is a flag and takes no value")
            continue
        count = 1 if inline else values_taken(spec, argv[i:])
        values = [token.partition("=")[2]] if inline else argv[i:i + count]
        i += 0 if inline else count
        if count == 0 and spec["arity"] in ("value", "one-or-more"):
            problems.append(f"{name} needs a value")
        if spec["choices"] and any(value not in spec["choices"] for value in values):
            problems.append(f"{name} {values} is not one of {spec['choices']}")
    return problems


def launcher_problems(step: core.DockerRun, fixture: dict) -> list[str]:
    slots = 1 if step.entry == core.WORKER_ENTRY else 0  # the worker's model is serve's positional model_tag
    return fixture_problems(list(step.vllm_args), fixture, slots)


# ---- the plan ----

def test_head_of_two_serves_the_api_and_leads_the_rendezvous() -> None:
    step = run_of(preset_args=["--max-model-len", "327680", "--enable-prefix-caching"])
    assert step.entry == ("-m", "vllm.entrypoints.openai.api_server")
    assert list(step.vllm_args) == [
        "--model", "/models/served", "--served-model-name", "dsv41", "--host", "0.0.0.0", "--port", "8000",
        "--tensor-parallel-size", "2", "--max-model-len", "327680", "--enable-prefix-caching",
        "--nnodes", "2", "--node-rank", "0", "--master-addr", "10.0.0.11", "--master-port", "29501"]


def test_worker_of_two_runs_headless_through_the_serve_subcommand() -> None:
    step = run_of(role="worker")
    assert step.entry == ("-m", "vllm.entrypoints.cli.main", "serve")
    assert list(step.vllm_args) == [
        "/models/served", "--served-model-name", "dsv41", "--host", "0.0.0.0", "--port", "8000",
        "--tensor-parallel-size", "2", "--max-model-len", "163840",
        "--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.11", "--master-port", "29501", "--headless"]


def test_one_node_gets_no_multi_node_options() -> None:
    step = run_of(nnodes=1)
    assert list(step.vllm_args) == ["--model", "/models/served", "--served-model-name", "dsv41", "--host", "0.0.0.0",
                                    "--port", "8000", "--tensor-parallel-size", "1", "--max-model-len", "163840"]


def test_docker_run_options_of_the_head() -> None:
    step = run_of()
    assert step.argv() == [
        "docker", "run", "--detach", "--name", "vllm-serve", "--network", "host", "--ipc", "host", "--gpus", "all",
        "--shm-size", "16g", "--restart", "no", "--pull", "never", "--env-file", "/run/kvbake/ranks.env",
        "--mount", "type=bind,source=/models/dsv41,target=/models/served,readonly", "--label", "kvbake.launcher.preset=sample",
        "--label", "kvbake.launcher.node=spark-a", "--label", "kvbake.launcher.role=head", "--label", "kvbake.launcher.shape=main",
        "--entrypoint", "python3", "registry.example:5000/kvbake/dsv41:current",
        "-m", "vllm.entrypoints.openai.api_server", *step.vllm_args]
    assert step.whales_options() == {
        "name": "vllm-serve", "detach": True, "networks": ["host"], "ipc": "host", "gpus": "all", "shm_size": "16g",
        "restart": "no", "pull": "never", "env_files": ["/run/kvbake/ranks.env"], "envs": {},
        "mounts": [["type=bind", "source=/models/dsv41", "target=/models/served", "readonly"]], "entrypoint": "python3",
        "devices": [], "cap_add": [], "ulimit": [],
        "labels": {"kvbake.launcher.preset": "sample", "kvbake.launcher.node": "spark-a", "kvbake.launcher.role": "head",
                   "kvbake.launcher.shape": "main"}}


@pytest.mark.parametrize(("gpus", "option", "whales"), [("all", ["--gpus", "all"], "all"), ("none", [], None), ("", ["--gpus", "all"], "all")])
def test_gpus(gpus: str, option: list[str], whales: str | None) -> None:
    step = run_of(GPUS=gpus)
    argv = step.argv()
    assert (argv[argv.index("--gpus"):argv.index("--gpus") + 2] if "--gpus" in argv else []) == option
    assert step.whales_options()["gpus"] == whales


@pytest.mark.parametrize(("operator", "expected"), [
    ({}, ["--served-model-name", "dsv41", "--host", "0.0.0.0", "--port", "8000", "--tensor-parallel-size", "2"]),
    ({"SERVED_MODEL_NAME": "", "MODEL_DIR": "/srv/models/DeepSeek-V4.1-Flash/"},
     ["--served-model-name", "DeepSeek-V4.1-Flash", "--host", "0.0.0.0", "--port", "8000", "--tensor-parallel-size", "2"]),
    ({"VLLM_HOST": "10.0.0.11", "VLLM_PORT": "8100", "TENSOR_PARALLEL_SIZE": "4", "MASTER_PORT": "29600"},
     ["--served-model-name", "dsv41", "--host", "10.0.0.11", "--port", "8100", "--tensor-parallel-size", "4"]),
])
def test_operator_variables(operator: dict, expected: list[str]) -> None:
    step = run_of(**operator)
    assert list(step.vllm_args[2:10]) == expected
    assert step.vllm_args[-1] == operator.get("MASTER_PORT", "29501")


@pytest.mark.parametrize(("preset_args", "option", "kept"), [
    (["--max-model-len", "8192", "--port", "9000"], "--port", ["--port", "9000"]),
    (["--max-model-len", "8192", "--port=9000"], "--port", ["--port=9000"]),
    (["--max-model-len", "8192", "-tp", "1"], "--tensor-parallel-size", ["-tp", "1"]),
    (["--max-model-len", "8192", "--tensor_parallel_size", "1"], "--tensor-parallel-size", ["--tensor_parallel_size", "1"]),
    (["--max-model-len", "8192", "--served-model-name", "a", "b"], "--served-model-name", ["--served-model-name", "a", "b"]),
    (["--max-model-len", "8192", "--host", "127.0.0.1"], "--host", ["--host", "127.0.0.1"]),
    (["--max-model-len", "8192", "--master-port", "30000"], "--master-port", ["--master-port", "30000"]),
])
def test_the_preset_wins_and_nothing_repeats(preset_args: list[str], option: str, kept: list[str]) -> None:
    """The preset's spelling and value stay; the launcher's own is left out, in every role."""
    for role, nnodes in ROLES:
        args = list(run_of(preset_args=preset_args, role=role, nnodes=nnodes).vllm_args)
        assert [core.option_name(token) for token in args].count(option) == 1
        start = args.index(kept[0])
        assert args[start:start + len(kept)] == kept
        named = [core.option_name(token) for token in args if core.option_name(token)]
        assert len(named) == len(set(named)), named


def test_max_model_len_comes_from_the_preset_once() -> None:
    args = list(run_of(preset_args=["--max-model-len", "524288"]).vllm_args)
    assert args.count("--max-model-len") == 1 and args[args.index("--max-model-len") + 1] == "524288"


def test_a_vllm_cache_or_a_vllm_folder_outside_the_working_directory_is_mounted() -> None:
    step = run_of(KVBAKE_WORKDIR="/workspace", EXTRA_MOUNTS='["/srv/src/vllm:/opt/reference/vllm"]',
                  KVBAKE_NODE_LAUNCH_JSON='{"cache_mounts": ["/srv/cache/vllm:/root/.cache/vllm"]}')
    assert {"/opt/reference/vllm", "/root/.cache/vllm"} <= {m.target for m in step.mounts}


def test_extra_mounts_and_container_env() -> None:
    step = run_of(role="worker", EXTRA_MOUNTS='["/srv/cache/flashinfer:/root/.cache/flashinfer"]',
                  CONTAINER_ENV='{"VLLM_HOST_IP": "{node_address}", "NCCL_SOCKET_IFNAME": "enp1s0f0np0"}')
    assert step.mounts == (core.Mount("/models/dsv41", "/models/served"), core.Mount("/srv/cache/flashinfer", "/root/.cache/flashinfer"))
    assert dict(step.envs) == {"VLLM_HOST_IP": "10.0.0.12", "NCCL_SOCKET_IFNAME": "enp1s0f0np0"}
    assert "type=bind,source=/srv/cache/flashinfer,target=/root/.cache/flashinfer,readonly" in step.argv()
    assert "VLLM_HOST_IP=10.0.0.12" in step.argv()


# ---- the remote drafter ----

DRAFTER = {"KVBAKE_DRAFTER_URL": "http://10.0.0.20:8100", "KVBAKE_DRAFTER_MAX_POSITIONS": "327680"}


def test_drafter_template_is_filled_in_after_the_preset() -> None:
    template = json.dumps(["--drafter-endpoint", "{url}", "--spec-extra", '{"max_positions": {max_positions}}'])
    args = list(run_of(preset_args=["--max-model-len", "327680"], DRAFTER_ARGS=template, **DRAFTER).vllm_args)
    start = args.index("--drafter-endpoint")
    assert args[start - 2:start] == ["--max-model-len", "327680"]
    assert args[start:start + 4] == ["--drafter-endpoint", "http://10.0.0.20:8100", "--spec-extra", '{"max_positions": 327680}']
    assert args[start + 4] == "--nnodes"


def test_drafter_template_without_a_drafter_adds_nothing() -> None:
    assert run_of(DRAFTER_ARGS='["--drafter-endpoint", "{url}"]').vllm_args == run_of().vllm_args


# ---- refusals: exact line, exit code 2 ----

FIX_KVBAKE = "run the launcher through kvbake deploy (it sets the KVBAKE_* variables), or set them as docs/launcher.md lists"
FIX_MODEL = "set MODEL_DIR in launcher.env to the model folder's absolute path on the nodes (the same on every node)"
FIX_ARGS = "run the launcher through kvbake deploy, which passes the preset's arguments as a JSON array"
FIX_SHADOW = "mount it elsewhere; verify-running refuses a serve that imports vllm from outside the source root"
FIX_MOUNTS = 'set EXTRA_MOUNTS to a JSON array of "/node/path:/container/path" strings, both absolute'
FIX_OVER_SOURCES = "mount it elsewhere; kvbake's verify-running refuses a mount over, above or inside the source root"
BAD_INPUTS = [
    ({"KVBAKE_IMAGE": ""}, f"KVBAKE_IMAGE is not set; fix: {FIX_KVBAKE}"),
    ({"KVBAKE_CONTAINER": "bad name"}, "KVBAKE_CONTAINER='bad name' is not a container name; fix: set launcher.container in "
     "the deployment file to a docker container name ([a-zA-Z0-9][a-zA-Z0-9_.-]+)"),
    ({"KVBAKE_ENV_FILE": ""}, f"KVBAKE_ENV_FILE is not set; fix: {FIX_KVBAKE}"),
    ({"KVBAKE_ROLE": "leader"}, f"KVBAKE_ROLE='leader' is neither head nor worker; fix: {FIX_KVBAKE}"),
    ({"KVBAKE_NNODES": "two"}, f"KVBAKE_NNODES='two' is not an integer; fix: {FIX_KVBAKE}"),
    ({"KVBAKE_NODE_RANK": "2"}, f"KVBAKE_NODE_RANK=2 is outside 0..1; fix: {FIX_KVBAKE}"),
    ({"KVBAKE_NODE_RANK": "1"}, "KVBAKE_ROLE is head but KVBAKE_NODE_RANK is 1 (the head is rank 0, workers are not); "
     "fix: give exactly one node role: head in the deployment file"),
    ({"KVBAKE_HEAD_ADDRESS": ""}, "KVBAKE_HEAD_ADDRESS is empty with 2 nodes; fix: give the head node an address: in the "
     "deployment file (the IP the workers reach it on)"),
    ({"KVBAKE_LAUNCHER_ARGS_JSON": ""}, f"KVBAKE_LAUNCHER_ARGS_JSON is not set; fix: {FIX_ARGS}"),
    ({"KVBAKE_LAUNCHER_ARGS_JSON": "--max-model-len 8192"}, "KVBAKE_LAUNCHER_ARGS_JSON is not a JSON array of strings; fix: "
     'set KVBAKE_LAUNCHER_ARGS_JSON to a JSON array of strings, e.g. ["--max-model-len", "163840"]'),
    ({"KVBAKE_LAUNCHER_ARGS_JSON": "[8192]"}, "KVBAKE_LAUNCHER_ARGS_JSON is not a JSON array of strings; fix: "
     'set KVBAKE_LAUNCHER_ARGS_JSON to a JSON array of strings, e.g. ["--max-model-len", "163840"]'),
    ({"KVBAKE_MAX_MODEL_LEN": "8192"}, "KVBAKE_LAUNCHER_ARGS_JSON does not start with --max-model-len 8192 "
     f"(KVBAKE_MAX_MODEL_LEN); fix: {FIX_ARGS}"),
    ({"KVBAKE_LAUNCHER_ARGS_JSON": '["--max-model-len", "163840", "--node-rank", "0", "--headless"]'},
     "preset sample gives --headless, --node-rank in launcher_args, which differ per node; fix: remove them from the "
     "preset's launcher_args; the launcher sets them for every rank"),
    ({"MODEL_DIR": ""}, f"MODEL_DIR is not set; fix: {FIX_MODEL}"),
    ({"MODEL_DIR": "models/dsv41"}, f"MODEL_DIR='models/dsv41' is not an absolute path; fix: {FIX_MODEL}"),
    ({"MODEL_DIR": "/models/a:b"}, f"MODEL_DIR='/models/a:b' contains ':', ',' or whitespace, which a bind mount cannot carry; fix: {FIX_MODEL}"),
    ({"MODEL_DIR": "/"}, f"MODEL_DIR='/' is the root folder; fix: {FIX_MODEL}"),
    ({"MODEL_DIR": "/models/../etc"}, f"MODEL_DIR='/models/../etc' is not a normalised path (no '.', '..' or '//'); fix: {FIX_MODEL}"),
    ({"SERVED_MODEL_NAME": "deep seek"}, "SERVED_MODEL_NAME='deep seek' contains whitespace; fix: set SERVED_MODEL_NAME to one name without whitespace"),
    ({"VLLM_HOST": "0.0.0.0 "}, "VLLM_HOST='0.0.0.0 ' contains whitespace; fix: set VLLM_HOST to the address the API listens on, e.g. 0.0.0.0"),
    ({"VLLM_PORT": "80a"}, "VLLM_PORT='80a' is not an integer; fix: set VLLM_PORT to a TCP port number (1..65535) in launcher.env"),
    ({"VLLM_PORT": "70000"}, "VLLM_PORT=70000 is outside 1..65535; fix: set VLLM_PORT to a TCP port number (1..65535) in launcher.env"),
    ({"MASTER_PORT": "-1"}, "MASTER_PORT='-1' is not an integer; fix: set MASTER_PORT to a TCP port number (1..65535) in launcher.env"),
    ({"MASTER_PORT": "8000"}, "VLLM_PORT and MASTER_PORT are both 8000; fix: give the API and the multi-node rendezvous different ports"),
    ({"TENSOR_PARALLEL_SIZE": "0"}, "TENSOR_PARALLEL_SIZE=0 is outside 1..4096; fix: set TENSOR_PARALLEL_SIZE in launcher.env to a "
     "positive integer (default: the number of nodes)"),
    ({"GPUS": "0,1"}, "GPUS='0,1' is not one of all, none; fix: set GPUS=all (every GPU of the node) or GPUS=none (CPU-only test hosts) in launcher.env"),
    ({"SHM_SIZE": "16 GB"}, "SHM_SIZE='16 GB' is not a size; fix: set SHM_SIZE to a number with an optional b, k, m or g suffix, e.g. 16g"),
    ({"SOURCE_ROOT": "usr/lib"}, "SOURCE_ROOT='usr/lib' is not an absolute path; fix: set SOURCE_ROOT to the manifest's base.source_root (an absolute path)"),
    ({"EXTRA_MOUNTS": "/a:/b"}, "EXTRA_MOUNTS is not a JSON array of strings; fix: set EXTRA_MOUNTS to a JSON array of strings, "
     'e.g. ["/srv/models/tokenizers:/opt/tokenizers"]'),
    ({"CONTAINER_ENV": '["NCCL_DEBUG=INFO"]'}, "CONTAINER_ENV is not a JSON object of NAME: value strings; fix: set CONTAINER_ENV "
     'to a JSON object of NAME: value strings, e.g. {"VLLM_HOST_IP": "{node_address}"}'),
    ({**{"KVBAKE_DRAFTER_URL": "http://10.0.0.20:8100"}, "DRAFTER_ARGS": '"--d {url}"'}, "DRAFTER_ARGS is not a JSON array of "
     'strings; fix: set DRAFTER_ARGS to a JSON array of strings, e.g. ["--<drafter-option>", "{url}"]'),
    ({"EXTRA_MOUNTS": '["/srv/cache"]'}, f"EXTRA_MOUNTS entry '/srv/cache' is not SOURCE:TARGET; fix: {FIX_MOUNTS}"),
    ({"EXTRA_MOUNTS": '["srv:/cache"]'}, f"EXTRA_MOUNTS source='srv' is not an absolute path; fix: {FIX_MOUNTS}"),
    ({"EXTRA_MOUNTS": '["/srv/patched:/usr/local/lib/python3.12/dist-packages/vllm"]'},
     "EXTRA_MOUNTS target /usr/local/lib/python3.12/dist-packages/vllm overlaps the image's Python sources "
     f"(/usr/local/lib/python3.12/dist-packages); fix: {FIX_OVER_SOURCES}"),
    ({"EXTRA_MOUNTS": '["/srv/usr:/usr/local"]'}, "EXTRA_MOUNTS target /usr/local overlaps the image's Python sources "
     f"(/usr/local/lib/python3.12/dist-packages); fix: {FIX_OVER_SOURCES}"),
    ({"EXTRA_MOUNTS": '["/srv/site:/opt/venv/lib/python3.12/site-packages"]'}, "EXTRA_MOUNTS target "
     f"/opt/venv/lib/python3.12/site-packages is inside a Python package folder; fix: {FIX_OVER_SOURCES}"),
    ({"EXTRA_MOUNTS": '["/srv/patched:/opt/vllm/src"]', "SOURCE_ROOT": "/opt/vllm"}, "EXTRA_MOUNTS target /opt/vllm/src "
     f"overlaps the image's Python sources (/opt/vllm); fix: {FIX_OVER_SOURCES}"),
    ({"EXTRA_MOUNTS": '["/srv/other:/models/served/tokenizer"]'}, "EXTRA_MOUNTS target /models/served/tokenizer overlaps the "
     "mount at /models/served; fix: give every mount its own folder"),
    ({"EXTRA_MOUNTS": '["/srv/patched-vllm:/workspace/vllm"]', "KVBAKE_WORKDIR": "/workspace"}, "EXTRA_MOUNTS target "
     f"/workspace/vllm puts a vllm package in the container's working directory /workspace; fix: {FIX_SHADOW}"),
    ({"EXTRA_MOUNTS": '["/srv/patched-vllm:/vllm"]', "KVBAKE_WORKDIR": ""}, "EXTRA_MOUNTS target /vllm puts a vllm package in "
     f"the container's working directory /; fix: {FIX_SHADOW}"),
    ({"EXTRA_MOUNTS": '["/srv/tree:/workspace"]', "KVBAKE_WORKDIR": "/workspace"}, "EXTRA_MOUNTS target /workspace covers the "
     f"container's working directory /workspace, where a vllm folder would shadow the baked one; fix: {FIX_SHADOW}"),
    ({"EXTRA_MOUNTS": '["/srv/tree:/srv"]', "KVBAKE_WORKDIR": "/srv/app"}, "EXTRA_MOUNTS target /srv covers the "
     f"container's working directory /srv/app, where a vllm folder would shadow the baked one; fix: {FIX_SHADOW}"),
    ({"KVBAKE_WORKDIR": "/workspace", "KVBAKE_NODE_LAUNCH_JSON": '{"cache_mounts": ["/srv/c:/workspace/vllm"]}'},
     "KVBAKE_NODE_LAUNCH_JSON.cache_mounts target /workspace/vllm puts a vllm package in the container's working directory "
     f"/workspace; fix: {FIX_SHADOW}"),
    ({"CONTAINER_ENV": '{"PYTHONPATH": "/srv/patches"}'}, "CONTAINER_ENV sets PYTHONPATH, which selects other code than the "
     "image's; fix: remove it; kvbake's verify-running refuses a serve that sets it"),
    ({"CONTAINER_ENV": '{"NCCL_DEBUG": 1}'}, "CONTAINER_ENV entry 'NCCL_DEBUG' is not NAME: \"value\"; fix: set CONTAINER_ENV "
     'to a JSON object of NAME: value strings, e.g. {"VLLM_HOST_IP": "{node_address}"}'),
    ({"CONTAINER_ENV": '{"VLLM_HOST_IP": "{node_address}"}', "KVBAKE_NODE_ADDRESS": ""}, "CONTAINER_ENV VLLM_HOST_IP uses "
     "{node_address} but KVBAKE_NODE_ADDRESS is empty; fix: give every node an address: in the deployment file"),
    (DRAFTER, "the deployment names a remote drafter (http://10.0.0.20:8100) but DRAFTER_ARGS is not set; fix: set "
     "DRAFTER_ARGS in launcher.env to the image's drafter arguments as a JSON array with {url} and {max_positions}, e.g. "
     '["--<drafter-option>", "{url}"], or remove drafter: from the deployment file'),
    ({**DRAFTER, "DRAFTER_ARGS": '["--drafter-endpoint", "http://fixed"]'}, "DRAFTER_ARGS does not use {url}; fix: put {url} "
     "where the image's drafter option takes the drafter's address"),
    ({**DRAFTER, "KVBAKE_DRAFTER_MAX_POSITIONS": "", "DRAFTER_ARGS": '["--d", "{url}", "--n", "{max_positions}"]'},
     "DRAFTER_ARGS uses {max_positions} but the deployment's drafter has no max_positions; fix: set drafter.max_positions "
     "in the deployment file, or drop {max_positions} from DRAFTER_ARGS"),
    ({**DRAFTER, "DRAFTER_ARGS": '["--port", "{url}"]', "KVBAKE_LAUNCHER_ARGS_JSON": '["--max-model-len", "163840", "--port", "9000"]'},
     "DRAFTER_ARGS and the preset both give --port; fix: give each option in one place only"),
    ({"KVBAKE_STOP": "yes"}, "KVBAKE_STOP='yes' is neither 1 nor 0; fix: set KVBAKE_STOP=1 to stop and remove the serve, or leave it unset"),
]


@pytest.mark.parametrize(("overrides", "message"), BAD_INPUTS, ids=[m.split(" ")[0] + f"-{i}" for i, (_, m) in enumerate(BAD_INPUTS)])
def test_bad_inputs_exit_2_with_one_line(overrides: dict, message: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    env = {**env_for(), "KVBAKE_ENV_FILE": str(env_file(tmp_path)), **overrides}
    for argv in ([], ["--print"]):
        assert launcher.run(argv, env) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert_one_line_naming(captured.err, message.split("; fix: ")[0])


def assert_one_line_naming(err: str, cause: str) -> None:
    """One `kvbake-launch-vllm: CAUSE; fix: FIX` line whose cause names the variable (and the value given, if any)."""
    assert err.startswith("kvbake-launch-vllm: ") and err.endswith("\n") and err.count("\n") == 1, err
    named, _, value = cause.partition("=")
    assert named.split(" ")[0] in err.split("; fix: ")[0], err
    if value:
        assert value.split(" ")[0] in err, err
    assert "; fix: " in err and err.split("; fix: ", 1)[1].strip(), err


def env_file(folder: Path) -> Path:
    path = folder / "ranks.env"
    path.write_text("# kvbake config sample: generated\nVLLM_DSV41_KV_PAIR=3\n")
    return path


def test_missing_env_file_and_engine_host(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert launcher.run([], {**env_for(), "KVBAKE_ENV_FILE": str(tmp_path / "absent.env")}) == 2
    assert_one_line_naming(capsys.readouterr().err, f"KVBAKE_ENV_FILE {tmp_path / 'absent.env'}")
    assert launcher.run([], {**env_for(), "KVBAKE_ENV_FILE": str(env_file(tmp_path)), "DOCKER_HOST": ""}) == 2
    assert_one_line_naming(capsys.readouterr().err, "DOCKER_HOST")


def test_unknown_argument_is_a_usage_error(capsys: pytest.CaptureFixture) -> None:
    assert launcher.run(["--force"], env_for()) == 2
    assert capsys.readouterr().err.startswith("usage: kvbake-launch-vllm [--print | --dry-run]")


@pytest.mark.parametrize("flag", ["--print", "--dry-run"])
def test_print_shows_the_shell_quoted_command_and_touches_nothing(flag: str, tmp_path: Path, capsys: pytest.CaptureFixture,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher, "DockerClient", None)  # any engine call would fail
    env = {**env_for(preset_args=["--max-model-len", "8192", "--compilation-config", '{"mode": 3}']),
           "KVBAKE_ENV_FILE": str(env_file(tmp_path)), "DOCKER_HOST": ""}
    assert launcher.run([flag], env) == 0
    out = capsys.readouterr().out
    assert out.startswith("docker run --detach --name vllm-serve --network host --ipc host --gpus all ")
    assert "--compilation-config '{\"mode\": 3}' " in out and out.count("\n") == 1


# ---- KVBAKE_STOP and the adapter, against a fake engine ----

class FakeContainers:
    def __init__(self, present: set[str]) -> None:
        self.present, self.calls = present, []

    def exists(self, name: str) -> bool:
        return name in self.present

    def stop(self, name: str, time: int | None = None) -> None:
        self.calls.append(("stop", name, time))

    def remove(self, name: str, force: bool = False) -> None:
        self.calls.append(("remove", name, force))
        self.present.discard(name)


class FakeClient:
    def __init__(self, present: set[str] = frozenset(), refuse: str | None = None, hint: str = "") -> None:
        self.container, self.runs, self.refuse, self.hint = FakeContainers(set(present)), [], refuse, hint

    def run(self, image: str, command: list[str], **options) -> SimpleNamespace:
        if self.refuse:
            raise DockerException(["docker", "run"], 125, b"", f"docker: {self.refuse}\n\n{self.hint}\n".encode())
        self.runs.append((image, command, options))
        return SimpleNamespace(id="f00dfeed" * 8)


def test_stop_plan_and_print(capsys: pytest.CaptureFixture) -> None:
    assert core.plan({"KVBAKE_STOP": "1", "KVBAKE_CONTAINER": "vllm-serve"}) == core.StopServe("vllm-serve")
    assert launcher.run(["--print"], {"KVBAKE_STOP": "1", "KVBAKE_CONTAINER": "vllm-serve"}) == 0
    assert capsys.readouterr().out == "docker stop --time 30 vllm-serve\ndocker rm vllm-serve\n"
    assert isinstance(core.plan({**env_for(), "KVBAKE_STOP": "0"}), core.DockerRun)


def test_stop_removes_the_serve_and_is_fine_without_one() -> None:
    client = FakeClient({"vllm-serve"})
    assert launcher.carry_out(client, core.StopServe("vllm-serve"), "ssh://ops@spark-a") == \
        "kvbake-launch-vllm: stopped and removed vllm-serve on ssh://ops@spark-a"
    assert client.container.calls == [("stop", "vllm-serve", 30), ("remove", "vllm-serve", True)]
    assert launcher.carry_out(client, core.StopServe("vllm-serve"), "h") == "kvbake-launch-vllm: no container vllm-serve on h"
    assert client.runs == []


def test_start_replaces_the_old_container_with_a_new_one() -> None:
    client, step = FakeClient({"vllm-serve"}), run_of()
    assert launcher.carry_out(client, step, "ssh://ops@spark-a") == "kvbake-launch-vllm: started vllm-serve (f00dfeedf00d, main shape) on ssh://ops@spark-a"
    assert client.container.calls == [("stop", "vllm-serve", 30), ("remove", "vllm-serve", True)]
    assert client.runs == [(step.image, list(step.command), step.whales_options())]


@pytest.mark.parametrize("hint", ["See 'docker run --help'.", "Run 'docker run --help' for more information"])
def test_an_engine_refusal_is_one_line(hint: str, capsys: pytest.CaptureFixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    refusal = 'Error response from daemon: could not select device driver "" with capabilities: [[gpu]].'
    monkeypatch.setattr(launcher, "DockerClient", lambda host: FakeClient(refuse=refusal, hint=hint))
    assert launcher.run([], {**env_for(), "KVBAKE_ENV_FILE": str(env_file(tmp_path))}) == 1
    err = capsys.readouterr().err
    assert err.startswith("kvbake-launch-vllm: ") and err.count("\n") == 1
    assert all(field in err for field in ("vllm-serve", "ssh://ops@spark-a", refusal)) and hint not in err


def option_pairs(tokens: list[str]) -> set[tuple[str, ...]]:
    """docker run's options as (option, value) pairs, `--detach` alone; order does not matter to docker."""
    pairs, i = set(), 0
    while i < len(tokens):
        width = 1 if tokens[i] == "--detach" else 2
        pairs.add(tuple(tokens[i:i + width]))
        i += width
    return pairs


@pytest.mark.parametrize("gpus", ["all", "none"])
def test_python_on_whales_builds_the_printed_command(gpus: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The adapter's keyword arguments make the very docker command that --print shows (nothing is run)."""
    import python_on_whales.components.container.cli_wrapper as whales_cli

    def capture(command, **_):
        raise RuntimeError(command)

    monkeypatch.setattr(whales_cli, "run", capture)
    step = run_of(role="worker", GPUS=gpus, EXTRA_MOUNTS='["/srv/a:/opt/a"]', CONTAINER_ENV='{"X": "{node_address}"}')
    with pytest.raises(RuntimeError) as raised:
        launcher.DockerClient(host="ssh://ops@spark-b").run(step.image, list(step.command), **step.whales_options())
    built = [str(token) for token in raised.value.args[0]]
    assert built[1:5] == ["--host", "ssh://ops@spark-b", "container", "run"]
    image_at, printed = built.index(step.image), step.argv()
    assert built[image_at:] == printed[printed.index(step.image):]
    assert option_pairs(built[5:image_at]) == option_pairs(printed[2:printed.index(step.image)])


def test_success_prints_one_line(capsys: pytest.CaptureFixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hosts = []
    monkeypatch.setattr(launcher, "DockerClient", lambda host: hosts.append(host) or FakeClient())
    assert launcher.run([], {**env_for(role="worker"), "KVBAKE_ENV_FILE": str(env_file(tmp_path))}) == 0
    assert hosts == ["ssh://ops@spark-b"]
    assert capsys.readouterr().out == "kvbake-launch-vllm: started vllm-serve (f00dfeedf00d, main shape) on ssh://ops@spark-b\n"


# ---- the recorded parsers ----

@pytest.mark.parametrize("version", sorted(FIXTURES))
def test_the_fixture_says_what_it_is(version: str) -> None:
    fixture = FIXTURES[version]
    assert fixture["vllm_version"] == version and fixture["format"] == 1
    assert fixture["option_count"] == len(fixture["options"]) > 400
    assert fixture["parser"]["entrypoint"] == "python3 -m vllm.entrypoints.openai.api_server"
    assert fixture["serve_subcommand"]["differences"] == []
    assert fixture["recorded"]["command"] == f"python scripts/record_vllm_cli.py --version {version}"
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", fixture["recorded"]["date"])
    assert fixture["positionals"] == [{"arity": "optional", "dest": "model_tag"}]


def test_the_production_fixture_is_vllm_0_33_0_itself() -> None:
    recorded = PRODUCTION["recorded"]
    assert recorded["wheel"]["file"].startswith("vllm-0.33.0-")
    assert recorded["environment"] == {"VLLM_TARGET_DEVICE": "cpu"}
    assert PRODUCTION["parser"]["make_arg_parser"] == "vllm.entrypoints.common.cli_args.make_arg_parser"


@pytest.mark.parametrize("version", sorted(FIXTURES))
def test_the_launchers_own_options_exist_with_their_arity(version: str) -> None:
    options = FIXTURES[version]["options"]
    values = ("--model", "--served-model-name", "--host", "--port", "--tensor-parallel-size", "--max-model-len",
              "--nnodes", "--node-rank", "--master-addr", "--master-port")
    assert all(options[name]["takes_value"] for name in values)
    assert options["--served-model-name"]["arity"] == "one-or-more"
    assert options["--headless"] == {**options["--headless"], "action": "store_true", "takes_value": False, "sets": True}
    for short, long in core.ALIASES.items():
        assert options[short]["dest"] == options[long]["dest"]
    assert set(core.PER_NODE) <= set(options)


CASES = [(name, role, nnodes) for name in recorder.REPRESENTATIVE_PRESETS for role, nnodes in ROLES]


@pytest.mark.parametrize(("preset", "role", "nnodes"), CASES)
def test_representative_presets_are_accepted_by_vllm_0_33_0(preset: str, role: str, nnodes: int) -> None:
    step = run_of(preset_args=recorder.REPRESENTATIVE_PRESETS[preset], role=role, nnodes=nnodes)
    assert launcher_problems(step, PRODUCTION) == []


@pytest.mark.parametrize(("preset", "problem"), [
    ("flag-given-a-value", "stray value 'true'"),
    ("misspelt-option", "--max-model-length is not an option of vLLM 0.33.0"),
    ("value-outside-choices", "--dtype ['float17'] is not one of ['auto', 'bfloat16', 'float', 'float16', 'float32', 'half']"),
])
def test_the_checker_refuses_what_vllm_refuses(preset: str, problem: str) -> None:
    step = run_of(preset_args=recorder.REFUSED_PRESETS[preset])
    assert problem in launcher_problems(step, PRODUCTION)


@pytest.mark.parametrize(("argv", "problem"), [
    (["--trust-remote-code=true"], "--trust-remote-code is a flag and takes no value"),
    (["--max-model-len"], "--max-model-len needs a value"),
    (["--disable-prefix-caching", "false"], "stray value 'false'"),
])
def test_boolean_and_value_arity(argv: list[str], problem: str) -> None:
    assert fixture_problems(argv, PRODUCTION, 0) == [problem]


def test_boolean_flags_mean_what_the_presets_say() -> None:
    """Every boolean the representative presets and the launcher use is a flag that sets what its name says."""
    meant = {"--enable-prefix-caching": True, "--no-enable-prefix-caching": False, "--disable-prefix-caching": False,
             "--enable-chunked-prefill": True, "--trust-remote-code": True, "--enforce-eager": True,
             "--disable-log-stats": True, "--headless": True}
    options = PRODUCTION["options"]
    used = {token for args in recorder.REPRESENTATIVE_PRESETS.values() for token in args if token.startswith("--")}
    used |= set(run_of(role="worker").vllm_args)
    flags = {token for token in used if token in options and not options[token]["takes_value"]}
    assert flags <= set(meant)
    assert {name: options[name]["sets"] for name in meant} == meant
    assert options["--enable-prefix-caching"]["dest"] == options["--disable-prefix-caching"]["dest"] == "enable_prefix_caching"


def standin_presets() -> dict[str, list[str]]:
    manifest = load_manifest(ROOT / "examples" / "standin" / "manifest.yaml")
    return {name: settings_of_preset(manifest, choose_preset(manifest, name, allow_held=True, allow_untested=True,
                                                             reason="parser check"), None).argv()
            for name in manifest.presets}


def test_the_standin_presets_are_accepted_by_vllm_0_33_0() -> None:
    presets = standin_presets()
    assert set(presets) == {"control", "packing-327680", "longctx-524288", "longctx-1048576"}
    assert presets == recorder.manifest_presets(ROOT / "examples" / "standin" / "manifest.yaml")
    for name, args in presets.items():
        for role, nnodes in ROLES:
            step = core.plan(env_for(preset_args=args, role=role, nnodes=nnodes))
            assert launcher_problems(step, PRODUCTION) == [], (name, role, nnodes)
            assert step.vllm_args[step.vllm_args.index("--max-model-len") + 1] == args[1]


def test_the_multi_node_options_are_in_both_recorded_versions() -> None:
    for fixture in FIXTURES.values():
        for role, nnodes in ROLES:
            assert launcher_problems(run_of(role=role, nnodes=nnodes), fixture) == []


def test_a_hub_model_is_served_by_its_id_with_no_model_mount() -> None:
    env = {k: v for k, v in env_for().items() if k != "MODEL_DIR"}
    step = core.plan({**env, "MODEL": "deepseek-ai/DeepSeek-V4.1-Flash"})
    assert step.vllm_args[:2] == ("--model", "deepseek-ai/DeepSeek-V4.1-Flash")
    assert all(mount.target != "/models/served" for mount in step.mounts)
    worker = core.plan({**{k: v for k, v in env_for(role="worker").items() if k != "MODEL_DIR"}, "MODEL": "org/m"})
    assert worker.vllm_args[0] == "org/m"
    for bad, message in (({**env_for(), "MODEL": "org/m"}, "launcher.env sets both MODEL_DIR and MODEL"),
                         ({**env, "MODEL": "/abs/path"}, "MODEL='/abs/path' is not a Hugging Face model id")):
        with pytest.raises(core.LaunchInputError, match=re.escape(message)):
            core.plan(bad)


def test_the_ray_shape_gives_rays_backend_to_a_group_of_several_ranks_only() -> None:
    """vLLM on the CPU refuses Ray's executor: a serve of one rank on a Ray head runs as its preset says."""
    backend = ["--distributed-executor-backend", "ray"]
    two = core.plan(env_for(SHAPE="ray"))
    assert " ".join(backend) in " ".join(two.vllm_args)
    for env in (env_for(SHAPE="ray", TENSOR_PARALLEL_SIZE="1"),
                env_for(preset_args=("--max-model-len", "4096", "-tp", "1"), SHAPE="ray")):
        assert backend[0] not in core.plan(env).vllm_args
    one = core.plan(env_for(preset_args=("--max-model-len", "4096", "--distributed-executor-backend", "mp"), SHAPE="ray",
                            TENSOR_PARALLEL_SIZE="1"))
    assert core.option_values(one.vllm_args, backend[0]) == ["mp"], "the preset's own backend, once"
    with pytest.raises(core.LaunchInputError, match=re.escape("SHAPE=ray but the preset gives --distributed-executor-backend mp")):
        core.plan(env_for(preset_args=("--max-model-len", "4096", "--distributed-executor-backend", "mp", "-tp", "2"), SHAPE="ray",
                          TENSOR_PARALLEL_SIZE="1"))


def test_a_nodes_own_ray_start_options_follow_the_shared_ones_each_node_its_own() -> None:
    """run_cluster.sh's pair as init reads it: `--node-ip-address` on the head's `ray start` alone."""
    head_launch = json.dumps({"ray_start": ["--node-ip-address={node_address}"]})
    head = core.plan({**env_for(SHAPE="ray", KVBAKE_NODE_LAUNCH_JSON=head_launch), "KVBAKE_NODE_ADDRESS": "10.0.0.11"})
    assert head.cluster_command == ("ray", "start", "--block", "--head", "--port=6379", "--node-ip-address=10.0.0.11")
    worker = core.plan({**env_for(role="worker", SHAPE="ray", RAY_START_ARGS='["--num-cpus=2"]'), "KVBAKE_NODE_ADDRESS": "10.0.0.12"})
    assert worker.cluster_command == ("ray", "start", "--block", "--address=10.0.0.11:6379", "--num-cpus=2")
    for launch, message in (({"ray_start": ["--port=6380"]}, "KVBAKE_NODE_LAUNCH_JSON.ray_start gives --port=6380"),
                            ({"ray_start": "--num-cpus=2"}, "KVBAKE_NODE_LAUNCH_JSON.ray_start is not a list")):
        with pytest.raises(core.LaunchInputError, match=re.escape(message)):
            core.plan({**env_for(SHAPE="ray"), "KVBAKE_NODE_LAUNCH_JSON": json.dumps(launch)})
    with pytest.raises(core.LaunchInputError, match=re.escape("KVBAKE_NODE_LAUNCH_JSON.ray_start is set but SHAPE is main")):
        core.plan({**env_for(), "KVBAKE_NODE_LAUNCH_JSON": head_launch})


def test_ray_start_options_of_the_operators_own_follow_the_launchers_with_the_nodes_address() -> None:
    options = '["--object-store-memory=8000000000", "--node-ip-address={node_address}"]'
    head = core.plan({**env_for(SHAPE="ray", RAY_START_ARGS=options), "KVBAKE_NODE_ADDRESS": "10.0.0.11"})
    assert head.cluster_command == ("ray", "start", "--block", "--head", "--port=6379", "--object-store-memory=8000000000",
                                    "--node-ip-address=10.0.0.11")
    for bad, message in (({"RAY_START_ARGS": '["--head"]', "SHAPE": "ray"}, "RAY_START_ARGS gives --head"),
                         ({"RAY_START_ARGS": options, "SHAPE": "main"}, "RAY_START_ARGS is set but SHAPE is main"),
                         ({"RAY_START_ARGS": options, "SHAPE": "ray", "KVBAKE_NODE_ADDRESS": ""}, "uses {node_address} but KVBAKE_NODE_ADDRESS is empty")):
        with pytest.raises(core.LaunchInputError, match=re.escape(message)):
            core.plan({**env_for(), **bad})
