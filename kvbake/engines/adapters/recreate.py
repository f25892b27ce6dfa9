"""Adapter: a recorded create spec as python-on-whales' `container.create` arguments, to make that container again."""

from __future__ import annotations

from typing import Any, Mapping


def create_arguments(spec: Mapping[str, Any], name: str) -> tuple[str, list[str], dict[str, Any]]:
    """(image, command, keyword arguments) that create the spec's container under `name`. The CLI takes one entrypoint
    word: the rest of a longer Entrypoint leads the command, so the process runs the same argv."""
    config, host = spec.get("config") or {}, spec.get("host") or {}
    entrypoint = list(config.get("Entrypoint") or [])
    command = [*entrypoint[1:], *(config.get("Cmd") or [])]
    options: dict[str, Any] = {"name": name, "pull": "never", "entrypoint": entrypoint[0] if entrypoint else None}
    options.update(_config_options(config))
    options.update(_host_options(host))
    return str(spec["image"]), command, {key: value for key, value in options.items() if value not in (None, [], {}, ())}


def _config_options(config: Mapping[str, Any]) -> dict[str, Any]:
    health = config.get("Healthcheck") or {}
    test = list(health.get("Test") or [])
    return {"envs": dict(entry.split("=", 1) for entry in config.get("Env") or [] if "=" in entry), "labels": dict(config.get("Labels") or {}),
            "workdir": config.get("WorkingDir") or None, "user": config.get("User") or None, "hostname": config.get("Hostname"),
            "domainname": config.get("Domainname") or None, "tty": bool(config.get("Tty")), "interactive": bool(config.get("OpenStdin")),
            "stop_signal": config.get("StopSignal"), "stop_timeout": config.get("StopTimeout"),
            "expose": [int(port.split("/")[0]) for port in config.get("ExposedPorts") or {}],
            "health_cmd": test[1] if len(test) > 1 and test[0] == "CMD-SHELL" else None,
            "healthcheck": test != ["NONE"]}


def _host_options(host: Mapping[str, Any]) -> dict[str, Any]:
    restart = host.get("RestartPolicy") or {}
    policy = restart.get("Name") or None
    if policy == "on-failure" and restart.get("MaximumRetryCount"):
        policy = f"on-failure:{restart['MaximumRetryCount']}"
    log = host.get("LogConfig") or {}
    return {"volumes": [tuple(bind.split(":", 2)) for bind in host.get("Binds") or []], "mounts": [_mount(m) for m in host.get("Mounts") or []],
            "networks": [host["NetworkMode"]] if host.get("NetworkMode") and host["NetworkMode"] != "default" else [],
            "ipc": host.get("IpcMode") or None, "pid": host.get("PidMode") or None, "uts": host.get("UTSMode") or None,
            "userns": host.get("UsernsMode") or None, "cgroupns": host.get("CgroupnsMode") or None, "shm_size": host.get("ShmSize") or None,
            "privileged": bool(host.get("Privileged")), "cap_add": list(host.get("CapAdd") or []), "cap_drop": list(host.get("CapDrop") or []),
            "devices": [f"{d['PathOnHost']}:{d['PathInContainer']}:{d.get('CgroupPermissions') or 'rwm'}" for d in host.get("Devices") or []],
            "gpus": _gpus(host.get("DeviceRequests") or []), "ulimit": [f"{u['Name']}={u['Soft']}:{u['Hard']}" for u in host.get("Ulimits") or []],
            "restart": None if policy == "no" else policy, "remove": bool(host.get("AutoRemove")), "init": bool(host.get("Init")),
            "security_options": list(host.get("SecurityOpt") or []), "groups_add": list(host.get("GroupAdd") or []),
            "memory": host.get("Memory") or None, "memory_swap": host.get("MemorySwap") or None,
            "memory_reservation": host.get("MemoryReservation") or None, "pids_limit": host.get("PidsLimit") or None,
            "cpuset_cpus": _cpus(host.get("CpusetCpus")), "cpuset_mems": _cpus(host.get("CpusetMems")),
            "cpus": host["NanoCpus"] / 1e9 if host.get("NanoCpus") else None, "cpu_shares": host.get("CpuShares") or None,
            "runtime": host.get("Runtime") or None, "sysctl": dict(host.get("Sysctls") or {}), "add_hosts": [tuple(h.split(":", 1)) for h in host.get("ExtraHosts") or []],
            "dns": list(host.get("Dns") or []), "dns_options": list(host.get("DnsOptions") or []), "dns_search": list(host.get("DnsSearch") or []),
            "tmpfs": [f"{path}:{opts}" if opts else path for path, opts in (host.get("Tmpfs") or {}).items()],
            "log_driver": log.get("Type") or None, "log_options": [f"{k}={v}" for k, v in (log.get("Config") or {}).items()],
            "oom_score_adj": host.get("OomScoreAdj") or None, "oom_kill": not host.get("OomKillDisable"), "read_only": bool(host.get("ReadonlyRootfs")),
            "publish": _published(host.get("PortBindings") or {}), "publish_all": bool(host.get("PublishAllPorts")),
            "cgroup_parent": host.get("CgroupParent") or None}


def _mount(mount: Mapping[str, Any]) -> list[str]:
    fields = [f"type={mount.get('Type', 'bind')}", f"target={mount['Target']}"]
    if mount.get("Source"):
        fields.append(f"source={mount['Source']}")
    if mount.get("ReadOnly"):
        fields.append("readonly")
    propagation = (mount.get("BindOptions") or {}).get("Propagation")
    if propagation:
        fields.append(f"bind-propagation={propagation}")
    return fields


def _gpus(requests: list[Mapping[str, Any]]) -> str | None:
    for request in requests:
        if ["gpu"] in (request.get("Capabilities") or []) or request.get("Driver") == "nvidia":
            if request.get("DeviceIDs"):
                return "device=" + ",".join(request["DeviceIDs"])
            return "all" if request.get("Count", -1) == -1 else str(request["Count"])
    return None


def _cpus(text: Any) -> list[int] | None:
    if not text:
        return None
    cpus: list[int] = []
    for part in str(text).split(","):
        low, _, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


def _published(bindings: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """("[address:]host port", container port, protocol) for every binding that names a host port."""
    published = []
    for port, hosts in bindings.items():
        number, _, protocol = str(port).partition("/")
        for binding in hosts or []:
            host_port, address = binding.get("HostPort") or "", binding.get("HostIp") or ""
            if host_port:
                published.append((f"{address}:{host_port}" if address else host_port, number, protocol or "tcp"))
    return published
