"""Load deploy.yaml: the nodes (any docker host string), their roles, and the launcher's restart command."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import jsonschema

from kvbake.errors import ManifestError
from kvbake.manifest import describe_schema_error, parse_yaml
from kvbake.manifest_text import check_strings

HOST_CREDENTIAL_FIX = ("remove it from the file; an ssh host may name a user (ssh://user@node), "
                       "the key or password comes from the ssh agent or ~/.ssh/config")


@dataclass(frozen=True)
class Node:
    """One serving node: one tensor-parallel rank, reached through its docker host."""

    name: str
    host: str
    role: str


@dataclass(frozen=True)
class Launcher:
    """The operator's restart command; kvbake runs it once per node with the node's DOCKER_HOST."""

    command: tuple[str, ...]
    container: str
    timeout_s: float


@dataclass(frozen=True)
class Deployment:
    """Where releases go; the state folder beside the file holds the journal and the release records."""

    path: Path
    nodes: tuple[Node, ...]
    launcher: Launcher
    lock_stale_after_s: float

    @property
    def state_dir(self) -> Path:
        return self.path.parent / ".kvbake" / "deploy"


def load_deployment(path: Path) -> Deployment:
    """Read, check and freeze the deployment file; every failure is a ManifestError naming the file."""
    path = Path(path).absolute()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ManifestError(f"deployment file {path.name} not found", "pass --deploy PATH (see README: Deploy, rollback and recovery)") from None
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
    launcher = document["launcher"]
    return Deployment(
        path=path,
        nodes=tuple(Node(n["name"], n["host"], n["role"]) for n in document["nodes"]),
        launcher=Launcher(tuple(launcher["command"]), launcher["container"], float(launcher.get("timeout_s", 300))),
        lock_stale_after_s=float(document.get("lock_stale_after_s", 900)),
    )
