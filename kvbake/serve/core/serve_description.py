"""What `init` reads from the serve the nodes run, as plain data: its base, control's arguments, switches, env and mounts."""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from kvbake.errors import IntegrityError, RolloutError
from kvbake.launcher.core.node_launch import secret_reference
from kvbake.secret_env import SECRET_OPTIONS, secret_option, split_secrets
from kvbake.secretscan import credential_kind
from kvbake.serve.core.serve_reading import ServeReading, ServingProcess, second_serves
from kvbake.serve.core.vllm_argv import MODEL_OPTION, PER_NODE_OPTIONS, ServeArgs

# Variables that change which Python or native code a rank runs, whatever the image holds.
CODE_OVERRIDES = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONSAFEPATH", "LD_PRELOAD",
                  "LD_LIBRARY_PATH", "LD_AUDIT", "VLLM_PLUGINS")

LENGTH_OPTION = "--max-model-len"
# Set by the engine or a shell in every process; never part of how the operator configured the serve.
RUNTIME_SET_ENV = ("HOSTNAME", "HOME", "TERM", "SHLVL", "PWD", "OLDPWD", "_", "container")
URL = re.compile(r"https?://[^\s\"',}]+")
POSITIONS_KEYS = ("max_positions", "max_model_len", "max_position_embeddings")


@dataclass(frozen=True)
class NodeServe:
    """One node as init finds it: the serving container's inspect data, its vLLM serve (None on a Ray worker that runs
    none), its image's inspect data, and the files its writable layer changed under the source root."""

    node: str
    host: str
    container: Mapping[str, Any]
    serving: ServingProcess | None
    image: Mapping[str, Any]
    changes: tuple[str, ...] = ()
    ray_node: tuple[str, ...] = ()  # the container's main process when it is a Ray node (`ray start --block …`)
    ray_env: Mapping[str, str] = field(default_factory=dict)  # that Ray node's environment (a worker's own settings)
    node_devices: tuple[str, ...] = ()  # of PRIVILEGED_DEVICES, those a privileged container sees on its node

    @property
    def own_env(self) -> Mapping[str, str]:
        """The environment of the process that is this rank: its vLLM serve, else (a Ray worker) its Ray node."""
        return self.serving.process.env if self.serving else self.ray_env

    @property
    def name(self) -> str:
        return str(self.container.get("Name", "")).lstrip("/")

    @property
    def image_id(self) -> str:
        return str(self.container.get("Image", ""))

    @property
    def headless(self) -> bool:
        return self.serving is not None and self.serving.serve.args.given("--headless")


@dataclass(frozen=True)
class BasePin:
    """The base the nodes run: the reference the manifest pins, the image ID, and whether a registry digest pins it."""

    image: str
    image_id: str
    by_digest: bool


@dataclass(frozen=True)
class Mounts:
    """The serve's mounts by what kvbake does with them: the model folder, read-only extras, writable caches, and the
    files mounted over the source root (the bind-mount overlay the baked chain replaces)."""

    model_dir: str = ""
    model_target: str = ""
    read_only: tuple[str, ...] = ()
    writable: tuple[str, ...] = ()
    overlay: tuple[str, ...] = ()


@dataclass(frozen=True)
class Drafter:
    """The remote drafter a serve names: the option that carries its URL, the URL, the positions it is given, the
    option's value as the launcher's template (`{url}`, `{max_positions}` in place of the two), and the positions the
    drafter itself says it serves (its /v1/models), when it answered."""

    option: str
    url: str
    max_positions: int | None
    template: str = "{url}"
    served_positions: int | None = None

    @property
    def limit(self) -> int | None:
        """The positions the drafter serves: what it says, else what the serve gives it."""
        return self.served_positions or self.max_positions


