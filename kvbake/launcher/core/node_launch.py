"""Per-node launch settings (deploy.yaml `nodes[].launch`): checked by kvbake and by the launcher, passed as KVBAKE_NODE_LAUNCH_JSON."""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

PROGRAM = "kvbake-launch-vllm"
MODEL_MOUNT = "/models/served"
# Variables that select other code than the image's; kvbake's verify-running refuses a serve that sets them.
CODE_OVERRIDES = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONSAFEPATH", "LD_PRELOAD",
                  "LD_LIBRARY_PATH", "LD_AUDIT", "VLLM_PLUGINS")
# The variables whose values name network interfaces of the node (doctor --deploy checks that they exist there).
INTERFACE_VARIABLES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
# The resource names docker's --ulimit accepts.
ULIMIT_NAMES = ("core", "cpu", "data", "fsize", "locks", "memlock", "msgqueue", "nice", "nofile", "nproc", "rss", "rtprio",
                "rttime", "sigpending", "stack")
KEYS = ("env", "devices", "cap_add", "ulimits", "shm_size", "cache_mounts", "ray_start")
# What the launcher gives `ray start` itself: the operator's own options (RAY_START_ARGS, a node's launch.ray_start) may
# not give them.
RAY_OWN_OPTIONS = ("--block", "--head", "--port", "--address")
# A secret `ray start` option (--redis-password) is written by the name of the variable its value is restored from,
# `--redis-password={secret:RAY_REDIS_PASSWORD}`: the launcher reads that variable where it runs, at launch time.
SECRET_REFERENCE = re.compile(r"\{secret:([A-Za-z_][A-Za-z0-9_]*)\}")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SHM_SIZE = re.compile(r"^[1-9][0-9]*[bkmg]?$")
CAPABILITY = re.compile(r"^(CAP_)?[A-Z][A-Z0-9_]*$")
ULIMIT_VALUE = re.compile(r"^(-1|[0-9]+)(:(-1|[0-9]+))?$")
INTERFACE = re.compile(r"^[A-Za-z0-9_.@-]{1,15}$")
NO_SPACE = re.compile(r"^\S+$")
FIX = "fix nodes[].launch in the deployment file (docs/launcher.md, per-node settings)"


class LaunchInputError(Exception):
    """A setting the launcher cannot use: what is wrong and what to do, printed as one line; exit code 2."""

    def __init__(self, cause: str, fix: str) -> None:
        super().__init__(cause)
        self.cause, self.fix = cause, fix

    def one_line(self) -> str:
        return f"{PROGRAM}: {self.cause}; fix: {self.fix}"


@dataclass(frozen=True)
class Mount:
    """A bind mount of a node path into the container; read-only unless `writable`."""

    source: str
    target: str
    writable: bool = False

    def spec(self) -> list[str]:
        """docker's --mount fields: a bind mount refuses a missing source folder (a --volume would create it empty)."""
        return ["type=bind", f"source={self.source}", f"target={self.target}", *([] if self.writable else ["readonly"])]


@dataclass(frozen=True)
class NodeLaunch:
    """One node's own container settings: variables, devices, capabilities, ulimits, /dev/shm size, writable caches."""

    env: Mapping[str, str] = field(default_factory=dict)
    devices: tuple[str, ...] = ()
    cap_add: tuple[str, ...] = ()
    ulimits: Mapping[str, str] = field(default_factory=dict)
    shm_size: str = ""
    cache_mounts: tuple[Mount, ...] = ()
    ray_start: tuple[str, ...] = ()  # this node's own `ray start` options beyond RAY_START_ARGS (ray shape)

    def to_json(self) -> str:
        """The value of KVBAKE_NODE_LAUNCH_JSON: every key, in one line."""
        return json.dumps({"env": dict(self.env), "devices": list(self.devices), "cap_add": list(self.cap_add),
                           "ulimits": dict(self.ulimits), "shm_size": self.shm_size,
                           "cache_mounts": [f"{m.source}:{m.target}" for m in self.cache_mounts],
                           "ray_start": list(self.ray_start)}, sort_keys=True)

    def ulimit_options(self) -> list[str]:
        """docker's --ulimit values, NAME=SOFT[:HARD]."""
        return [f"{name}={value}" for name, value in self.ulimits.items()]

    def interfaces(self) -> dict[str, tuple[str, ...]]:
        """The interfaces each interface variable names (NCCL's `^` exclusions left out, its `=` exact marks removed)."""
        return {name: interface_names(self.env[name]) for name in INTERFACE_VARIABLES if self.env.get(name)}


