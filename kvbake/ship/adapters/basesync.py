"""`build.py base sync`: the locked base once in the registry, then by digest on every node, named as deploy expects."""

# Idempotent; a node's tag that names another image moves only with --force.

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvbake.bake.adapters.builder import check_base
from kvbake.deployfile import Deployment
from kvbake.engines.adapters.client import Engine
from kvbake.errors import BaseImageError
from kvbake.lock import Lock
from kvbake.manifest import Manifest
from kvbake.registry.adapters.credentials import credentials_for
from kvbake.ship.adapters.fleet import connect
from kvbake.ship.adapters.node_identity import config_digest_on, repository_of
from kvbake.ship.adapters.pusher import Expected, Target, overwrite_refusal, read_back, ship, target_for
from kvbake.registry.adapters.registry_api import RegistryClient

BASE_TAG_PREFIX = "base-"


@dataclass(frozen=True)
class NodeBase:
    """What one node does: keep the base it holds, pull it, or move its tag from another image (--force)."""

    node: str
    action: str
    held: str | None


@dataclass(frozen=True)
class BaseSync:
    """The outcome: where the base is in the registry, whether it was pushed now, and every node's action."""

    pinned: str
    pushed: bool
    node_name: str
    nodes: tuple[NodeBase, ...]


def base_target(manifest: Manifest, lock: Lock, registry: str | None) -> Target:
    """The base's place in the private registry: the release repository, tagged by the base's config digest."""
    return target_for(f"{manifest.output.repository}:{BASE_TAG_PREFIX}{lock.base.config_digest[7:19]}", registry)


def expected_base(lock: Lock) -> Expected:
    labels = ((lock.base.config.get("config") or {}).get("Labels")) or {}
    return Expected(lock.base.config_digest, lock.base.diff_ids, dict(labels))


def held_config(engine: Engine, reference: str, repository: str) -> str | None:
    """The config digest of the image `reference` names on this engine, or None when it names nothing. On the
    containerd store the manifest comes from the registry's copy of the base (`repository`) when the node pulled it from
    there, so no `docker save` of the base crosses the node's link."""
    inspect = engine.inspect_image(reference)
    return config_digest_on(engine, inspect, repository) if inspect else None


def plan_nodes(engines: dict[str, Engine], name: str, lock: Lock, force: bool, repository: str) -> tuple[NodeBase, ...]:
    """Every node's action, decided before anything moves; a tag that names another image is refused without --force."""
    plans, refused = [], []
    for node, engine in engines.items():
        held = held_config(engine, name, repository)
        if held == lock.base.config_digest:
            plans.append(NodeBase(node, "present", held))
        elif held is None or force:
            plans.append(NodeBase(node, "pull" if held is None else "move", held))
        else:
            refused.append(f"node {node}: {name} names another image (config {held[:19]}), not the locked base ({lock.base.config_digest[:19]})")
    if refused:
        raise BaseImageError(f"{'; '.join(refused)}; nothing was moved",
                             "check what runs from that image; pass --force to move the tag (the other image stays, untagged)")
    return tuple(plans)


def registry_copy(engine: Engine, manifest: Manifest, lock: Lock, target: Target) -> tuple[str, bool]:
    """The base's pull reference in the registry, pushing it from this host first when the registry lacks it."""
    expected = expected_base(lock)
    with RegistryClient(target.registry, credentials_for(target.registry, engine.config_dir())) as client:
        existing = client.manifest(target.name, target.tag)
        if existing is not None:
            refusal = overwrite_refusal(existing, lock.base.config_digest, target)
            if refusal is not None:
                raise refusal
            return f"{target.repository}@{read_back(client, target, expected, None).digest}", False
        if engine.inspect_image(manifest.base.image) is None:
            raise BaseImageError(f"the locked base is not in the registry ({target.reference}), and {manifest.base.image} is not present on "
                                 f"{engine.label} to push it from", "pull or load the locked base on this host (kvbake never pulls it), then run base sync again")
        local = check_base(engine, manifest, lock)
        return ship(engine, client, target, expected, local.image_id).pinned, True


def pull_onto(engine: Engine, node: str, pinned: str, name: str, lock: Lock) -> None:
    """Pull by digest, check it is the locked base, then point `name` at it."""
    engine.pull(pinned)
    inspect: dict[str, Any] = engine.require_image(pinned)
    config, layers = config_digest_on(engine, inspect, repository_of(pinned)), tuple(inspect.get("RootFS", {}).get("Layers", []))
    if config != lock.base.config_digest or layers != lock.base.diff_ids:
        raise BaseImageError(f"node {node}: {pinned} pulled as config {config[:19]} with {len(layers)} layers, not the locked base",
                             "the registry holds other content under that digest: check the registry")
    engine.tag(inspect["Id"], name)


def sync_base(engine: Engine, deployment: Deployment, manifest: Manifest, lock: Lock, registry: str | None, force: bool) -> BaseSync:
    """Check every node, put the base in the registry once, then pull it by digest on every node that needs it."""
    engines = connect(deployment)
    name = manifest.base.node_name
    target = base_target(manifest, lock, registry)
    plans = plan_nodes(engines, name, lock, force, target.repository)
    pinned, pushed = registry_copy(engine, manifest, lock, target)
    for plan in plans:
        if plan.action != "present":
            pull_onto(engines[plan.node], plan.node, pinned, name, lock)
    return BaseSync(pinned, pushed, name, plans)