@dataclass(frozen=True)
class ServeDescription:
    """Everything init writes: the base, control's length and arguments, the switch set found, the serve's own
    environment, mounts, ports, node addresses, the drafter, and what kvbake cannot carry (reported)."""

    base: BasePin
    head: str
    max_model_len: int
    launcher_args: tuple[str, ...]
    switches: Mapping[str, str]
    env: Mapping[str, str]
    mounts: Mounts
    addresses: Mapping[str, str]
    master_port: str
    shape: str
    model: str = ""
    drafter: Drafter | None = None
    gpus: bool = True
    shm_size: str = ""
    overrides: Mapping[str, str] = field(default_factory=dict)
    changes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    node_env: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    node_launch: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    ray_port: str = ""
    secrets: tuple[str, ...] = ()  # variables the serve needs by name only: their values come from where kvbake runs
    ray_start: tuple[str, ...] = ()  # the `ray start` options every Ray node shares, `{node_address}` for each node's address
    ray_secrets: tuple[str, ...] = ()  # the variables a secret `ray start` option is restored from (`{secret:NAME}`)
    host_ip_by_address: bool = False  # every rank sets its own VLLM_HOST_IP: CONTAINER_ENV gives it as {node_address}
    privileged: tuple[str, ...] = ()  # the nodes whose serve ran --privileged: kvbake's gets explicit settings instead
    length_from_api: bool = False  # control's length is what the serve's /v1/models said (it gave no --max-model-len)
    tensor_parallel_size: str = ""  # "1" for a pair whose serve gave none (vLLM's default), where the launcher's is the nodes'


RAY_OWN = ("--block", "--head", "--port", "--address")  # what the launcher gives `ray start` itself
RAY_ADDRESS_OPTIONS = ("--node-ip-address",)


def ray_options(argv: Sequence[str]) -> list[tuple[str, str | None]]:
    """The options of a `ray start` command line as (name, value) pairs, in order; `--name=value` and `--name value`."""
    at = next((i for i, token in enumerate(argv) if token == "start"), len(argv))
    rest, found = list(argv[at + 1:]), []
    while rest:
        token = rest.pop(0)
        if not token.startswith("--"):
            continue
        name, equals, value = token.partition("=")
        if not equals and rest and not rest[0].startswith("--"):
            value, equals = rest.pop(0), "="
        found.append((name, value if equals else None))
    return found


def ray_start_options(nodes: Sequence[NodeServe], head: NodeServe) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]]:
    """The `ray start` options the Ray nodes were given beyond the launcher's own (the object store, CPUs, the node's
    address as `{node_address}`): (those every Ray node shares, in the head's order; each node's own others, in its
    order). Each node keeps its options as read: `run_cluster.sh` gives `--node-ip-address` to the head alone, eugr's
    node script gives the dashboard's options to the head alone. A secret option's value is kept by its variable's name
    (`--redis-password={secret:RAY_REDIS_PASSWORD}`), which kvbake's launcher reads where it runs."""
    def options_of(node: NodeServe) -> tuple[str, ...]:
        own = node_address_of(node)
        return tuple(f"{name}={'{node_address}' if name in RAY_ADDRESS_OPTIONS and value == own else by_name(name, value)}"
                     if value is not None else name for name, value in ray_options(node.ray_node) if name not in RAY_OWN)
    if not head.ray_node:
        return (), {}
    refuse_ray_credentials(nodes)
    by_node = {node.node: options_of(node) for node in nodes if node.ray_node}
    shared = tuple(option for option in by_node[head.node] if all(option in given for given in by_node.values()))
    own = {node: tuple(option for option in given if option not in shared) for node, given in by_node.items()}
    return shared, {node: given for node, given in own.items() if given}


def by_name(name: str, value: str) -> str:
    """A `ray start` option's value as init writes it: a secret option's (SECRET_OPTIONS) as its variable's reference."""
    option = secret_option(name)
    return secret_reference(SECRET_OPTIONS[option]) if option and value else value


def ray_secret_names(nodes: Sequence[NodeServe]) -> tuple[str, ...]:
    """The variables the Ray nodes' secret `ray start` options are restored from, sorted."""
    return tuple(sorted({SECRET_OPTIONS[option] for node in nodes for name, value in ray_options(node.ray_node)
                         if value and (option := secret_option(name))}))