def interface_names(value: str) -> tuple[str, ...]:
    """`enp1s0f0np0,=ib0` -> the names it asks for; `^docker0` excludes an interface and asks for none."""
    if value.startswith("^"):
        return ()
    return tuple(item.lstrip("=") for item in value.split(",") if item)


def interface_matches(variable: str, wanted: str, value: str, present: Iterable[str]) -> bool:
    """NCCL reads NCCL_SOCKET_IFNAME as name prefixes unless the list starts with `=`; gloo takes exact names."""
    exact = variable == "GLOO_SOCKET_IFNAME" or value.startswith("=")
    return any(name == wanted or (not exact and name.startswith(wanted)) for name in present)


# ---- paths ----

def absolute_path(name: str, value: str, fix: str) -> str:
    """An absolute, normalised path a bind mount or device option can carry; without its trailing slash."""
    if not isinstance(value, str) or not value.startswith("/"):
        raise LaunchInputError(f"{name}={value!r} is not an absolute path", fix)
    if ":" in value or "," in value or not NO_SPACE.match(value):
        raise LaunchInputError(f"{name}={value!r} contains ':', ',' or whitespace, which a bind mount cannot carry", fix)
    if value.strip("/") == "":
        raise LaunchInputError(f"{name}={value!r} is the root folder", fix)
    if posixpath.normpath(value) != value.rstrip("/"):
        raise LaunchInputError(f"{name}={value!r} is not a normalised path (no '.', '..' or '//')", fix)
    return value.rstrip("/")


def overlaps(target: str, other: str) -> bool:
    """True when a mount at `target` would cover `other`, sit above it or inside it."""
    return target == other or target.startswith(other + "/") or other.startswith(target + "/")


def refuse_protected_target(what: str, target: str, source_root: str | None, taken: Iterable[str]) -> None:
    """A mount may not cover, sit above or inside the image's Python sources or a package folder, nor another mount."""
    fix = "mount it elsewhere; kvbake's verify-running refuses a mount over, above or inside the source root"
    if source_root and overlaps(target, source_root):
        raise LaunchInputError(f"{what} target {target} overlaps the image's Python sources ({source_root})", fix)
    if {"site-packages", "dist-packages"} & set(target.split("/")):
        raise LaunchInputError(f"{what} target {target} is inside a Python package folder", fix)
    for other in sorted(taken):
        if overlaps(target, other):
            raise LaunchInputError(f"{what} target {target} overlaps the mount at {other}", "give every mount its own folder")


def refuse_shadowing_target(what: str, target: str, workdir: str) -> None:
    """A mount may not put a `vllm` package in the container's working directory (`workdir`, the image's WorkingDir;
    Docker's default is /), where `python -m` and a working-directory sys.path entry find it before the source root:
    neither a folder `vllm` right in it, nor the working directory itself or a folder above it."""
    fix = "mount it elsewhere; verify-running refuses a serve that imports vllm from outside the source root"
    workdir = workdir.rstrip("/") or "/"
    if posixpath.basename(target) == "vllm" and posixpath.dirname(target) == workdir:
        raise LaunchInputError(f"{what} target {target} puts a vllm package in the container's working directory {workdir}", fix)
    if workdir != "/" and (target == workdir or workdir.startswith(target + "/")):
        raise LaunchInputError(f"{what} target {target} covers the container's working directory {workdir}, "
                               "where a vllm folder would shadow the baked one", fix)


# ---- reading one node's settings ----

