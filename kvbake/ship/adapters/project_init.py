"""`build.py init`: read the serve every node runs (changing nothing there) and write manifest.yaml and deploy.yaml."""

from __future__ import annotations

from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from kvbake.atomicfile import write_atomic
from kvbake.engines.adapters.client import Engine
from kvbake.errors import UsageError
from kvbake.ship.adapters.serve_reader import read_rank
from kvbake.ship.core.init_documents import InitOptions, Placeholder, deploy_document, manifest_document, placeholders
from kvbake.ship.core.process_checks import changed_files
from kvbake.ship.core.serve_description import NodeServe, ServeDescription, choose_container, describe, implied_preset, require_serving
from kvbake.ship.core.serve_reading import read_serve, runs_ray_node
from kvbake.yaml_documents import parse_yaml

TEMPLATE = "data/production.manifest.yaml"
HEADER = "# Written by `kvbake init` from the serve the nodes ran; review it, then lock, build and push (docs/production.md).\n"


@dataclass(frozen=True)
class InitResult:
    """What init read and wrote: the description, the written files, the switch set's preset, and what is left to fill."""

    described: ServeDescription
    written: tuple[Path, ...]
    implied: str | None
    left: tuple[Placeholder, ...]
    nodes: tuple[NodeServe, ...]


def read_template(path: Path | None) -> dict[str, Any]:
    """The manifest init starts from: --template, else the packaged production manifest (chain, switches, presets)."""
    raw = path.read_bytes() if path is not None else resources.files("kvbake").joinpath(TEMPLATE).read_bytes()
    return parse_yaml(raw, path.name if path is not None else "the packaged manifest template")


def is_cluster_node(engine: Engine, name: str) -> bool:
    """Whether a running container's main process is a Ray node (`ray start --block`): a worker that runs no vLLM."""
    return runs_ray_node(read_serve(engine.processes(name)).main)


def serving_container(engine: Engine, node: str, named: str | None) -> str:
    """The node's serving container: the one named, else the one running container with a vLLM serve (or a Ray node)."""
    if named:
        return named
    running = engine.running_containers()
    serving = [name for name in running if read_serve(engine.processes(name)).serving]
    cluster = [] if serving else [name for name in running if is_cluster_node(engine, name)]
    return choose_container(node, serving, cluster)


def read_node(node: str, host: str, named: str | None, source_root: str) -> NodeServe:
    """One node's serve, read through its engine; nothing on the node changes."""
    engine = Engine(host)
    name = serving_container(engine, node, named)
    container = engine.container_inspect(name)
    if not (container and (container.get("State") or {}).get("Running")):
        raise UsageError(f"init: {node} has no running container {name}", f"name the serving container of {node} with --container {node}=NAME")
    rank = read_rank(engine, container)
    serving = require_serving(node, rank.reading.serving, runs_ray_node(rank.reading.main))
    changes = tuple(path for path, _ in changed_files(rank.changes, source_root))
    ray_node = tuple(rank.reading.main.argv) if runs_ray_node(rank.reading.main) else ()
    return NodeServe(node, host, container, serving, engine.require_image(container["Image"]), changes, ray_node)


def host_of(nodes: Sequence[tuple[str, str]], node: str) -> str:
    return next(host for name, host in nodes if name == node)


def kept_base(template_image: str, image_id: str, host: str) -> str:
    """The template's base reference when it already names the very image the nodes run (a lock made from it stays
    valid), else ""."""
    return template_image if Engine(host).image_id_of(template_image) == image_id else ""


def refuse_existing(paths: Sequence[Path], force: bool) -> None:
    existing = [p for p in paths if p.exists()]
    if existing and not force:
        raise UsageError(f"init: {', '.join(str(p) for p in existing)} already {'exists' if len(existing) == 1 else 'exist'}",
                         "run init in a new project folder (--out DIR), or pass --force to overwrite")


def dump(document: Mapping[str, Any]) -> bytes:
    return (HEADER + yaml.safe_dump(dict(document), sort_keys=False, width=120)).encode("utf-8")


def init_project(nodes: Sequence[tuple[str, str]], containers: Mapping[str, str], out: Path, template: Path | None,
                 options: InitOptions, force: bool) -> InitResult:
    """Read every node, describe the serve, and write manifest.yaml and deploy.yaml into `out` (only once all is read)."""
    targets = (out / "manifest.yaml", out / "deploy.yaml")
    refuse_existing(targets, force)
    document = read_template(template)
    source_root = str(document["base"]["source_root"])
    switch_names = tuple(document.get("switches") or {}) + tuple(document.get("forbidden") or {})
    read = [read_node(node, host, containers.get(node) or containers.get(""), source_root) for node, host in nodes]
    described = describe(read, switch_names, source_root)
    kept = kept_base(str(document["base"]["image"]), described.base.image_id, host_of(nodes, described.head))
    manifest = manifest_document(document, described, replace(options, kept_base=kept))
    deploy = deploy_document(read, described, source_root, options.launcher, options.signing_keys)
    for path, written in zip(targets, (manifest, deploy)):
        write_atomic(path, dump(written))
    return InitResult(described, targets, implied_preset(described.switches, manifest["presets"]),
                      tuple(placeholders(manifest, deploy, described)), tuple(read))
