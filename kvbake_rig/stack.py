"""The whole rig in one folder: a registry, N node engines (the last one behind ssh) and a state file."""

from __future__ import annotations

import json
import shutil
import string
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from python_on_whales import DockerClient

from kvbake.errors import KvbakeError
from kvbake_rig import node_engine, registry, sshd
from kvbake_rig.logins import Credentials, login, write_htpasswd
from kvbake_rig.node_engine import NodeEngine
from kvbake_rig.registry import LocalRegistry
from kvbake_rig.sshd import LoopbackSshd, prepare_ssh_client

STATE_FILE = "state.json"
STATE_FORMAT = 1
CREATED_ENTRIES = ("registry", "nodes", "ssh-client", "sshd", "docker-config", "htpasswd", STATE_FILE)


@dataclass(frozen=True)
class RigOptions:
    """What `up` starts: how many nodes, and whether the registry uses TLS and htpasswd auth."""

    nodes: int = 2
    tls: bool = False
    auth: bool = False


def node_name(index: int) -> str:
    """node-a, node-b, ..."""
    return f"node-{string.ascii_lowercase[index]}"


def _start_registry(folder: Path, options: RigOptions, stack: ExitStack) -> dict[str, Any]:
    credentials = Credentials.generate() if options.auth else None
    htpasswd = write_htpasswd(folder / "htpasswd", credentials) if credentials else None
    username = credentials.username if credentials else None
    service = LocalRegistry(folder / "registry", tls=options.tls, htpasswd=htpasswd, username=username)
    running = stack.enter_context(service)
    state = running.to_state()
    if credentials is not None:
        config_dir = folder / "docker-config"
        config_dir.mkdir(parents=True, exist_ok=True)
        login(DockerClient(config=str(config_dir)), running.address, credentials)
        state["docker_config"] = str(config_dir)
    return state


def _start_nodes(folder: Path, count: int, stack: ExitStack) -> list[dict[str, Any]]:
    ssh_client = prepare_ssh_client(folder / "ssh-client")
    nodes = []
    for index in range(count):
        name = node_name(index)
        engine = stack.enter_context(NodeEngine(folder / "nodes" / name, name=name))
        state = {"engine": engine.to_state(), "host": engine.host, "start_seconds": engine.last_start_seconds}
        if count > 1 and index == count - 1:
            gateway = stack.enter_context(LoopbackSshd(folder / "sshd" / name, ssh_client, engine.host))
            state["ssh"] = gateway.to_state()
            state["host"] = gateway.ssh_host()
        nodes.append(state)
    return nodes


def rig_up(folder: Path, options: RigOptions) -> dict[str, Any]:
    """Start everything, write `folder/state.json` and leave it running; on failure stop what started."""
    if options.nodes < 1 or options.nodes > 26:
        raise KvbakeError(f"--nodes {options.nodes} is out of range", fix="use 1 to 26 nodes")
    state_path = folder / STATE_FILE
    if state_path.exists():
        raise KvbakeError(f"a rig already runs from {folder}", fix="run `down` for that folder first")
    folder.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        state = {
            "format": STATE_FORMAT,
            "registry": _start_registry(folder, options, stack),
            "nodes": _start_nodes(folder, options.nodes, stack),
            "ssh_client": str(folder / "ssh-client"),
        }
        state_path.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
        stack.pop_all()
    return state


def read_state(folder: Path) -> dict[str, Any]:
    """The state file `rig_up` wrote."""
    try:
        return json.loads((folder / STATE_FILE).read_text())
    except FileNotFoundError as err:
        raise KvbakeError(f"no rig state in {folder}", fix="run `up` first") from err


def rig_down(folder: Path) -> None:
    """Stop every process the state file names, remove engine trust entries, mounts and rig folders."""
    state = read_state(folder)
    for node in reversed(state["nodes"]):
        if "ssh" in node:
            sshd.stop_from_state(node["ssh"])
        node_engine.close_from_state(node["engine"])
    registry.stop_from_state(state["registry"])
    for entry in CREATED_ENTRIES:
        path = folder / entry
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()


def rig_env(folder: Path) -> dict[str, str]:
    """Variables that point a shell at the rig; KVBAKE_RIG_SSH_BIN belongs first on PATH."""
    state = read_state(folder)
    env = {
        "KVBAKE_RIG_STATE": str(folder / STATE_FILE),
        "KVBAKE_RIG_REGISTRY": state["registry"]["address"],
        "KVBAKE_RIG_SSH_BIN": str(sshd.SshClientFiles(Path(state["ssh_client"])).bin_dir),
    }
    for index, node in enumerate(state["nodes"]):
        env[f"KVBAKE_RIG_{node_name(index).upper().replace('-', '_')}"] = node["host"]
    if "docker_config" in state["registry"]:
        env["DOCKER_CONFIG"] = state["registry"]["docker_config"]
    return env