def read_env(raw: object, where: str) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        raise LaunchInputError(f"{where}.env is not a mapping of NAME: value", FIX)
    env = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not ENV_NAME.match(name) or not isinstance(value, str) or "\n" in value or "\0" in value:
            raise LaunchInputError(f"{where}.env entry {name!r} is not NAME: \"value\" on one line", FIX)
        if name in CODE_OVERRIDES:
            raise LaunchInputError(f"{where}.env sets {name}, which selects other code than the image's",
                                   "remove it; kvbake's verify-running refuses a serve that sets it")
        if name.startswith("KVBAKE_"):
            raise LaunchInputError(f"{where}.env sets {name}, a name kvbake keeps for the launcher's variables", "rename or remove it")
        if name in INTERFACE_VARIABLES:
            check_interface_list(name, value, where)
        env[name] = value
    return env


def check_interface_list(name: str, value: str, where: str) -> None:
    items = value.lstrip("^").split(",")
    if not value or not all(INTERFACE.match(item.lstrip("=")) for item in items):
        raise LaunchInputError(f"{where}.env {name}={value!r} is not a comma-separated list of interface names",
                               f"set {name} to the node's interface, e.g. enp1s0f0np0 (doctor --deploy lists the node's interfaces)")


def read_devices(raw: object, where: str) -> tuple[str, ...]:
    fix = f"give {where}.devices as node paths, HOST[:CONTAINER[:PERMISSIONS]], e.g. /dev/infiniband"
    if not isinstance(raw, list):
        raise LaunchInputError(f"{where}.devices is not a list", fix)
    devices = []
    for entry in raw:
        parts = entry.split(":") if isinstance(entry, str) else [None]
        if len(parts) > 3 or (len(parts) == 3 and not re.fullmatch(r"(?!.*(.).*\1)[rwm]{1,3}", parts[2])):
            raise LaunchInputError(f"{where}.devices entry {entry!r} is not HOST[:CONTAINER[:PERMISSIONS]] (permissions of r, w, m)", fix)
        for part in parts[:2]:
            absolute_path(f"{where}.devices path", part, fix)
        devices.append(entry)
    return tuple(devices)


def read_cap_add(raw: object, where: str) -> tuple[str, ...]:
    fix = f"give {where}.cap_add as capability names, e.g. IPC_LOCK"
    if not isinstance(raw, list) or not all(isinstance(c, str) and CAPABILITY.match(c) for c in raw):
        raise LaunchInputError(f"{where}.cap_add is not a list of capability names", fix)
    if {"ALL", "CAP_ALL"} & set(raw):
        raise LaunchInputError(f"{where}.cap_add gives ALL, every capability of the host", "name only the capabilities the serve needs, e.g. IPC_LOCK")
    return tuple(raw)


def read_ulimits(raw: object, where: str) -> dict[str, str]:
    fix = f"give {where}.ulimits as NAME: VALUE, VALUE an integer, -1 (unlimited) or \"SOFT:HARD\", e.g. memlock: -1"
    if not isinstance(raw, Mapping):
        raise LaunchInputError(f"{where}.ulimits is not a mapping of NAME: VALUE", fix)
    ulimits = {}
    for name, value in raw.items():
        if name not in ULIMIT_NAMES:
            raise LaunchInputError(f"{where}.ulimits names {name!r}, which is not one of docker's ({', '.join(ULIMIT_NAMES)})", fix)
        text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
        match = ULIMIT_VALUE.match(text) if isinstance(text, str) else None
        if not match:
            raise LaunchInputError(f"{where}.ulimits {name}={value!r} is not an integer, -1 or SOFT:HARD", fix)
        soft, hard = match.group(1), match.group(3)
        if hard is not None and hard != "-1" and (soft == "-1" or int(soft) > int(hard)):
            raise LaunchInputError(f"{where}.ulimits {name}={value!r} has its soft limit above its hard limit", fix)
        ulimits[name] = text
    return ulimits


def read_shm_size(raw: object, where: str) -> str:
    if not isinstance(raw, str) or not SHM_SIZE.match(raw):
        raise LaunchInputError(f"{where}.shm_size={raw!r} is not a size",
                               "give a number with an optional b, k, m or g suffix, e.g. 16g")
    return raw


