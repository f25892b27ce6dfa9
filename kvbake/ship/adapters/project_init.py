"""`build.py init`: read the serve every node runs (changing nothing there) and write manifest.yaml and deploy.yaml."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from kvbake.atomicfile import write_atomic
from kvbake.bake.adapters.capture import write_captured
from kvbake.bake.adapters.served_proof import write_record_folder
from kvbake.bake.core.image_checks import platform_of
from kvbake.bake.core.served_overlay import SERVED_RECORD_DIR, ServedOverlay, agreed, misplaced_code_mounts, source_root_of
from kvbake.engines.adapters.client import Engine
from kvbake.errors import IntegrityError, UsageError
from kvbake.secret_env import SECRET_OPTIONS
from kvbake.ship.adapters.served_length import serve_length, served_positions
from kvbake.ship.adapters.serve_reader import RankServe, read_rank, serving_container
from kvbake.ship.adapters.served_files import image_files, read_served_overlay, refuse_foreign_hooks
from kvbake.ship.core.init_documents import InitOptions, Placeholder, api_url, deploy_document, manifest_document, placeholders
from kvbake.ship.core.process_checks import changed_files
from kvbake.serve.core.launcher_ties import launcher_ties, trap_ties
from kvbake.serve.core.serve_description import (PRIVILEGED_DEVICES, NodeServe, ServeDescription, describe, implied_preset,
                                               is_privileged, refuse_second_serves, require_serving, with_served_length)
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
    served: ServedOverlay | None = None
    served_record: Path | None = None
    captured: bool = False
    ties: tuple[str, ...] = ()  # how each serve is still tied to the launcher that started it (retire it before adopt)


def read_template(path: Path | None) -> dict[str, Any]:
    """The manifest init starts from: --template, else the packaged production manifest (chain, switches, presets)."""
    raw = path.read_bytes() if path is not None else resources.files("kvbake").joinpath(TEMPLATE).read_bytes()
    return parse_yaml(raw, path.name if path is not None else "the packaged manifest template")


@dataclass(frozen=True)
class NodeReading:
    """One node's serving container as init reads it, before the source root is known: its inspect data and its rank."""

    node: str
    host: str
    engine: Engine
    container: Mapping[str, Any]
    rank: RankServe


def read_node(node: str, host: str, named: str | None) -> NodeReading:
    """One node's serving container and what it runs, read through its engine; nothing on the node changes."""
    engine = Engine(host)
    name = serving_container(engine, node, named)
    container = engine.container_inspect(name)
    if not (container and (container.get("State") or {}).get("Running")):
        raise UsageError(f"init: {node} has no running container {name}", f"name the serving container of {node} with --container {node}=NAME")
    return NodeReading(node, host, engine, container, read_rank(engine, container))


def node_serve(reading: NodeReading, source_root: str) -> NodeServe:
    """The node as the description takes it, its writable layer's changes read under the serve's own source root."""
    rank = reading.rank
    ray = rank.reading.ray
    serving = require_serving(reading.node, rank.reading.serving, ray is not None)
    changes = tuple(path for path, _ in changed_files(rank.changes, source_root))
    devices = reading.engine.existing_paths(str(reading.container["Id"]), list(PRIVILEGED_DEVICES)) if is_privileged(reading.container) else ()
    return NodeServe(reading.node, reading.host, reading.container, serving, reading.engine.require_image(reading.container["Image"]),
                     changes, ray.argv if ray else (), dict(ray.env) if ray else {}, devices)


def serve_source_root(readings: Sequence[NodeReading]) -> str:
    """Where the serve imports `vllm` from, read from every rank that runs a vLLM process; ranks that differ refuse."""
    found = {}
    for reading in readings:
        for serving, origin in zip(reading.rank.reading.serving, reading.rank.origins):
            root = source_root_of(origin.origin)
            if root is None:
                raise IntegrityError(f"init: cannot tell where pid {serving.process.pid} on {reading.node} imports vllm from "
                                     f"({origin.error or origin.origin or 'it finds no vllm package'})",
                                     "start the serve so that its python3 imports vllm, then run init again")
            found.setdefault(root, reading.node)
    if len(found) != 1:
        shown = "; ".join(f"{node} imports vllm from {root}" for root, node in found.items()) or "no rank runs vLLM"
        raise IntegrityError(f"init: the ranks do not import vllm from one source root ({shown})",
                             "serve one image the same way on every rank, then run init again")
    return next(iter(found))


def check_template_base(template: Mapping[str, Any], source_root: str, platform: str, capture: bool) -> None:
    """A template whose chain was written for another source root or platform than the serve's is refused, both named
    (with --capture the chain comes from the serve itself)."""
    base = template["base"]
    if capture:
        return
    if str(base["source_root"]) != source_root:
        raise UsageError(f"init: the template's base.source_root is {base['source_root']}, but the serve imports vllm from {source_root}",
                         "use a template written for this image (--template), or run init --capture to bake the files the serve runs")
    if str(base["platform"]) not in (platform, "native"):
        raise UsageError(f"init: the template's base.platform is {base['platform']}, but the serve's image is {platform}",
                         "run init against the nodes the template's chain is for, or use a template written for this platform")


