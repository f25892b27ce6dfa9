"""The manifest and deployment file `init` writes from a serve's description, and the placeholders left to fill."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from kvbake.serve.core.serve_description import Drafter, NodeServe, ServeDescription
from kvbake.serve.core.vllm_argv import parse_serve_args

PLACEHOLDER_REGISTRY = "registry.example.internal:5000"
PLACEHOLDER_REVISION = "0" * 40
LAUNCHER_COMMAND = ["kvbake-launch-vllm"]
LAUNCHER_CONTAINER = "vllm-serve"
DEFAULT_PORT = "8000"
CONTROL = "control"


@dataclass(frozen=True)
class InitOptions:
    """What the operator gave init beside the nodes: the registry, the donor's URL and revision."""

    registry: str = ""
    donor_url: str = ""
    donor_revision: str = ""
    launcher: tuple[str, ...] = tuple(LAUNCHER_COMMAND)
    kept_base: str = ""  # the template's base.image when it already names the image the nodes run
    signing_keys: tuple[str, ...] = ()  # the reviewers' public keys, relative to the project folder
    capture: bool = False  # the chain is the files the serve runs over its image (init --capture), not the template's


@dataclass(frozen=True)
class Placeholder:
    """A value init could not read from the serve: where it is and the command (or edit) that fills it."""

    where: str
    fix: str


def manifest_document(template: Mapping[str, Any], described: ServeDescription, options: InitOptions) -> dict[str, Any]:
    """The template (chain, switches, presets) with the serve's base, control's length and every preset's arguments."""
    document = copy.deepcopy(dict(template))
    document["base"] = {**document["base"], "image": options.kept_base or described.base.image}
    donor = dict(document.get("donor") or {})
    donor.update({key: value for key, value in (("url", options.donor_url), ("revision", options.donor_revision)) if value})
    document["donor"] = donor
    for name, preset in document["presets"].items():
        preset["launcher_args"] = list(described.launcher_args)
        if name == CONTROL:
            preset["max_model_len"] = described.max_model_len
            preset["note"] = "the serve the nodes ran when init read them: its arguments, no switch set" + (
                "; its length as its /v1/models said (it was started without --max-model-len)" if described.length_from_api else "")
    if described.drafter is not None:
        document["drafter"] = {"max_positions": drafter_limit(described), "note": drafter_note(described.drafter)}
    if options.registry:
        repository = str(document["output"]["repository"]).split("/", 1)
        document["output"] = {**document["output"], "repository": f"{options.registry}/{repository[-1]}"}
    return document


def drafter_limit(described: ServeDescription) -> int:
    """The positions the drafter serves: what its /v1/models says, else what the serve gives it, else the serve's length."""
    return described.drafter.limit or described.max_model_len


def drafter_note(drafter: Drafter) -> str:
    if drafter.served_positions:
        return "what the drafter's /v1/models said it serves when init read it"
    if drafter.max_positions:
        return "as the serve gave it (the drafter did not answer /v1/models)"
    return "the length the serve ran with this drafter (which did not answer /v1/models); raise only after the drafter serves more"


def is_hub_id(model: str) -> bool:
    """A model named by its Hugging Face id (`org/name`), not a path in the container."""
    return bool(model) and not model.startswith(("/", ".", "~"))


def model_settings(described: ServeDescription) -> dict[str, str]:
    """MODEL_DIR, the model's folder on the nodes (the mount's source, plus the subfolder the serve names), or MODEL, the
    hub id vLLM fetches into its cache."""
    if described.mounts.model_dir:
        return {"MODEL_DIR": described.mounts.model_dir}
    if is_hub_id(described.model):
        return {"MODEL": described.model}
    return {"MODEL_DIR": ""}


def serve_port(described: ServeDescription) -> str:
    """The API port the serve's arguments give, else vLLM's default."""
    return parse_serve_args(["model", *described.launcher_args]).value("--port") or DEFAULT_PORT


def api_url(described: ServeDescription) -> str:
    """Where the head's API answers: its address (loopback when the serve named none) and the serve's port."""
    return f"http://{described.addresses.get(described.head) or '127.0.0.1'}:{serve_port(described)}"


