"""The pure core of the reference vLLM launcher: kvbake's and the operator's variables in, a checked docker plan out."""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kvbake.launcher.core.node_launch import (CODE_OVERRIDES, MODEL_MOUNT, RAY_OWN_OPTIONS, LaunchInputError, Mount, NodeLaunch,
                                         absolute_path, read_node_launch, read_ray_start_options, referenced_secret,
                                         refuse_over_source_root, refuse_protected_target, refuse_shadowing_target)

# The head serves the OpenAI API. A worker runs the serve subcommand through the module behind the `vllm` console
# script: in vLLM 0.32.0 and 0.33.0 only that entry acts on --headless (the api_server module parses it, then starts
# an API server anyway). Both build the same options (scripts/record_vllm_cli.py compares them).
HEAD_ENTRY = ("-m", "vllm.entrypoints.openai.api_server")
WORKER_ENTRY = ("-m", "vllm.entrypoints.cli.main", "serve")
ENTRYPOINT = "python3"
# The exec shape's container: a main process that only waits, so that vLLM can be started in it by docker exec.
CLUSTER_COMMAND = ("sleep", "infinity")
# `docker exec --detach` discards what the command prints: vLLM started that way writes to the container's main process
# output instead, which `docker logs` shows (the shell execs vLLM, so its process is vLLM's own). A user who cannot
# write there (the main process is another user's) keeps the engine's default.
MAIN_LOG_SCRIPT = 'if [ -w /proc/1/fd/1 ] && [ -w /proc/1/fd/2 ]; then exec "$@" >>/proc/1/fd/1 2>>/proc/1/fd/2; fi; exec "$@"'


def to_main_log(argv: Sequence[str]) -> list[str]:
    """A command line for `docker exec --detach` whose output reaches `docker logs` of its container."""
    return ["sh", "-c", MAIN_LOG_SCRIPT, "sh", *argv]