def refuse_ray_credentials(nodes: Sequence[NodeServe]) -> None:
    """A `ray start` option that is no secret option but whose value looks like a credential would be written in clear
    into the deployment file, and secret values that differ between the nodes cannot come from one variable: init
    refuses both."""
    values: dict[str, set[str]] = {}
    for node in nodes:
        for name, value in ray_options(node.ray_node):
            option = secret_option(name)
            if option and value:
                values.setdefault(option, set()).add(value)
            elif credential_kind(value or ""):
                raise IntegrityError(f"init: the Ray node on {node.node} gives {name} a value that looks like a credential, which "
                                     "init would write in clear into deploy.yaml",
                                     "start the Ray nodes without it, or give a secret by an option kvbake carries by name "
                                     "(--redis-password), then run init again")
    for option, given in sorted(values.items()):
        if len(given) > 1:
            raise IntegrityError(f"init: the Ray nodes give {option} different values, which one variable "
                                 f"({SECRET_OPTIONS[option]}) cannot carry",
                                 f"start every Ray node with the same {option}, then run init again")


def node_address_of(node: NodeServe) -> str:
    """The address a rank gives itself: VLLM_HOST_IP, else Ray's override, else its Ray node's --node-ip-address."""
    env = node.own_env
    given = dict(ray_options(node.ray_node))
    return env.get("VLLM_HOST_IP") or env.get("RAY_OVERRIDE_NODE_IP_ADDRESS") or str(given.get("--node-ip-address") or "")


def ray_port_of(argv: Sequence[str]) -> str:
    """The port a head's `ray start --head` listens on (`--port N` or `--port=N`), "" when it keeps Ray's default."""
    for at, token in enumerate(argv):
        if token.startswith("--port="):
            return token.partition("=")[2]
        if token == "--port" and at + 1 < len(argv):
            return argv[at + 1]
    return ""


def serve_shape(head: NodeServe) -> str:
    """How the head's serve runs: a Ray cluster (the container is a Ray node, vLLM exec'd beside it), vLLM started by
    docker exec in a waiting container, or vLLM as the container's main process."""
    if head.ray_node:
        return "ray"
    return "exec" if head.serving.execd else "main"


def choose_container(node: str, serving: Sequence[str], cluster: Sequence[str]) -> str:
    """The one container of a node that runs a vLLM serve, else the one Ray node container (a Ray worker runs no vLLM)."""
    candidates = list(serving) or list(cluster)
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise RolloutError(f"init: no serving container found on {node} (no running container runs a vLLM serve or a Ray node)",
                           "start the serve there first, or name its container with --container")
    raise RolloutError(f"init: {node} has {len(candidates)} candidate serving containers ({', '.join(sorted(candidates))})",
                       f"name the serving one with --container {node}=NAME")


def base_pin(nodes: Sequence[NodeServe]) -> BasePin:
    """The nodes' common image, pinned by a registry digest when the image has one; nodes on different images refuse."""
    ids = {n.image_id for n in nodes}
    if len(ids) > 1:
        shown = "; ".join(f"{n.node} runs {reference_of(n)} ({n.image_id[:19]})" for n in nodes)
        raise RolloutError(f"init: the nodes run different images: {shown}",
                           "serve one image on every node (the release of a tensor-parallel pair is one image), then run init again")
    first = nodes[0]
    digests = sorted(str(d) for d in first.image.get("RepoDigests") or ())
    if digests:
        return BasePin(digests[0], first.image_id, True)
    return BasePin(reference_of(first), first.image_id, False)


def reference_of(node: NodeServe) -> str:
    """The image reference the container was created from (`Config.Image`), with `:latest` when it names no tag."""
    reference = str((node.container.get("Config") or {}).get("Image") or node.image_id)
    if reference.startswith("sha256:") or "@" in reference or ":" in reference.rsplit("/", 1)[-1]:
        return reference
    return f"{reference}:latest"


