"""Load deploy.yaml: the nodes (any docker host string), their roles and launch settings, the launcher, the start order and readiness probe."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Mapping

import jsonschema

from kvbake.errors import ManifestError
from kvbake.names import trapped_name
from kvbake.launcher.core.node_launch import LaunchInputError, NodeLaunch, read_node_launch, refuse_over_source_root, refuse_switches
from kvbake.yaml_documents import check_strings, describe_schema_error, parse_yaml

HOST_CREDENTIAL_FIX = ("remove it from the file; an ssh host may name a user (ssh://user@node), "
                       "the key or password comes from the ssh agent or ~/.ssh/config")


RESERVED_ENV_PREFIX = "KVBAKE_"


@dataclass(frozen=True)
class Node:
    """One serving node: one tensor-parallel rank, reached through its docker host."""

    name: str
    host: str
    role: str
    address: str = ""
    container: str = ""  # the serve this node runs without kvbake, for adopt (default: the launcher's container)
    launch: NodeLaunch = field(default_factory=NodeLaunch)  # its own container settings (nodes[].launch)


@dataclass(frozen=True)
class Launcher:
    """The operator's restart command; kvbake runs it once per node with the node's DOCKER_HOST."""

    command: tuple[str, ...]
    container: str
    timeout_s: float
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Readiness:
    """When a serve counts as up: GET `url` answers `status`, within `timeout_s` of the last rank's start."""

    url: str
    status: int = 200
    timeout_s: float = 600.0
    interval_s: float = 1.0


@dataclass(frozen=True)
class Drafter:
    """The remote drafter the head uses: its URL and the positions it serves (passed to the launcher)."""

    url: str
    max_positions: int | None = None


@dataclass(frozen=True)
class Signing:
    """Whose signature a release needs before any node moves to it: the reviewers' public keys (read when the file is)."""

    require_signature: bool = False
    keys: tuple[Path, ...] = ()


PUBLIC_KEY_HEADER = "-----BEGIN PUBLIC KEY-----"


@dataclass(frozen=True)
class Deployment:
    """Where releases go; the state folder beside the file holds the journal and the release records."""

    path: Path
    nodes: tuple[Node, ...]
    launcher: Launcher
    lock_stale_after_s: float
    start: str = "in-order"
    readiness: Readiness | None = None
    drafter: Drafter | None = None
    signing: Signing = field(default_factory=Signing)

    @property
    def state_dir(self) -> Path:
        return self.path.parent / ".kvbake" / "deploy"

    def start_groups(self) -> tuple[tuple[str, ...], ...]:
        """The node names in the order their launchers run; the names of one group start together."""
        names = tuple(n.name for n in self.nodes)
        if self.start == "together":
            return (names,)
        if self.start == "workers-first":
            groups = (tuple(n.name for n in self.nodes if n.role == "worker"), tuple(n.name for n in self.nodes if n.role == "head"))
            return tuple(group for group in groups if group)
        return tuple((name,) for name in names)

    def head(self) -> Node | None:
        return next((n for n in self.nodes if n.role == "head"), None)