def refuse_misplaced_mounts(readings: Sequence[NodeReading], source_root: str) -> None:
    for reading in readings:
        misplaced = misplaced_code_mounts(reading.container, source_root)
        if misplaced:
            raise UsageError(f"init: {reading.node} mounts {', '.join(misplaced)}, which is not under the source root the serve "
                             f"imports vllm from ({source_root}): that code never runs",
                             "mount the patched files under the source root the serve imports (or drop the mount), then run init again")


def read_overlays(readings: Sequence[NodeReading], source_root: str) -> tuple[ServedOverlay, dict[str, bytes]]:
    """The files every rank runs over its image under the source root; ranks that run different bytes refuse."""
    read = {r.node: read_served_overlay(r.engine, r.container, r.rank.changes, source_root) for r in readings}
    overlay = agreed({node: found[0] for node, found in read.items()})
    return overlay, read[readings[0].node][1]


def write_served(out: Path, overlay: ServedOverlay, data: Mapping[str, bytes], nodes: Sequence[str]) -> Path:
    """The served-overlay record and the served bytes under `.kvbake/served/`, replaced whole."""
    return write_record_folder(out / SERVED_RECORD_DIR, overlay, data, nodes)


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
    """Read every node, describe the serve, and write manifest.yaml and deploy.yaml into `out` (only once all is read),
    with the files the serve runs over its image recorded under `.kvbake/served/` (and, with --capture, as the chain)."""
    targets = (out / "manifest.yaml", out / "deploy.yaml")
    refuse_existing(targets, force)
    document = read_template(template)
    switch_names = tuple(document.get("switches") or {}) + tuple(document.get("forbidden") or {})
    readings = [read_node(node, host, containers.get(node) or containers.get("")) for node, host in nodes]
    refuse_second_serves("init", {reading.node: reading.rank.reading for reading in readings})
    refuse_foreign_hooks("init", [(r.node, r.engine, r.container, r.rank) for r in readings])
    source_root = serve_source_root(readings)
    read = [node_serve(reading, source_root) for reading in readings]
    platform = platform_of(read[0].image)
    check_template_base(document, source_root, platform, options.capture)
    refuse_misplaced_mounts(readings, source_root)
    overlay, served_bytes = read_overlays(readings, source_root)
    described = with_drafter_answer(with_api_length(describe(read, switch_names, source_root)))
    kept = kept_base(str(document["base"]["image"]), described.base.image_id, host_of(nodes, described.head))
    document["base"] = {**document["base"], "source_root": source_root,
                        "platform": document["base"]["platform"] if document["base"]["platform"] == "native" else platform}
    if options.capture:
        document["chain"] = captured_chain(readings[0].engine, overlay, served_bytes, out)
    manifest = manifest_document(document, described, replace(options, kept_base=kept))
    deploy = deploy_document(read, described, source_root, options.launcher, options.signing_keys)
    record = write_served(out, overlay, served_bytes, [node for node, _ in nodes])
    for path, written in zip(targets, (manifest, deploy)):
        write_atomic(path, dump(written))
    ties = tuple(tie for r in readings for tie in [*launcher_ties(r.node, r.container, r.rank.reading), *trap_ties(r.node, r.container)])
    return InitResult(described, targets, implied_preset(described.switches, manifest["presets"]),
                      tuple(placeholders(manifest, deploy, described)), tuple(read), overlay, record, options.capture, ties)


def with_api_length(described: ServeDescription) -> ServeDescription:
    """The description with control's length: a serve without --max-model-len is asked what it serves, with the API key
    VLLM_API_KEY holds where init runs (the serve's own, by name)."""
    if described.max_model_len:
        return described
    return with_served_length(described, *serve_length(api_url(described), os.environ.get(SECRET_OPTIONS["--api-key"])))


def with_drafter_answer(described: ServeDescription) -> ServeDescription:
    """The description with the positions the remote drafter says it serves, when it answers."""
    if described.drafter is None:
        return described
    return replace(described, drafter=replace(described.drafter, served_positions=served_positions(described.drafter.url)))


def captured_chain(engine: Engine, overlay: ServedOverlay, data: Mapping[str, bytes], out: Path) -> list[dict[str, Any]]:
    """The chain `init --capture` writes: one patch per served file, from the image's bytes to the served ones."""
    if not overlay.files:
        raise UsageError("init --capture: the serve runs no file over its image under the source root, so there is nothing to capture",
                         "run init without --capture (the template's chain), or mount the overlay the serve should run first")
    base = image_files(engine, overlay.image_id, [f.path for f in overlay.files], overlay.source_root)
    return write_captured(overlay, data, base, out)