def head_of(nodes: Sequence[NodeServe]) -> NodeServe:
    """The node whose vLLM serve opens the API: the one serve that is not --headless."""
    heads = [n for n in nodes if n.serving is not None and not n.headless]
    if len(heads) != 1:
        named = ", ".join(n.node for n in heads) or "none"
        raise RolloutError(f"init: exactly one node must run the API serve (a vLLM serve without --headless); found {named}",
                           "run init while the pair serves: the head's vLLM serve and each worker's headless serve or Ray node")
    return heads[0]


def shared_args(args: ServeArgs) -> ServeArgs:
    """The arguments every rank shares, less those kvbake's presets and launcher own (per-node options, the model, the
    length) and the secret options (their value reaches vLLM by its variable, named in SECRET_ENV)."""
    shared = without_drafter(args.split()[1].without((MODEL_OPTION, LENGTH_OPTION, *secret_options(args))))
    flagged = [option for option, values in shared.entries if any(credential_kind(value) for value in values)]
    if flagged:
        raise IntegrityError(f"init: the serve's {flagged[0]} value looks like a credential, which init would write in clear",
                             "pass the secret by a variable the serve reads (HF_TOKEN, VLLM_API_KEY) instead, then run init again")
    return shared


def secret_options(args: ServeArgs) -> dict[str, str]:
    """The serve's secret options given a value, each with the variable that carries it (`--api-key` → VLLM_API_KEY;
    a bare --hf-token, the token of the host's login, is no secret)."""
    return {option: variable for option, variable in SECRET_OPTIONS.items() if args.values(option)}


def control_args(head: NodeServe, nodes: Sequence[NodeServe]) -> tuple[int, tuple[str, ...]]:
    """control's length (0 when the serve gives none: vLLM then takes the model's own limit, which its /v1/models
    says) and launcher arguments: the head's serve, less what the launcher owns; every rank must agree."""
    args = head.serving.serve.args
    length = args.value(LENGTH_OPTION)
    if length is not None and not length.isdigit():
        raise RolloutError(f"init: the serve on {head.node} gives --max-model-len {length}, which is no number of tokens",
                           "start the serve with --max-model-len N (an integer): every kvbake preset pins its length; then run init again")
    shared = shared_args(args)
    for other in nodes:
        if other.serving is not None and other is not head:
            theirs = shared_args(other.serving.serve.args)
            if sorted(theirs.entries) != sorted(shared.entries) or theirs.unknown != shared.unknown:
                differing = sorted(set(theirs.entries) ^ set(shared.entries))
                raise RolloutError(f"init: the ranks' serves disagree ({other.node} vs {head.node}: {differing[0][0] if differing else 'an unknown option'})",
                                   "give every rank the same vLLM arguments (only the per-node ones differ), then run init again")
            if other.serving.serve.args.value(LENGTH_OPTION) != length:
                raise RolloutError(f"init: --max-model-len differs between {head.node} and {other.node}",
                                   "give every rank the same --max-model-len, then run init again")
    return int(length or 0), tuple(shared.argv())


def with_served_length(described: ServeDescription, length: int | None, why: str) -> ServeDescription:
    """The description with control's length: the serve's --max-model-len, else the length its /v1/models says it
    serves (`length`); a serve that says neither is refused, `why` naming what its API answered."""
    if described.max_model_len:
        return described
    if length:
        return replace(described, max_model_len=length, length_from_api=True)
    fix = ("export the serve's API key as VLLM_API_KEY where init runs (init asks with it and writes it nowhere), then run "
           "init again" if "HTTP 401" in why else
           "run init while the serve answers its API, or start the serve with --max-model-len N; then run init again")
    raise RolloutError(f"init: the serve on {described.head} gives no --max-model-len and {why}", fix)


def serve_env(process_env: Mapping[str, str], image_env: Sequence[str], switch_names: Sequence[str]) -> tuple[dict, dict, dict]:
    """(switches, the serve's own environment, code overrides): what the serving process sees beyond its image's Env."""
    own = dict(item.partition("=")[::2] for item in image_env)
    added = {name: value for name, value in process_env.items() if own.get(name) != value and name not in RUNTIME_SET_ENV}
    switches = {name: value for name, value in added.items() if name in switch_names}
    overrides = {name: value for name, value in added.items() if name in CODE_OVERRIDES}
    env = {name: value for name, value in added.items() if name not in switches and name not in overrides}
    return switches, env, overrides