def load_deployment(path: Path) -> Deployment:
    """Read, check and freeze the deployment file; every failure is a ManifestError naming the file."""
    path = Path(path).absolute()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ManifestError(f"deployment file {path.name} not found", "pass --deploy PATH (see docs/deploy.md: Deploy, rollback and recovery)") from None
    except OSError as err:
        raise ManifestError(f"deployment file {path.name} unreadable: {err.strerror}", "pass --deploy PATH of a readable file") from None
    document = parse_yaml(raw, path.name)
    check_strings(document, path.name, prose_fields=(), any_userinfo=False, credential_fix=HOST_CREDENTIAL_FIX)
    schema = json.loads(resources.files("kvbake").joinpath("schema/deploy.schema.json").read_text())
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(document), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        raise ManifestError(f"{path.name}: {'; '.join(describe_schema_error(e) for e in errors)}", "fix the deployment file")
    names = [n["name"] for n in document["nodes"]]
    if len(set(names)) != len(names):
        raise ManifestError(f"{path.name}: node names repeat", "give every node a unique name")
    heads = [n["name"] for n in document["nodes"] if n["role"] == "head"]
    if len(heads) > 1:
        raise ManifestError(f"{path.name}: more than one head ({', '.join(heads)})", "give exactly one node role: head; the others are workers")
    launcher = document["launcher"]
    trap = trapped_name(launcher["container"])
    if trap:
        raise ManifestError(f"{path.name}: launcher.container {launcher['container']} is a name a launcher's exit trap stops ({trap}): "
                            "kvbake's serve would be stopped by a launcher that is still running",
                            "give kvbake's serving container a name of its own (launcher.container: vllm-serve, as init writes)")
    env = dict(launcher.get("env", {}))
    reserved = sorted(name for name in env if name.startswith(RESERVED_ENV_PREFIX) or name == "DOCKER_HOST")
    if reserved:
        raise ManifestError(f"{path.name}: launcher.env sets {', '.join(reserved)}, which kvbake sets itself",
                            "remove them; kvbake passes DOCKER_HOST and every KVBAKE_* variable to the launcher")
    return Deployment(
        path=path,
        nodes=tuple(Node(n["name"], n["host"], n["role"], n.get("address", ""), n.get("container", ""), node_launch(path, n))
                    for n in document["nodes"]),
        launcher=Launcher(tuple(launcher["command"]), launcher["container"], float(launcher.get("timeout_s", 300)), env),
        lock_stale_after_s=float(document.get("lock_stale_after_s", 900)),
        start=document.get("start", "in-order"),
        readiness=Readiness(**document["readiness"]) if "readiness" in document else None,
        drafter=Drafter(**document["drafter"]) if "drafter" in document else None,
        signing=read_signing(path, document.get("signing")),
    )


def read_signing(path: Path, section: Mapping | None) -> Signing:
    """The `signing` section: every listed key must be a readable public key. A required signature with no key listed
    is refused where a signature is checked (deploy, rollback), so that a new deployment file still adopts and reads."""
    if section is None:
        return Signing()
    keys = tuple((path.parent / name).absolute() for name in section.get("keys", []))
    for key in keys:
        try:
            text = key.read_text(encoding="utf-8", errors="replace")
        except OSError as err:
            raise ManifestError(f"{path.name}: signing key {key.name} cannot be read ({err.strerror})",
                                "list each reviewer's cosign.pub, relative to the deployment file (python build.py keys makes a pair)") from None
        if not text.lstrip().startswith(PUBLIC_KEY_HEADER):
            raise ManifestError(f"{path.name}: signing key {key.name} is not a cosign public key (no {PUBLIC_KEY_HEADER} line)",
                                "list the .pub file python build.py keys (or cosign generate-key-pair) wrote, never the private key")
    return Signing(bool(section["require_signature"]), keys)


def launch_where(node_name: str) -> str:
    return f"nodes[{node_name}].launch"


def node_launch(path: Path, node: Mapping) -> NodeLaunch:
    """A node's `launch:` settings, every value checked as the launcher checks it."""
    try:
        return read_node_launch(node.get("launch"), launch_where(node["name"]))
    except LaunchInputError as err:
        raise ManifestError(f"{path.name}: {err.cause}", err.fix) from None


def check_node_launches(deployment: Deployment, switch_names: tuple[str, ...], source_root: str) -> None:
    """What only the manifest and its lock know: no node sets a switch, no node's cache mount covers the Python sources.
    Checked before any engine call by every command that runs the launcher or inspects the nodes."""
    for node in deployment.nodes:
        try:
            refuse_switches(node.launch, switch_names, launch_where(node.name))
            if source_root:
                refuse_over_source_root(node.launch, source_root.rstrip("/"), launch_where(node.name))
        except LaunchInputError as err:
            raise ManifestError(f"{deployment.path.name}: {err.cause}", err.fix) from None