# The ray shape's container runs a Ray node (`ray start --block`): the head's vLLM, started in it by docker exec, places
# its tensor-parallel workers on the other nodes' Ray nodes as actors; a worker node runs no vLLM process of its own.
RAY_BACKEND = ("--distributed-executor-backend", "ray")
SHAPES = ("main", "exec", "ray")
# A tensor-parallel rank never restarts alone (it could not rejoin its peers): kvbake restarts the gang.
RESTART_POLICY = "no"
STOP_TIMEOUT_S = 30
DEFAULTS = {
    "GPUS": "all",
    "SHM_SIZE": "16g",
    "VLLM_HOST": "0.0.0.0",
    "VLLM_PORT": "8000",
    "MASTER_PORT": "29501",
    "RAY_PORT": "6379",
    "SOURCE_ROOT": "/usr/local/lib/python3.12/dist-packages",
    "SHAPE": "main",
}
GPU_CHOICES = ("all", "none")
# Short spellings vLLM 0.33.0 gives the options this launcher writes itself.
ALIASES = {"-tp": "--tensor-parallel-size", "-n": "--nnodes", "-r": "--node-rank"}
PER_NODE = ("--model", "--nnodes", "--node-rank", "--master-addr", "--headless")
CONTAINER_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]+$")
SHM_SIZE = re.compile(r"^[1-9][0-9]*[bkmg]?$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
NO_SPACE = re.compile(r"^\S+$")
LABEL_PREFIX = "kvbake.launcher."
# What a fix suggests for each JSON-valued variable.
EXAMPLES = {"KVBAKE_LAUNCHER_ARGS_JSON": '["--max-model-len", "163840"]', "EXTRA_MOUNTS": '["/srv/models/tokenizers:/opt/tokenizers"]',
            "DRAFTER_ARGS": '["--<drafter-option>", "{url}"]', "CONTAINER_ENV": '{"VLLM_HOST_IP": "{node_address}"}',
            "KVBAKE_NODE_LAUNCH_JSON": '{"env": {"NCCL_SOCKET_IFNAME": "enp1s0f0np0"}}', "SECRET_ENV": '["HF_TOKEN"]',
            "RAY_START_ARGS": '["--object-store-memory=8000000000", "--node-ip-address={node_address}"]'}


@dataclass(frozen=True)
class Topology:
    """Where this rank stands: its role and rank among how many nodes, and the head's address."""

    role: str
    node_rank: int
    nnodes: int
    head_address: str


@dataclass(frozen=True)
class LaunchSettings:
    """Every input, checked: what kvbake passed and what the operator configured, defaults filled in."""

    image: str
    container: str
    env_file: str
    preset: str
    node: str
    topology: Topology
    preset_args: tuple[str, ...]
    model_dir: str
    served_model_name: str
    host: str
    port: int
    tensor_parallel_size: int
    master_port: int
    gpus: str
    shm_size: str
    extra_mounts: tuple[Mount, ...]
    container_env: Mapping[str, str]
    drafter_args: tuple[str, ...]
    shape: str = "main"
    node_launch: NodeLaunch = field(default_factory=NodeLaunch)
    ray_port: int = int(DEFAULTS["RAY_PORT"])
    secret_env: tuple[str, ...] = ()
    hub_model: str = ""  # MODEL: a Hugging Face id vLLM fetches, in place of a mounted MODEL_DIR
    ray_start: tuple[str, ...] = ()  # RAY_START_ARGS, then the node's launch.ray_start, `{node_address}` and secrets filled in
    ray_withheld: Mapping[str, str] = field(default_factory=dict)  # each of those holding a secret -> as written, by name


@dataclass(frozen=True)
class DockerRun:
    """The serving container to create: its docker run options, the entry module and vLLM's arguments. In the `main`
    shape vLLM is the container's main process; in the `exec` shape the container only waits (`sleep infinity`) and
    vLLM is started in it by `docker exec --detach` with the switches' env file and the same arguments."""

    image: str
    name: str
    entry: tuple[str, ...]
    vllm_args: tuple[str, ...]
    env_file: str
    gpus: str | None
    shm_size: str
    mounts: tuple[Mount, ...]
    envs: Mapping[str, str]
    labels: Mapping[str, str]
    shape: str = "main"
    devices: tuple[str, ...] = ()
    cap_add: tuple[str, ...] = ()
    ulimits: tuple[str, ...] = ()
    cluster_command: tuple[str, ...] = CLUSTER_COMMAND
    starts_vllm: bool = True
    secret_env: tuple[str, ...] = ()  # passed by name: docker reads each value from the launcher's own environment
    withheld: Mapping[str, str] = field(default_factory=dict)  # a command token holding a secret -> what --print shows

    @property
    def command(self) -> tuple[str, ...]:
        """What follows the entrypoint (python3): the entry module, then vLLM's arguments."""
        return (*self.entry, *self.vllm_args)

    @property
    def execs(self) -> bool:
        """Whether vLLM is started by docker exec in the container (exec shape; the head of the ray shape)."""
        return self.shape != "main" and self.starts_vllm

    @property
    def container_has_switches(self) -> bool:
        """Whether the container itself gets the env file: vLLM as main process, or a Ray node (the actors it starts for
        the head's vLLM inherit its environment); in the exec shape only the exec'd vLLM gets it."""
        return self.shape != "exec"

    def container_command(self) -> tuple[str, tuple[str, ...]]:
        """The container's entrypoint and command: vLLM itself, or the cluster main process (waiting, or a Ray node)."""
        if self.shape != "main":
            return self.cluster_command[0], self.cluster_command[1:]
        return ENTRYPOINT, self.command

    def run_options(self) -> list[str]:
        """docker run's options, in the order --print shows them."""
        options = ["--detach", "--name", self.name, "--network", "host", "--ipc", "host"]
        options += ["--gpus", self.gpus] if self.gpus else []
        options += ["--shm-size", self.shm_size, "--restart", RESTART_POLICY, "--pull", "never"]
        options += ["--env-file", self.env_file] if self.container_has_switches else []
        for name, value in self.envs.items():
            options += ["--env", f"{name}={value}"]
        for name in self.secret_env:
            options += ["--env", name]
        for mount in self.mounts:
            options += ["--mount", ",".join(mount.spec())]
        for flag, values in (("--device", self.devices), ("--cap-add", self.cap_add), ("--ulimit", self.ulimits)):
            for value in values:
                options += [flag, value]
        for name, value in self.labels.items():
            options += ["--label", f"{name}={value}"]
        return options

    def argv(self) -> list[str]:
        """The equivalent `docker run` command line, for review (`--print`)."""
        entrypoint, command = self.container_command()
        shown = [self.withheld.get(token, token) for token in command]  # a secret by its variable's name, never its value
        return ["docker", "run", *self.run_options(), "--entrypoint", entrypoint, self.image, *shown]

    def exec_argv(self) -> list[str]:
        """The exec shape's `docker exec` command line that starts vLLM in the waiting container."""
        return ["docker", "exec", "--detach", "--env-file", self.env_file, self.name, *to_main_log([ENTRYPOINT, *self.command])]

    def argv_lines(self) -> list[list[str]]:
        """Every engine call, in order (what --print shows, one per line)."""
        return [self.argv(), self.exec_argv()] if self.execs else [self.argv()]

    def whales_options(self) -> dict:
        """docker run's options as python-on-whales' DockerClient.run keyword arguments."""
        return {"name": self.name, "detach": True, "networks": ["host"], "ipc": "host", "gpus": self.gpus,
                "shm_size": self.shm_size, "restart": RESTART_POLICY, "pull": "never",
                "env_files": [self.env_file] if self.container_has_switches else [], "envs": dict(self.envs),
                "mounts": [m.spec() for m in self.mounts], "devices": list(self.devices), "cap_add": list(self.cap_add),
                "ulimit": list(self.ulimits), "labels": dict(self.labels), "entrypoint": self.container_command()[0]}

    def whales_exec(self) -> dict:
        """The exec shape's docker exec as python-on-whales' container.execute keyword arguments."""
        return {"command": to_main_log([ENTRYPOINT, *self.command]), "detach": True, "env_files": [self.env_file]}


@dataclass(frozen=True)
class StopServe:
    """KVBAKE_STOP=1: stop and remove the serving container."""

    name: str

    def argv_lines(self) -> list[list[str]]:
        return [["docker", "stop", "--time", str(STOP_TIMEOUT_S), self.name], ["docker", "rm", self.name]]


def shell_line(argv: Sequence[str]) -> str:
    return shlex.join(argv)


# ---- reading and checking the variables ----

def _required(env: Mapping[str, str], name: str, fix: str) -> str:
    value = env.get(name)
    if not value:
        raise LaunchInputError(f"{name} is not set", fix)
    return value


def _one_word(name: str, value: str, fix: str) -> str:
    if not NO_SPACE.match(value):
        raise LaunchInputError(f"{name}={value!r} contains whitespace", fix)
    return value


def _integer(name: str, text: str, minimum: int, maximum: int, fix: str) -> int:
    if not re.fullmatch(r"[0-9]+", text):
        raise LaunchInputError(f"{name}={text!r} is not an integer", fix)
    value = int(text)
    if not minimum <= value <= maximum:
        raise LaunchInputError(f"{name}={value} is outside {minimum}..{maximum}", fix)
    return value


def _port(env: Mapping[str, str], name: str) -> int:
    return _integer(name, env.get(name) or DEFAULTS[name], 1, 65535, f"set {name} to a TCP port number (1..65535) in launcher.env")


def _json_value(env: Mapping[str, str], name: str, kind: type, what: str):
    try:
        value = json.loads(env[name])
        if isinstance(value, kind):
            return value
    except ValueError:
        pass
    raise LaunchInputError(f"{name} is not {what}", f"set {name} to {what}, e.g. {EXAMPLES[name]}")


def _string_list(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    what = "a JSON array of strings"
    value = _json_value(env, name, list, what)
    if not all(isinstance(item, str) for item in value):
        raise LaunchInputError(f"{name} is not {what}", f"set {name} to {what}, e.g. {EXAMPLES[name]}")
    return tuple(value)


def read_topology(env: Mapping[str, str]) -> Topology:
    """Role, rank, node count and head address; the head is rank 0 and every other rank is a worker."""
    fix = "run the launcher through kvbake deploy (it sets the KVBAKE_* variables), or set them as docs/launcher.md lists"
    role = _required(env, "KVBAKE_ROLE", fix)
    if role not in ("head", "worker"):
        raise LaunchInputError(f"KVBAKE_ROLE={role!r} is neither head nor worker", fix)
    nnodes = _integer("KVBAKE_NNODES", env.get("KVBAKE_NNODES", ""), 1, 1024, fix)
    rank = _integer("KVBAKE_NODE_RANK", env.get("KVBAKE_NODE_RANK", ""), 0, nnodes - 1, fix)
    if (role == "head") != (rank == 0):
        raise LaunchInputError(f"KVBAKE_ROLE is {role} but KVBAKE_NODE_RANK is {rank} (the head is rank 0, workers are not)",
                               "give exactly one node role: head in the deployment file")
    head = env.get("KVBAKE_HEAD_ADDRESS", "")
    if nnodes > 1 and not head:
        raise LaunchInputError(f"KVBAKE_HEAD_ADDRESS is empty with {nnodes} nodes",
                               "give the head node an address: in the deployment file (the IP the workers reach it on)")
    if head:
        _one_word("KVBAKE_HEAD_ADDRESS", head, "give the head node an address without whitespace in the deployment file")
    return Topology(role, rank, nnodes, head)


def read_preset_args(env: Mapping[str, str]) -> tuple[str, ...]:
    """The preset's arguments, `--max-model-len N` first, agreeing with KVBAKE_MAX_MODEL_LEN; no per-node option."""
    fix = "run the launcher through kvbake deploy, which passes the preset's arguments as a JSON array"
    if not env.get("KVBAKE_LAUNCHER_ARGS_JSON"):
        raise LaunchInputError("KVBAKE_LAUNCHER_ARGS_JSON is not set", fix)
    args = _string_list(env, "KVBAKE_LAUNCHER_ARGS_JSON")
    length = _integer("KVBAKE_MAX_MODEL_LEN", env.get("KVBAKE_MAX_MODEL_LEN", ""), 1, 2**40, fix)
    if list(args[:2]) != ["--max-model-len", str(length)]:
        raise LaunchInputError(f"KVBAKE_LAUNCHER_ARGS_JSON does not start with --max-model-len {length} (KVBAKE_MAX_MODEL_LEN)", fix)
    clashing = sorted(given_options(args) & set(PER_NODE))
    if clashing:
        raise LaunchInputError(f"preset {env.get('KVBAKE_PRESET', '?')} gives {', '.join(clashing)} in launcher_args, which differ per node",
                               "remove them from the preset's launcher_args; the launcher sets them for every rank")
    return args


HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


def read_model_dir(env: Mapping[str, str]) -> str:
    """MODEL_DIR, the model folder on the nodes (mounted read-only), or "" when MODEL names a model on the Hugging Face
    hub instead (vLLM fetches it into its cache: mount that with the node's launch.cache_mounts); exactly one of them."""
    fix = ("set MODEL_DIR in launcher.env to the model folder's absolute path on the nodes (the same on every node), or MODEL "
           "to the model's Hugging Face id")
    if env.get("MODEL_DIR") and env.get("MODEL"):
        raise LaunchInputError("launcher.env sets both MODEL_DIR and MODEL", "keep MODEL_DIR for a folder on the nodes, or MODEL for a hub id")
    if env.get("MODEL"):
        return ""
    return absolute_path("MODEL_DIR", _required(env, "MODEL_DIR", fix), fix)


def read_hub_model(env: Mapping[str, str]) -> str:
    model = env.get("MODEL", "")
    if model and not HUB_ID.match(model):
        raise LaunchInputError(f"MODEL={model!r} is not a Hugging Face model id", "set MODEL to ORG/NAME, or MODEL_DIR to a folder on the nodes")
    return model


def read_gpus(env: Mapping[str, str]) -> str:
    gpus = env.get("GPUS") or DEFAULTS["GPUS"]
    if gpus not in GPU_CHOICES:
        raise LaunchInputError(f"GPUS={gpus!r} is not one of {', '.join(GPU_CHOICES)}",
                               "set GPUS=all (every GPU of the node) or GPUS=none (CPU-only test hosts) in launcher.env")
    return gpus


def read_shm_size(env: Mapping[str, str]) -> str:
    size = env.get("SHM_SIZE") or DEFAULTS["SHM_SIZE"]
    if not SHM_SIZE.match(size):
        raise LaunchInputError(f"SHM_SIZE={size!r} is not a size", "set SHM_SIZE to a number with an optional b, k, m or g suffix, e.g. 16g")
    return size


def read_source_root(env: Mapping[str, str]) -> str:
    fix = "set SOURCE_ROOT to the manifest's base.source_root (an absolute path)"
    return absolute_path("SOURCE_ROOT", env.get("SOURCE_ROOT") or DEFAULTS["SOURCE_ROOT"], fix)


def read_extra_mounts(env: Mapping[str, str], source_root: str) -> tuple[Mount, ...]:
    """EXTRA_MOUNTS: ["/node/path:/container/path", ...], each read-only, never over the model or the Python sources."""
    if not env.get("EXTRA_MOUNTS"):
        return ()
    fix = 'set EXTRA_MOUNTS to a JSON array of "/node/path:/container/path" strings, both absolute'
    mounts, seen = [], {MODEL_MOUNT}
    for entry in _string_list(env, "EXTRA_MOUNTS"):
        source, colon, target = entry.partition(":")
        if not colon:
            raise LaunchInputError(f"EXTRA_MOUNTS entry {entry!r} is not SOURCE:TARGET", fix)
        mount = Mount(absolute_path("EXTRA_MOUNTS source", source, fix), absolute_path("EXTRA_MOUNTS target", target, fix))
        refuse_protected_target("EXTRA_MOUNTS", mount.target, source_root, seen)
        refuse_shadowing_target("EXTRA_MOUNTS", mount.target, env.get("KVBAKE_WORKDIR", ""))
        seen.add(mount.target)
        mounts.append(mount)
    return tuple(mounts)


def read_container_env(env: Mapping[str, str], topology: Topology, node_address: str) -> dict[str, str]:
    """CONTAINER_ENV: extra container variables (never switches, never a code-selecting one); `{node_address}` and
    `{head_address}` in a value become this node's and the head's address."""
    if not env.get("CONTAINER_ENV"):
        return {}
    value = _json_value(env, "CONTAINER_ENV", dict, "a JSON object of NAME: value strings")
    result = {}
    for name, text in value.items():
        if not ENV_NAME.match(name) or not isinstance(text, str):
            raise LaunchInputError(f"CONTAINER_ENV entry {name!r} is not NAME: \"value\"",
                                   f"set CONTAINER_ENV to a JSON object of NAME: value strings, e.g. {EXAMPLES['CONTAINER_ENV']}")
        if name in CODE_OVERRIDES:
            raise LaunchInputError(f"CONTAINER_ENV sets {name}, which selects other code than the image's",
                                   "remove it; kvbake's verify-running refuses a serve that sets it")
        if "{node_address}" in text and not node_address:
            raise LaunchInputError(f"CONTAINER_ENV {name} uses {{node_address}} but KVBAKE_NODE_ADDRESS is empty",
                                   "give every node an address: in the deployment file")
        result[name] = text.replace("{node_address}", node_address).replace("{head_address}", topology.head_address)
    return result


def read_secret_env(env: Mapping[str, str], container_env: Mapping[str, str]) -> tuple[str, ...]:
    """SECRET_ENV: the names of the serve's secret variables (tokens, API keys), whose values the container takes from
    the environment the launcher runs in (the operator's, through kvbake deploy); each must be set there."""
    if not env.get("SECRET_ENV"):
        return ()
    names = _string_list(env, "SECRET_ENV")
    for name in names:
        if not ENV_NAME.match(name):
            raise LaunchInputError(f"SECRET_ENV entry {name!r} is not a variable name", f"set SECRET_ENV to a JSON array of names, e.g. {EXAMPLES['SECRET_ENV']}")
        if name in container_env:
            raise LaunchInputError(f"SECRET_ENV and CONTAINER_ENV both give {name}", "give a secret in SECRET_ENV only, by name")
        if not env.get(name):
            raise LaunchInputError(f"SECRET_ENV names {name}, which is not set where the launcher runs",
                                   f"export {name} in the environment kvbake deploy runs in (kvbake records secrets by name only)")
    return tuple(sorted(set(names)))


def read_drafter_args(env: Mapping[str, str], preset_args: Sequence[str]) -> tuple[str, ...]:
    """The remote drafter's arguments from the operator's DRAFTER_ARGS template, `{url}` and `{max_positions}` filled
    in (plain text replacement, so JSON braces in a template stay as they are); none without a drafter URL."""
    url = env.get("KVBAKE_DRAFTER_URL")
    if not url:
        return ()
    if not env.get("DRAFTER_ARGS"):
        raise LaunchInputError(f"the deployment names a remote drafter ({url}) but DRAFTER_ARGS is not set",
                               "set DRAFTER_ARGS in launcher.env to the image's drafter arguments as a JSON array with {url} "
                               f"and {{max_positions}}, e.g. {EXAMPLES['DRAFTER_ARGS']}, or remove drafter: from the deployment file")
    template = _string_list(env, "DRAFTER_ARGS")
    if not any("{url}" in item for item in template):
        raise LaunchInputError("DRAFTER_ARGS does not use {url}", "put {url} where the image's drafter option takes the drafter's address")
    positions = env.get("KVBAKE_DRAFTER_MAX_POSITIONS", "")
    if any("{max_positions}" in item for item in template) and not positions:
        raise LaunchInputError("DRAFTER_ARGS uses {max_positions} but the deployment's drafter has no max_positions",
                               "set drafter.max_positions in the deployment file, or drop {max_positions} from DRAFTER_ARGS")
    args = tuple(item.replace("{url}", url).replace("{max_positions}", positions) for item in template)
    clashing = sorted(given_options(args) & given_options(preset_args))
    if clashing:
        raise LaunchInputError(f"DRAFTER_ARGS and the preset both give {', '.join(clashing)}", "give each option in one place only")
    return args


def option_values(args: Sequence[str], wanted: str) -> list[str]:
    """Every value the arguments give one option, in any spelling vLLM accepts (`--opt V`, `--opt=V`, `--o_pt V`)."""
    values = []
    for at, token in enumerate(args):
        if option_name(token) != wanted:
            continue
        if "=" in token:
            values.append(token.partition("=")[2])
        elif at + 1 < len(args):
            values.append(args[at + 1])
    return values


def group_size(preset_args: Sequence[str], tensor_parallel_size: int) -> int:
    """The serve's tensor-parallel size: the preset's own `--tensor-parallel-size` (or `-tp`) when it gives one, else
    the launcher's."""
    given = option_values(preset_args, "--tensor-parallel-size")
    return int(given[-1]) if given and given[-1].isdigit() else tensor_parallel_size


def refuse_other_backend(shape: str, preset_args: Sequence[str], tensor_parallel_size: int) -> None:
    """The ray shape serves a group of several ranks through Ray: a preset that picks another distributed executor
    would serve on one node. A group of one rank has no worker for Ray to place: its backend is the preset's."""
    others = [value for value in option_values(preset_args, RAY_BACKEND[0]) if value != RAY_BACKEND[1]]
    if shape == "ray" and others and group_size(preset_args, tensor_parallel_size) > 1:
        raise LaunchInputError(f"SHAPE=ray but the preset gives {RAY_BACKEND[0]} {others[0]}",
                               f"drop {RAY_BACKEND[0]} from the preset's launcher_args (the ray shape sets it to ray), or use SHAPE=main")


def read_shape(env: Mapping[str, str]) -> str:
    shape = env.get("SHAPE") or DEFAULTS["SHAPE"]
    if shape not in SHAPES:
        raise LaunchInputError(f"SHAPE={shape!r} is not one of {', '.join(SHAPES)}",
                               "set SHAPE=main (vLLM is the container's main process), SHAPE=exec (the container waits and "
                               "vLLM is started in it by docker exec) or SHAPE=ray (the container runs a Ray node and the head's "
                               "vLLM is started in it by docker exec) in launcher.env")
    return shape


def read_node_settings(env: Mapping[str, str], source_root: str, extra_mounts: Sequence[Mount],
                       container_env: Mapping[str, str]) -> NodeLaunch:
    """KVBAKE_NODE_LAUNCH_JSON: this node's own settings from the deployment file (none when unset), checked again
    here: a writable cache may not cover the Python sources nor another mount, and a variable is given in one place."""
    if not env.get("KVBAKE_NODE_LAUNCH_JSON"):
        return NodeLaunch()
    node = read_node_launch(_json_value(env, "KVBAKE_NODE_LAUNCH_JSON", dict, "a JSON object"), "KVBAKE_NODE_LAUNCH_JSON")
    refuse_over_source_root(node, source_root, "KVBAKE_NODE_LAUNCH_JSON")
    for mount in node.cache_mounts:
        refuse_protected_target("KVBAKE_NODE_LAUNCH_JSON.cache_mounts", mount.target, None, [m.target for m in extra_mounts])
        refuse_shadowing_target("KVBAKE_NODE_LAUNCH_JSON.cache_mounts", mount.target, env.get("KVBAKE_WORKDIR", ""))
    both = sorted(set(node.env) & set(container_env))
    if both:
        raise LaunchInputError(f"CONTAINER_ENV and the node's launch.env both set {', '.join(both)}", "give each variable in one place only")
    return node


def refuse_switch_names(step: "DockerRun", switch_names: Sequence[str]) -> None:
    """A container variable may not be a switch the env file sets: the preset's switch set is the same on every rank."""
    given = sorted(set(step.envs) & set(switch_names))
    if given:
        raise LaunchInputError(f"{', '.join(given)} is set by the node's launch.env or CONTAINER_ENV and is a switch of ranks.env",
                               "remove it there; switches come from the preset, identical on every rank")


def read_settings(env: Mapping[str, str]) -> LaunchSettings:
    """Every variable, checked in the order an operator would fix them."""
    fix = "run the launcher through kvbake deploy (it sets the KVBAKE_* variables), or set them as docs/launcher.md lists"
    image = _one_word("KVBAKE_IMAGE", _required(env, "KVBAKE_IMAGE", fix), fix)
    container = read_container_name(env)
    env_file = _required(env, "KVBAKE_ENV_FILE", fix)
    topology = read_topology(env)
    preset_args = read_preset_args(env)
    model_dir, hub_model = read_model_dir(env), read_hub_model(env)
    served = _one_word("SERVED_MODEL_NAME", env.get("SERVED_MODEL_NAME") or hub_model or posixpath.basename(model_dir),
                       "set SERVED_MODEL_NAME to one name without whitespace")
    host = _one_word("VLLM_HOST", env.get("VLLM_HOST") or DEFAULTS["VLLM_HOST"], "set VLLM_HOST to the address the API listens on, e.g. 0.0.0.0")
    shape = read_shape(env)
    tensor_parallel_size = read_tensor_parallel_size(env, topology.nnodes)
    refuse_other_backend(shape, preset_args, tensor_parallel_size)
    port, master_port, ray_port = read_ports(env, shape)
    source_root = read_source_root(env)
    extra_mounts = read_extra_mounts(env, source_root)
    container_env = read_container_env(env, topology, env.get("KVBAKE_NODE_ADDRESS", ""))
    node = read_node_settings(env, source_root, extra_mounts, container_env)
    return LaunchSettings(
        image=image, container=container, env_file=env_file, preset=env.get("KVBAKE_PRESET", ""), node=env.get("KVBAKE_NODE", ""),
        topology=topology, preset_args=preset_args, model_dir=model_dir, hub_model=hub_model, served_model_name=served, host=host, port=port,
        tensor_parallel_size=tensor_parallel_size, master_port=master_port, gpus=read_gpus(env),
        shm_size=read_shm_size(env), extra_mounts=extra_mounts, container_env=container_env,
        drafter_args=read_drafter_args(env, preset_args), shape=shape,
        node_launch=node, ray_port=ray_port, secret_env=read_secret_env(env, container_env),
        **ray_start_settings(read_ray_start(env, shape, node, env.get("KVBAKE_NODE_ADDRESS", "")), env))


def read_ray_start(env: Mapping[str, str], shape: str, node: NodeLaunch, node_address: str) -> tuple[str, ...]:
    """The Ray node's own `ray start` options beyond the launcher's (ray shape): RAY_START_ARGS, which every node shares,
    then this node's launch.ray_start; `{node_address}` replaced by this node's address. A `{secret:NAME}` value stays
    as written, but NAME must be set where the launcher runs."""
    shared = read_ray_start_options(_string_list(env, "RAY_START_ARGS"), "RAY_START_ARGS") if env.get("RAY_START_ARGS") else ()
    for name, options in (("RAY_START_ARGS", shared), ("KVBAKE_NODE_LAUNCH_JSON.ray_start", node.ray_start)):
        if options and shape != "ray":
            raise LaunchInputError(f"{name} is set but SHAPE is {shape}", f"set SHAPE=ray, or drop {name}")
        for option in options:
            if "{node_address}" in option and not node_address:
                raise LaunchInputError(f"{name} {option} uses {{node_address}} but KVBAKE_NODE_ADDRESS is empty",
                                       "give every node an address: in the deployment file")
            require_secret(name, option, env)
    return tuple(option.replace("{node_address}", node_address) for option in (*shared, *node.ray_start))


def require_secret(where: str, option: str, env: Mapping[str, str]) -> None:
    """A `--name={secret:NAME}` option needs NAME set (not empty) in the environment the launcher runs in (kvbake deploy's)."""
    variable = referenced_secret(option)
    if variable is not None and not env.get(variable):
        raise LaunchInputError(f"{where} gives {option.partition('=')[0]} from {variable}, which is not set where the launcher runs",
                               f"export {variable} in the environment kvbake deploy runs in (kvbake records the secret by name only)")


def ray_start_settings(written: Sequence[str], env: Mapping[str, str]) -> dict:
    """LaunchSettings' ray_start, each `{secret:NAME}` value replaced by NAME's value, and ray_withheld: each option
    that holds a secret, with the form --print shows (as written, by name)."""
    filled = [(with_secret(option, env), option) for option in written]
    return {"ray_start": tuple(option for option, _ in filled),
            "ray_withheld": {option: given for option, given in filled if referenced_secret(given)}}


def with_secret(option: str, env: Mapping[str, str]) -> str:
    """An option whose value is `{secret:NAME}` with NAME's value from `env`; any other option as it is."""
    variable = referenced_secret(option)
    return option if variable is None else f"{option.partition('=')[0]}={env[variable]}"


def read_ports(env: Mapping[str, str], shape: str) -> tuple[int, int, int]:
    """The API's port, the multi-node rendezvous port and (ray shape) the Ray head's port; on the host network they
    must differ."""
    ports = {name: _port(env, name) for name in ("VLLM_PORT", "MASTER_PORT", "RAY_PORT")}
    pairs = [("VLLM_PORT", "MASTER_PORT", "give the API and the multi-node rendezvous different ports")]
    if shape == "ray":
        pairs += [(other, "RAY_PORT", "give the Ray head a port of its own (RAY_PORT in launcher.env)") for other in ("VLLM_PORT", "MASTER_PORT")]
    for first, second, fix in pairs:
        if ports[first] == ports[second]:
            raise LaunchInputError(f"{first} and {second} are both {ports[first]}", fix)
    return ports["VLLM_PORT"], ports["MASTER_PORT"], ports["RAY_PORT"]


def read_tensor_parallel_size(env: Mapping[str, str], nnodes: int) -> int:
    fix = "set TENSOR_PARALLEL_SIZE in launcher.env to a positive integer (default: the number of nodes)"
    return _integer("TENSOR_PARALLEL_SIZE", env.get("TENSOR_PARALLEL_SIZE") or str(nnodes), 1, 4096, fix)


def read_container_name(env: Mapping[str, str]) -> str:
    fix = "set launcher.container in the deployment file to a docker container name ([a-zA-Z0-9][a-zA-Z0-9_.-]+)"
    name = _required(env, "KVBAKE_CONTAINER", fix)
    if not CONTAINER_NAME.match(name):
        raise LaunchInputError(f"KVBAKE_CONTAINER={name!r} is not a container name", fix)
    return name


def engine_host(env: Mapping[str, str]) -> str:
    """The node's engine; required, so that a launcher run by hand never starts a serve on the wrong engine."""
    return _required(env, "DOCKER_HOST", "set DOCKER_HOST to the node's engine (kvbake deploy sets it per node), e.g. ssh://ops@spark-a")


def wants_stop(env: Mapping[str, str]) -> bool:
    flag = env.get("KVBAKE_STOP", "")
    if flag not in ("", "0", "1"):
        raise LaunchInputError(f"KVBAKE_STOP={flag!r} is neither 1 nor 0", "set KVBAKE_STOP=1 to stop and remove the serve, or leave it unset")
    return flag == "1"


# ---- building the plan ----

def option_name(token: str) -> str | None:
    """The option a command-line token names, spelt as vLLM's parser registers it; None for a value."""
    if not token.startswith("-") or re.fullmatch(r"-[0-9.]+", token):
        return None
    name = token.partition("=")[0]
    if name.startswith("--"):
        name = "--" + name[2:].partition(".")[0].replace("_", "-")
    return ALIASES.get(name, name)


def given_options(args: Sequence[str]) -> set[str]:
    return {name for token in args if (name := option_name(token))}


def own_options(s: LaunchSettings) -> list[str]:
    """The model (`vllm serve` takes it as its positional argument), then the launcher's options that the preset does
    not give itself (the preset wins)."""
    served = s.hub_model or MODEL_MOUNT
    model = [served] if s.topology.role == "worker" else ["--model", served]
    wanted = [("--served-model-name", s.served_model_name), ("--host", s.host), ("--port", str(s.port)),
              ("--tensor-parallel-size", str(s.tensor_parallel_size))]
    if s.shape == "ray" and group_size(s.preset_args, s.tensor_parallel_size) > 1:
        wanted.append(RAY_BACKEND)  # a group of one rank runs on the head alone: nothing for Ray to place
    given = given_options(s.preset_args)
    return model + [item for option, value in wanted if option not in given for item in (option, value)]


def multi_node_options(s: LaunchSettings) -> list[str]:
    """vLLM's multi-node options for one tensor-parallel group across KVBAKE_NNODES nodes; none on a single node."""
    t = s.topology
    if t.nnodes == 1 or s.shape == "ray":  # Ray places the other nodes' workers itself
        return []
    options = ["--nnodes", str(t.nnodes), "--node-rank", str(t.node_rank), "--master-addr", t.head_address]
    if "--master-port" not in given_options(s.preset_args):
        options += ["--master-port", str(s.master_port)]
    return options + (["--headless"] if t.role == "worker" else [])


def vllm_args(s: LaunchSettings) -> tuple[str, ...]:
    """vLLM's arguments: the launcher's own options (model, served name, host, port, tensor-parallel size), then the
    preset's exactly as kvbake passes them (`--max-model-len N` first), then the remote drafter's, then the multi-node
    options. Nothing is repeated: when the preset gives `--served-model-name`, `--host`, `--port`,
    `--tensor-parallel-size` or `--master-port`, in any spelling vLLM accepts (`--port=N`, `--tensor_parallel_size`,
    `-tp`), the preset wins and the launcher leaves its own out. The per-node options (`--model`, `--nnodes`,
    `--node-rank`, `--master-addr`, `--headless`) are the launcher's alone; read_preset_args refuses a preset that
    gives one, since a preset is the same on every rank."""
    return (*own_options(s), *s.preset_args, *s.drafter_args, *multi_node_options(s))


def ray_node_command(s: LaunchSettings) -> tuple[str, ...]:
    """The ray shape's main process: the head's Ray node on RAY_PORT, or a worker's joining it."""
    if s.topology.role == "head":
        return ("ray", "start", "--block", "--head", f"--port={s.ray_port}", *s.ray_start)
    return ("ray", "start", "--block", f"--address={s.topology.head_address}:{s.ray_port}", *s.ray_start)


def docker_run(s: LaunchSettings) -> DockerRun:
    """The plan for one rank: the operator's settings, then the node's own (its shm_size wins over SHM_SIZE). In the
    ray shape a worker's container is its Ray node alone."""
    node = s.node_launch
    labels = {LABEL_PREFIX + "preset": s.preset, LABEL_PREFIX + "node": s.node, LABEL_PREFIX + "role": s.topology.role,
              LABEL_PREFIX + "shape": s.shape}
    entry = WORKER_ENTRY if s.topology.role == "worker" else HEAD_ENTRY
    return DockerRun(image=s.image, name=s.container, entry=entry, vllm_args=vllm_args(s), env_file=s.env_file,
                     gpus=None if s.gpus == "none" else s.gpus, shm_size=node.shm_size or s.shm_size,
                     mounts=(*((Mount(s.model_dir, MODEL_MOUNT),) if s.model_dir else ()), *s.extra_mounts, *node.cache_mounts),
                     envs={**s.container_env, **node.env}, labels=labels, shape=s.shape, devices=node.devices,
                     cap_add=node.cap_add, ulimits=tuple(node.ulimit_options()),
                     cluster_command=ray_node_command(s) if s.shape == "ray" else CLUSTER_COMMAND,
                     starts_vllm=s.shape != "ray" or s.topology.role == "head", secret_env=s.secret_env,
                     withheld=dict(s.ray_withheld) if s.shape == "ray" else {})


def plan(env: Mapping[str, str]) -> DockerRun | StopServe:
    """What the launcher does for these variables: create the serve, or (KVBAKE_STOP=1) stop it."""
    if wants_stop(env):
        return StopServe(read_container_name(env))
    return docker_run(read_settings(env))