def read_cache_mounts(raw: object, where: str) -> tuple[Mount, ...]:
    fix = f'give {where}.cache_mounts as "/node/path:/container/path" strings, both absolute'
    if not isinstance(raw, list):
        raise LaunchInputError(f"{where}.cache_mounts is not a list", fix)
    mounts, taken = [], {MODEL_MOUNT}
    for entry in raw:
        if not isinstance(entry, str) or ":" not in entry:
            raise LaunchInputError(f"{where}.cache_mounts entry {entry!r} is not SOURCE:TARGET", fix)
        source, _, target = entry.partition(":")
        mount = Mount(absolute_path(f"{where}.cache_mounts source", source, fix),
                      absolute_path(f"{where}.cache_mounts target", target, fix), writable=True)
        refuse_protected_target(f"{where}.cache_mounts", mount.target, None, taken)
        taken.add(mount.target)
        mounts.append(mount)
    return tuple(mounts)


def read_ray_start_options(raw: object, where: str) -> tuple[str, ...]:
    """`ray start` options of the operator's own: each `--name` or `--name=value`, none of the launcher's RAY_OWN_OPTIONS;
    `{node_address}` stands for the node's address, a whole value `{secret:NAME}` for the value of the variable NAME."""
    fix = f"give only options of your own; the launcher gives {', '.join(RAY_OWN_OPTIONS)}"
    if not isinstance(raw, list | tuple) or not all(isinstance(option, str) for option in raw):
        raise LaunchInputError(f"{where} is not a list of \"--option=value\" strings", fix)
    for option in raw:
        if not option.startswith("--") or option.partition("=")[0] in RAY_OWN_OPTIONS:
            raise LaunchInputError(f"{where} gives {option}", fix)
        refuse_partial_reference(option, where)
    return tuple(raw)


def secret_reference(variable: str) -> str:
    """How a secret value is written by its variable's name: `{secret:RAY_REDIS_PASSWORD}`."""
    return "{secret:" + variable + "}"


def referenced_secret(option: str) -> str | None:
    """The variable a `--name={secret:NAME}` option takes its value from, else None."""
    found = SECRET_REFERENCE.fullmatch(option.partition("=")[2])
    return found.group(1) if found else None


def refuse_partial_reference(option: str, where: str) -> None:
    """A secret reference stands for an option's whole value, never for a part of it."""
    if "{secret:" in option and referenced_secret(option) is None:
        raise LaunchInputError(f"{where} gives {option.partition('=')[0]} a secret reference that is not its whole value",
                               "write the option as --name={secret:NAME}, NAME the variable that holds its value where kvbake runs")


def read_node_launch(raw: object, where: str) -> NodeLaunch:
    """One node's `launch:` object (or the launcher's KVBAKE_NODE_LAUNCH_JSON), every value checked."""
    if raw is None:
        return NodeLaunch()
    if not isinstance(raw, Mapping):
        raise LaunchInputError(f"{where} is not a mapping", FIX)
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise LaunchInputError(f"{where} has unknown key(s) {', '.join(map(str, unknown))} (known: {', '.join(KEYS)})", FIX)
    return NodeLaunch(
        env=read_env(raw.get("env", {}), where), devices=read_devices(raw.get("devices", []), where),
        cap_add=read_cap_add(raw.get("cap_add", []), where), ulimits=read_ulimits(raw.get("ulimits", {}), where),
        shm_size=read_shm_size(raw["shm_size"], where) if raw.get("shm_size") not in (None, "") else "",
        cache_mounts=read_cache_mounts(raw.get("cache_mounts", []), where),
        ray_start=read_ray_start_options(raw.get("ray_start", []), f"{where}.ray_start"))


# ---- what only the manifest knows: its switches and the image's source root ----

def refuse_switches(launch: NodeLaunch, switch_names: Iterable[str], where: str) -> None:
    """A switch comes from the preset, the same on every rank; a node may not set one of its own."""
    given = sorted(set(launch.env) & set(switch_names))
    if given:
        raise LaunchInputError(f"{where}.env sets {', '.join(given)}, a switch of the manifest",
                               "remove it; switches come from the preset (deploy --preset), identical on every rank")


def refuse_over_source_root(launch: NodeLaunch, source_root: str, where: str) -> None:
    for mount in launch.cache_mounts:
        refuse_protected_target(f"{where}.cache_mounts", mount.target, source_root, ())