def launcher_env(described: ServeDescription, source_root: str) -> dict[str, str]:
    """The reference launcher's variables that start the same serve: model folder, ports, shape, env, mounts, drafter."""
    env = {**model_settings(described), "VLLM_PORT": serve_port(described), "SOURCE_ROOT": source_root,
           "GPUS": "all" if described.gpus else "none", "SHAPE": described.shape}
    if not parse_serve_args(["model", *described.launcher_args]).given("--served-model-name"):
        env["SERVED_MODEL_NAME"] = described.model  # vLLM names the model by the path it was given; clients use that name
    if described.master_port:
        env["MASTER_PORT"] = described.master_port
    if described.shape == "ray" and described.ray_port:
        env["RAY_PORT"] = described.ray_port
    if described.shape == "ray" and described.ray_start:
        env["RAY_START_ARGS"] = json.dumps(list(described.ray_start))
    if described.shm_size:
        env["SHM_SIZE"] = described.shm_size
    if described.tensor_parallel_size:
        env["TENSOR_PARALLEL_SIZE"] = described.tensor_parallel_size
    container_env = dict(described.env)
    if described.host_ip_by_address:
        container_env["VLLM_HOST_IP"] = "{node_address}"
    if container_env:
        env["CONTAINER_ENV"] = json.dumps(container_env, sort_keys=True)
    if described.mounts.read_only:
        env["EXTRA_MOUNTS"] = json.dumps(list(described.mounts.read_only))
    if described.drafter is not None:
        env["DRAFTER_ARGS"] = json.dumps([described.drafter.option, described.drafter.template])
    if described.secrets:
        env["SECRET_ENV"] = json.dumps(list(described.secrets))
    return env


def deploy_document(nodes: Sequence[NodeServe], described: ServeDescription, source_root: str,
                    launcher: Sequence[str] = tuple(LAUNCHER_COMMAND), signing_keys: Sequence[str] = ()) -> dict[str, Any]:
    """The deployment file: every node (head first) with its serving container, the reference launcher, readiness, and
    a signature required of every release (with the reviewers' keys given, or none yet: a placeholder)."""
    ordered = sorted(nodes, key=lambda n: n.node != described.head)
    entries = []
    for node in ordered:
        entry: dict[str, Any] = {"name": node.node, "host": node.host, "role": "head" if node.node == described.head else "worker"}
        if described.addresses.get(node.node):
            entry["address"] = described.addresses[node.node]
        entry["container"] = node.name
        if described.node_launch.get(node.node):
            entry["launch"] = dict(described.node_launch[node.node])
        entries.append(entry)
    document: dict[str, Any] = {
        "format": 1, "nodes": entries,
        "launcher": {"command": list(launcher), "container": LAUNCHER_CONTAINER, "timeout_s": 600,
                     "env": {k: v for k, v in launcher_env(described, source_root).items() if v}},
        "start": "workers-first" if len(entries) > 1 and described.shape != "ray" else "in-order",  # a Ray head first: workers join it
        "readiness": {"url": f"{api_url(described)}/health", "status": 200, "timeout_s": 1800, "interval_s": 2},
    }
    if described.drafter is not None:
        document["drafter"] = {"url": described.drafter.url, "max_positions": drafter_limit(described)}
    document["signing"] = {"require_signature": True, "keys": list(signing_keys)}
    return document


def placeholders(manifest: Mapping[str, Any], deploy: Mapping[str, Any], described: ServeDescription) -> list[Placeholder]:
    """Every value still to fill, each with the command or edit that fills it."""
    found = []
    if str(manifest["output"]["repository"]).startswith(PLACEHOLDER_REGISTRY):
        found.append(Placeholder("manifest.yaml output.repository", "run init again with --registry HOST:PORT (your private registry)"))
    chain = manifest.get("chain") or ()
    captured = bool(chain) and all(entry.get("role") == "captured" for entry in chain)
    if str((manifest.get("donor") or {}).get("revision")) == PLACEHOLDER_REVISION and not captured:
        found.append(Placeholder("manifest.yaml donor.revision",
                                 "run init again with --donor-revision REV (the reviewed donor commit), then lock --donor CHECKOUT"))
    if not described.mounts.model_dir and not is_hub_id(described.model):
        found.append(Placeholder("deploy.yaml launcher.env.MODEL_DIR",
                                 "the serve's model is not in a bind-mounted folder: set MODEL_DIR to the model folder on the nodes"))
    missing = [node["name"] for node in deploy["nodes"] if "address" not in node]
    if missing and len(deploy["nodes"]) > 1:
        found.append(Placeholder(f"deploy.yaml nodes[].address of {', '.join(missing)}",
                                 "set each node's address (how the other ranks reach it; the serve named none)"))
    if not (deploy.get("signing") or {}).get("keys"):
        found.append(Placeholder("deploy.yaml signing.keys",
                                 "run init again with --signing-key PUB for each reviewer (python build.py keys makes a pair); "
                                 "deploy and rollback refuse an unsigned image until a key is listed"))
    if not described.base.by_digest and str(manifest["base"]["image"]) == described.base.image:
        found.append(Placeholder("manifest.yaml base.image (no registry digest)",
                                 "the nodes' image came from no registry: lock pins its config digest; `base sync` puts it into "
                                 "the private registry"))
    return found