def classify_mounts(container: Mapping[str, Any], model: str, source_root: str) -> Mounts:
    """Sort the container's bind mounts: the one holding the model, files over the source root, read-only and writable."""
    model_dir = model_target = ""
    read_only, writable, overlay = [], [], []
    for mount in container.get("Mounts") or ():
        source, target = str(mount.get("Source", "")), str(mount.get("Destination", ""))
        if mount.get("Type") not in ("bind", None):
            continue
        if target == source_root or target.startswith(source_root + "/") or source_root.startswith(target + "/"):
            overlay.append(target)
        elif model.startswith(target + "/") or model == target:
            model_dir, model_target = source.rstrip("/") + model[len(target):], model  # a model in a subfolder of the mount
        elif mount.get("RW", True):
            writable.append(f"{source}:{target}")
        else:
            read_only.append(f"{source}:{target}")
    return Mounts(model_dir, model_target, tuple(read_only), tuple(writable), tuple(sorted(overlay)))


def find_drafter(args: ServeArgs) -> Drafter | None:
    """The option whose value names an http(s) URL (a remote drafter), its URL, the positions it gives and the value as
    a template for the launcher, if any."""
    for option, values in args.entries:
        for value in values:
            url = URL.search(value)
            if url:
                positions = re.search(rf"(\"?(?:{'|'.join(POSITIONS_KEYS)})\"?\s*[:=]\s*)([0-9]+)", value)
                template = value.replace(url.group(0), "{url}")
                if positions:
                    template = template.replace(positions.group(0), positions.group(1) + "{max_positions}", 1)
                return Drafter(option, url.group(0), int(positions.group(2)) if positions else None, template)
    return None


def without_drafter(args: ServeArgs) -> ServeArgs:
    """The arguments less the drafter's option: the launcher gives it from DRAFTER_ARGS, once."""
    drafter = find_drafter(args)
    return args.without((drafter.option,)) if drafter else args


def addresses_of(nodes: Sequence[NodeServe], head: NodeServe) -> dict[str, str]:
    """How the ranks reach each other: the head's from any --master-addr, each node's from its own address
    (VLLM_HOST_IP, Ray's override or its Ray node's --node-ip-address; a Ray worker's from its Ray node)."""
    found = {}
    for node in nodes:
        master = node.serving.serve.args.value("--master-addr") if node.serving else None
        if master:
            found.setdefault(head.node, master)
        own = node_address_of(node)
        if own:
            found[node.node] = own
    return found


def serves_through_ray(head: NodeServe) -> bool:
    """Whether the head's vLLM places its ranks through the container's Ray node: it runs one, and the serve names no
    other executor (`--distributed-executor-backend` other than ray, or `--nnodes` above 1: vLLM's multiprocessing
    backend across nodes, which eugr's newer launchers start in containers that still run a Ray node)."""
    if not head.ray_node or head.serving is None:
        return bool(head.ray_node)
    args = head.serving.serve.args
    backend = args.value("--distributed-executor-backend")
    if backend is not None:
        return backend == "ray"
    nnodes = args.value("--nnodes") or "1"
    return not (nnodes.isdigit() and int(nnodes) > 1)


def without_unused_ray(nodes: Sequence[NodeServe]) -> list[NodeServe]:
    """The nodes as the serve uses them: a Ray node no rank serves through is no part of the serve (kvbake's release
    starts none; the adopted serve's copy keeps it)."""
    if serves_through_ray(head_of(nodes)):
        return list(nodes)
    return [replace(node, ray_node=(), ray_env={}) for node in nodes]


