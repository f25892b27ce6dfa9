"""The fleet: one engine per node of the deployment, and what every rank must hold (switch names, baked paths)."""

from __future__ import annotations

from dataclasses import dataclass

from kvbake.bake.core.provenance import switch_names
from kvbake.bake.core.thin_layer import in_image
from kvbake.deployfile import Deployment, Node
from kvbake.engines.adapters.client import Engine
from kvbake.errors import EngineError, RolloutError
from kvbake.lock import Lock
from kvbake.manifest import Manifest
from kvbake.ship.core.release import Release
from kvbake.ship.adapters.node_identity import config_digest_on, repository_of
from kvbake.ship.core.running import adopted_rank_failures, expected_image_id, rank_failures


@dataclass(frozen=True)
class Fleet:
    """The nodes of a deployment with one engine each, and what a rank must never diverge on."""

    deployment: Deployment
    engines: dict[str, Engine]
    repository: str
    switch_names: tuple[str, ...]
    baked_paths: tuple[str, ...]
    source_root: str = ""

    def node(self, name: str) -> Node:
        return next(n for n in self.deployment.nodes if n.name == name)

    def tag(self, kind: str) -> str:
        return f"{self.repository}:{kind}"

    def expected_id(self, name: str, release: Release) -> tuple[str, str]:
        """The Id this node's store gives the release's image, and its meaning."""
        return expected_image_id(self.engines[name].profile().store, release.config_digest, release.image)

    def rank_failures(self, name: str, container: dict | None, image: dict | None, release: Release,
                      switches: dict[str, str] | None = None) -> list[str]:
        """How one rank differs from its release (an adopted serve by its own rules); `switches` overrides the set."""
        expected = dict(release.switches) if switches is None else switches
        if release.adopted:
            return adopted_rank_failures(name, container, image, release, self.switch_names, expected)
        running = config_digest_on(self.engines[name], image, repository_of(release.image)) if image else None
        return rank_failures(name, container, image, release.layers, release.labels, expected, self.switch_names, self.baked_paths,
                             self.expected_id(name, release), self.source_root, config_digest=(running, release.config_digest),
                             image_config=release.image_config)


def connect(deployment: Deployment) -> dict[str, Engine]:
    """One engine per node; an unreachable node stops everything before any change."""
    engines = {}
    for node in deployment.nodes:
        engine = Engine(node.host)
        try:
            engine.ping()
        except EngineError as err:
            # The engine's message already names the host ("<host> is unreachable (…)"): the node is named once beside it.
            raise RolloutError(f"node {node.name}: {err.message}", "bring the node's engine back, then retry; nothing was changed") from None
        engines[node.name] = engine
    return engines


def baked_paths(lock: Lock) -> tuple[str, ...]:
    return tuple("/" + in_image(lock.source_root, f.path) for f in lock.files)


def make_fleet(deployment: Deployment, manifest: Manifest, lock: Lock) -> Fleet:
    return Fleet(deployment, connect(deployment), manifest.output.repository, switch_names(manifest), baked_paths(lock), lock.source_root)
