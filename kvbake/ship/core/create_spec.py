"""A container's create spec: what `docker create` needs to make the same container again, read from its inspect data."""

from __future__ import annotations

import copy
from typing import Any, Mapping

from kvbake.secret_env import noted_names, restore_args, restore_text, split_env_list, withhold_args, withhold_labels

# Config fields that say what runs and how; Hostname only when it is not the engine's default.
CONFIG_KEYS = ("Entrypoint", "Cmd", "Env", "Labels", "WorkingDir", "User", "Domainname", "Tty", "OpenStdin", "StopSignal",
               "StopTimeout", "Healthcheck", "ExposedPorts")
# HostConfig fields kvbake gives `docker create` again.
HOST_KEYS = ("Binds", "Mounts", "NetworkMode", "IpcMode", "PidMode", "UTSMode", "UsernsMode", "CgroupnsMode", "ShmSize",
             "Privileged", "CapAdd", "CapDrop", "Devices", "DeviceRequests", "Ulimits", "RestartPolicy", "AutoRemove", "Init",
             "SecurityOpt", "GroupAdd", "Memory", "MemorySwap", "MemoryReservation", "PidsLimit", "CpusetCpus", "CpusetMems",
             "NanoCpus", "CpuShares", "Runtime", "Sysctls", "ExtraHosts", "Dns", "DnsOptions", "DnsSearch", "Tmpfs", "LogConfig",
             "OomScoreAdj", "OomKillDisable", "ReadonlyRootfs", "PortBindings", "PublishAllPorts", "CgroupParent")
# HostConfig fields kvbake cannot give again: a serve that sets one is refused where it would have to be recreated.
UNRESTORED_KEYS = ("Links", "VolumesFrom", "VolumeDriver", "Isolation", "BlkioWeight", "BlkioWeightDevice", "BlkioDeviceReadBps",
                   "BlkioDeviceWriteBps", "BlkioDeviceReadIOps", "BlkioDeviceWriteIOps", "CpuPeriod", "CpuQuota", "CpuRealtimePeriod",
                   "CpuRealtimeRuntime", "KernelMemory", "KernelMemoryTCP", "DeviceCgroupRules", "IOMaximumBandwidth",
                   "IOMaximumIOps", "Annotations", "CpuCount", "CpuPercent")
EMPTY = (None, "", 0, [], {}, False)
# The secrets a spec carries by name: its secret variables, left out of Env, and the variables whose notes stand in its
# Entrypoint, Cmd and Labels in place of a secret value.
SECRET_LISTS = ("secret_env", "secret_args")


def create_spec(inspect: Mapping[str, Any]) -> dict[str, Any]:
    """The container's image (by ID), name and the Config and HostConfig fields kvbake restores, as plain data; its
    secrets by name only (their values come from where kvbake runs, `with_secrets`)."""
    config = inspect.get("Config") or {}
    host = inspect.get("HostConfig") or {}
    kept_config = {key: copy.deepcopy(config[key]) for key in CONFIG_KEYS if config.get(key) not in EMPTY}
    hostname = str(config.get("Hostname") or "")
    if hostname and not str(inspect.get("Id", "")).startswith(hostname) and host.get("NetworkMode") != "host":
        kept_config["Hostname"] = hostname
    spec = {"image": str(inspect.get("Image", "")), "name": str(inspect.get("Name", "")).lstrip("/"), "config": kept_config,
            "host": {key: copy.deepcopy(host[key]) for key in HOST_KEYS if host.get(key) not in EMPTY}}
    return withhold_spec(spec)


def withhold_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The spec with every secret by name: its secret variables out of Env (`secret_env`), each secret value of its
    Entrypoint, Cmd and Labels a note naming its variable (`secret_args`); a value an earlier kvbake recorded in clear
    is withheld too, and a spec withheld already stays as it is."""
    config = dict(spec.get("config") or {})
    env, env_names = split_env_list(config.get("Env") or [])
    for key in ("Entrypoint", "Cmd"):
        if key in config:
            config[key] = withhold_args(config[key])[0]
    if "Env" in config:
        config["Env"] = env
    if "Labels" in config:
        config["Labels"] = withhold_labels(config["Labels"])
    names = {"secret_env": sorted({*(spec.get("secret_env") or ()), *env_names}), "secret_args": noted_names(noted_texts(config))}
    rest = {key: value for key, value in spec.items() if key not in SECRET_LISTS}
    return {**rest, "config": config, **{key: found for key, found in names.items() if found}}


def noted_texts(config: Mapping[str, Any]) -> list[str]:
    """The texts of a config that may hold a note: its entrypoint, command and label values."""
    return [*(config.get("Entrypoint") or ()), *(config.get("Cmd") or ()), *(config.get("Labels") or {}).values()]


def with_secrets(spec: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """The spec to create the container again: its secret variables back in its Env, each withheld value back where it
    stood, their values from `env`."""
    if not any(spec.get(key) for key in SECRET_LISTS):
        return dict(spec)
    config = dict(spec.get("config") or {})
    if spec.get("secret_env"):
        config["Env"] = [*(config.get("Env") or []), *(f"{name}={env[name]}" for name in spec["secret_env"])]
    for key in ("Entrypoint", "Cmd"):
        if key in config:
            config[key] = restore_args(config[key], env)
    if "Labels" in config:
        config["Labels"] = {key: restore_text(value, env) for key, value in config["Labels"].items()}
    return {**{key: value for key, value in spec.items() if key not in SECRET_LISTS}, "config": config}


def unrestorable(inspect: Mapping[str, Any]) -> list[str]:
    """The settings of this container that kvbake could not give a container it recreates, by HostConfig name."""
    host = inspect.get("HostConfig") or {}
    return [key for key in UNRESTORED_KEYS if host.get(key) not in EMPTY]


def command_line(spec: Mapping[str, Any]) -> list[str]:
    """What the container runs: its entrypoint, then its command."""
    config = spec.get("config") or {}
    return [*(config.get("Entrypoint") or []), *(config.get("Cmd") or [])]


def spec_differences(recorded: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """How a container (its create spec now) differs from the recorded one, field by field; the name, an entrypoint split
    differently over Entrypoint and Cmd, and a hostname the engine gave by itself do not count. Both are compared with
    their secrets withheld (a record of an earlier kvbake may hold one in clear), and no difference names a secret."""
    recorded, now = withhold_spec(recorded), withhold_spec(now)
    differences = []
    if recorded.get("image") != now.get("image"):
        differences.append(f"image {str(now.get('image'))[:19]}, not {str(recorded.get('image'))[:19]}")
    if command_line(recorded) != command_line(now):
        differences.append(f"command {command_line(now)}, not {command_line(recorded)}")
    for section in ("config", "host"):
        old, new = recorded.get(section) or {}, now.get(section) or {}
        for key in sorted(set(old) | set(new)):
            if key in ("Entrypoint", "Cmd"):
                continue
            if _normal(old.get(key)) != _normal(new.get(key)):
                differences.append(f"{key} {new.get(key)!r}, not {old.get(key)!r}")
    return differences


def _normal(value: Any) -> Any:
    """Empty values are alike; lists of settings compare without their order."""
    if value in EMPTY:
        return None
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return sorted(value)
    return value