def describe(nodes: Sequence[NodeServe], switch_names: Sequence[str], source_root: str) -> ServeDescription:
    """The whole description of a running pair (RolloutError when it is not one serve kvbake can describe)."""
    base = base_pin(nodes)
    nodes = without_unused_ray(nodes)
    head = head_of(nodes)
    length, launcher_args = control_args(head, nodes)
    image_env = (head.image.get("Config") or {}).get("Env") or ()
    switches, _, overrides = serve_env(head.serving.process.env, image_env, switch_names)
    own_env = {n.node: split_secrets(serve_env(n.own_env, image_env, switch_names)[1]) for n in nodes if n.own_env}
    env, node_env = split_env({node: plain for node, (plain, _) in own_env.items()})
    carried = set(secret_options(head.serving.serve.args).values())
    secrets = tuple(sorted({name for _, names in own_env.values() for name in names} | carried))
    mounts = classify_mounts(head.container, head.serving.serve.model, source_root)
    host_config = head.container.get("HostConfig") or {}
    shared_ray_start, own_ray_start = ray_start_options(nodes, head)
    host_ip = host_ip_everywhere(nodes, node_env)
    return ServeDescription(
        base=base, head=head.node, max_model_len=length, launcher_args=launcher_args, switches=switches, env=env,
        mounts=mounts, addresses=addresses_of(nodes, head), master_port=head.serving.serve.args.value("--master-port") or "",
        shape=serve_shape(head), ray_port=ray_port_of(head.ray_node), ray_start=shared_ray_start, ray_secrets=ray_secret_names(nodes),
        model=head.serving.serve.model, drafter=find_drafter(head.serving.serve.args),
        gpus=bool(host_config.get("DeviceRequests")), shm_size=shm_text(host_config.get("ShmSize")), overrides=overrides,
        changes={n.node: n.changes for n in nodes if n.changes}, node_env=node_env, secrets=secrets,
        tensor_parallel_size=default_group_size(head, nodes),
        host_ip_by_address=host_ip, privileged=tuple(n.node for n in nodes if is_privileged(n.container)),
        node_launch={n.node: launch for n in nodes
                     if (launch := node_launch(n, node_env.get(n.node, {}), source_root, host_ip, own_ray_start.get(n.node, ())))})


def default_group_size(head: NodeServe, nodes: Sequence[NodeServe]) -> str:
    """The tensor-parallel size the launcher must be told: "1" when a serve of several nodes gives none (vLLM then runs a
    group of one; the launcher's own default is one rank per node), else "" (the serve's option is in its arguments)."""
    return "" if head.serving.serve.args.given("--tensor-parallel-size") or len(nodes) == 1 else "1"


def host_ip_everywhere(nodes: Sequence[NodeServe], node_env: Mapping[str, Mapping[str, str]]) -> bool:
    """Whether every rank sets its own VLLM_HOST_IP: then the launcher gives each node its address there."""
    return len(nodes) > 1 and all("VLLM_HOST_IP" in node_env.get(n.node, {}) for n in nodes)


# What --privileged gave a multi-node vLLM serve, made explicit (kvbake's serve never runs privileged): the RDMA devices
# the node has, the capability to pin their memory, and unlimited locked memory with the stack NVIDIA's images expect.
PRIVILEGED_DEVICES = ("/dev/infiniband",)
PRIVILEGED_CAPABILITIES = ("IPC_LOCK",)
PRIVILEGED_ULIMITS: Mapping[str, int] = {"memlock": -1, "stack": 67108864}


def is_privileged(container: Mapping[str, Any]) -> bool:
    return bool((container.get("HostConfig") or {}).get("Privileged"))


def node_launch(node: NodeServe, env: Mapping[str, str], source_root: str, host_ip_by_address: bool = True,
                ray_start: Sequence[str] = ()) -> dict[str, Any]:
    """A node's own container settings as deploy.yaml's `launch:` gives them: its per-node environment (less
    VLLM_HOST_IP, which the launcher fills from the node's address), devices, capabilities, ulimits, writable mounts,
    its Ray node's own `ray start` options; a privileged serve's explicit equivalents are added to its own
    (PRIVILEGED_*)."""
    host = node.container.get("HostConfig") or {}
    model = node.serving.serve.model if node.serving else ""
    privileged = is_privileged(node.container)
    devices = [device_text(d) for d in host.get("Devices") or ()]
    ulimits = {str(u["Name"]): (u["Soft"] if u["Soft"] == u["Hard"] else f"{u['Soft']}:{u['Hard']}") for u in host.get("Ulimits") or ()}
    launch: dict[str, Any] = {
        "env": {name: value for name, value in sorted(env.items()) if name != "VLLM_HOST_IP" or not host_ip_by_address},
        "devices": [*devices, *(d for d in node.node_devices if privileged and d not in devices)],
        "cap_add": sorted({str(c) for c in host.get("CapAdd") or ()} | (set(PRIVILEGED_CAPABILITIES) if privileged else set())),
        "ulimits": {**(PRIVILEGED_ULIMITS if privileged else {}), **ulimits},
        "cache_mounts": list(classify_mounts(node.container, model, source_root).writable),
        "ray_start": list(ray_start),
    }
    return {key: value for key, value in launch.items() if value}


def privileged_line(node: str, launch: Mapping[str, Any]) -> str:
    """What init says about a privileged serve: the settings kvbake's serve gets in its place."""
    ulimits = " ".join(f"{name}={value}" for name, value in (launch.get("ulimits") or {}).items())
    devices = ", ".join(launch.get("devices") or ()) or f"none (the node has no {', '.join(PRIVILEGED_DEVICES)})"
    return (f"{node}: --privileged is not carried; kvbake's serve gets devices {devices}, capabilities "
            f"{', '.join(launch.get('cap_add') or ())}, ulimits {ulimits} (deploy.yaml nodes[].launch)")


def device_text(device: Mapping[str, Any]) -> str:
    """A device mapping as `--device` reads it: HOST, HOST:CONTAINER, or HOST:CONTAINER:PERMISSIONS."""
    host, inside, permissions = str(device.get("PathOnHost")), str(device.get("PathInContainer") or ""), str(device.get("CgroupPermissions") or "")
    if permissions and permissions != "rwm":
        return f"{host}:{inside or host}:{permissions}"
    return host if inside in ("", host) else f"{host}:{inside}"


def split_env(by_node: Mapping[str, Mapping[str, str]]) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """(what every serving rank's environment shares, what each rank sets otherwise): VLLM_HOST_IP and the NCCL/GLOO
    interface names usually differ per node."""
    values = list(by_node.values())
    shared = {name: value for name, value in values[0].items() if all(other.get(name) == value for other in values[1:])} if values else {}
    per_node = {node: {k: v for k, v in env.items() if k not in shared} for node, env in by_node.items()}
    return shared, {node: env for node, env in per_node.items() if env}


def shm_text(size: Any) -> str:
    """A ShmSize in bytes as docker's `--shm-size` reads it (`16g`), or "" for the engine's default."""
    if not isinstance(size, int) or size <= 0 or size == 64 * 1024 ** 2:
        return ""
    for unit, factor in (("g", 1024 ** 3), ("m", 1024 ** 2), ("k", 1024)):
        if size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)


def implied_preset(switches: Mapping[str, str], presets: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The preset whose switch set is exactly the one found, if any."""
    return next((name for name, preset in presets.items() if dict(preset.get("switches") or {}) == dict(switches)), None)


def refuse_second_serves(command: str, readings: Mapping[str, ServeReading]) -> None:
    """One vLLM serve per GPU node: a container that runs two is refused, named, before anything is read further."""
    for node, reading in readings.items():
        two = second_serves(reading)
        if two:
            raise RolloutError(f"{command}: {node}: {two}; kvbake keeps one serve per GPU node",
                               "stop the serve that should not run there (docker exec … kill PID), then run "
                               f"{command} again; nothing was changed")


def require_serving(node: str, serving: Sequence[ServingProcess], cluster: bool) -> ServingProcess | None:
    """The node's one vLLM serve; a Ray worker container runs none; anything else without one is refused."""
    if serving:
        return serving[0]
    if cluster:
        return None
    raise IntegrityError(f"init: the serving container on {node} runs no vLLM serve (an exec-shape serve whose vLLM process is gone?)",
                         "start vLLM in it again as you do (docker exec … vllm serve …), then run init")
