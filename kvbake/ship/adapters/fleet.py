"""The fleet: one engine per node of the deployment, and what every rank must hold (switch names, baked paths)."""

from __future__ import annotations

from dataclasses import dataclass

from kvbake.bake.core.provenance import switch_names
from kvbake.bake.core.thin_layer import in_image
from kvbake.deployfile import Deployment, Node
from kvbake.engines.adapters.client import Engine
from kvbake.engines.core.reach import node_reach_fix
from kvbake.errors import EngineError, RolloutError
from kvbake.lock import Lock
from kvbake.manifest import Manifest
from kvbake.ship.adapters import adopted_serve
from kvbake.ship.adapters.serve_reader import RankServe, read_rank
from kvbake.ship.adapters.served_files import foreign_hooks, layer_digests
from kvbake.ship.core.adopted_copy import compared_layers
from kvbake.ship.core.process_checks import (ProcessExpectation, change_failures, changes_since_adopt, edits_since_adopt,
                                             process_failures, process_signature, ray_worker_failures, switch_set)
from kvbake.serve.core.serve_reading import RAY_WORKER, read_serve
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.core.release import Release
from kvbake.ship.adapters.node_identity import config_digest_on, repository_of
from kvbake.ship.core.running import adopted_rank_failures, expected_image_id, rank_failures


@dataclass(frozen=True)
class RankCheck:
    """One rank checked: every failure, what it must share with the other ranks, and the switch set its serves run."""

    failures: tuple[str, ...]
    signature: tuple
    switches: dict[str, str]


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

    def serving_container_name(self, release: Release | None = None) -> str:
        """The name of the container that serves a release: the launcher's, or an adopted serve's own."""
        launcher_name = self.deployment.launcher.container
        return adopted_serve.serve_name(release, launcher_name) if release is not None and release.adopted else launcher_name

    def observe(self, name: str, release: Release | None = None) -> tuple[dict | None, dict | None]:
        """The container serving on a node (for an adopted release, the adopted serve's own) and its image."""
        engine, launcher_name = self.engines[name], self.deployment.launcher.container
        if release is not None and release.adopted:
            container = adopted_serve.find(engine, release, launcher_name) or engine.container_inspect(self.serving_container_name(release))
        else:
            container = engine.container_inspect(launcher_name)
        image = engine.inspect_image(container["Image"]) if container else None
        return container, image

    def rank_failures(self, name: str, container: dict | None, image: dict | None, release: Release) -> list[str]:
        """How one rank's container and image differ from its release (an adopted serve by its own rules)."""
        if release.adopted:
            return adopted_rank_failures(name, container, image, release)
        running = config_digest_on(self.engines[name], image, repository_of(release.image)) if image else None
        return rank_failures(name, container, image, release.layers, release.labels, self.baked_paths,
                             self.expected_id(name, release), self.source_root, config_digest=(running, release.config_digest),
                             image_config=release.image_config)

    def check_rank(self, name: str, release: Release, switches: dict[str, str] | None = None) -> RankCheck:
        """Everything verify-running checks on one rank: its container and image, then every vLLM serve process in it
        (switch set, code overrides, length, the preset's arguments, where `vllm` is imported from) and the files its
        writable layer changed under the source root. An adopted serve is held to what it ran when adopted."""
        container, image = self.observe(name, release)
        failures = self.rank_failures(name, container, image, release)
        layers = compared_layers(container or {}, image, release.adopted, release.layers)
        if not container or not (container.get("State") or {}).get("Running"):
            return RankCheck(tuple(failures), (layers, ()), {})
        serve = read_rank(self.engines[name], container)
        expected = dict(release.switches) if switches is None else switches
        if self.runs_as_ray_worker(name, release):
            failures += ray_worker_failures(name, serve.reading, expected, self.switch_names, self.head_serve_env())
            return RankCheck(tuple(failures), (layers, RAY_WORKER), expected)
        failures += self.process_failures(name, serve, release, expected, image, container)
        found = switch_set(serve.reading.serving[0].process.env, self.switch_names) if serve.reading.serving else {}
        return RankCheck(tuple(failures), (layers, process_signature(serve.reading, self.switch_names)), found)

    def head_serve_env(self) -> dict[str, str]:
        """The environment of the head's vLLM serve now, whose switches it hands its Ray workers; empty when none serves."""
        head = next((n.name for n in self.deployment.nodes if n.role == "head"), None)
        if head is None:
            return {}
        container, _ = self.observe(head, NodeState(head, self.engines[head]).read().current)
        if not container or not (container.get("State") or {}).get("Running"):
            return {}
        reading = read_serve(self.engines[head].processes(str(container["Id"])))
        return dict(reading.serving[0].process.env) if reading.serving else {}

    def runs_as_ray_worker(self, name: str, release: Release) -> bool:
        """Whether the rank serves through its Ray node alone: an adopted Ray worker, or a worker node of a deployment
        whose launcher starts the ray shape (SHAPE=ray: vLLM runs on the head, its workers here are Ray actors)."""
        if release.adopted:
            return release.adopted.get("shape") == RAY_WORKER
        return self.deployment.launcher.env.get("SHAPE") == "ray" and self.node(name).role == "worker"

    def process_failures(self, name: str, serve: RankServe, release: Release, switches: dict[str, str], image: dict | None,
                         container: dict) -> list[str]:
        image_env = tuple(((image or {}).get("Config") or {}).get("Env") or ())
        hooks = foreign_hooks(self.engines[name], container, serve, name)
        if release.adopted:
            expected = ProcessExpectation(switches, self.switch_names, image_env, release.max_model_len, (), self.source_root, baked=False)
            recorded = release.adopted.get("change_sha256") or {}
            return (process_failures(name, serve.reading, serve.origins, expected) + hooks
                    + changes_since_adopt(name, serve.changes, self.source_root, release.adopted.get("changes") or ())
                    + edits_since_adopt(name, recorded, layer_digests(self.engines[name], str(container["Id"]), sorted(recorded))))
        expected = ProcessExpectation(switches, self.switch_names, image_env, release.max_model_len, release.launcher_args, self.source_root)
        return process_failures(name, serve.reading, serve.origins, expected) + hooks + change_failures(name, serve.changes, self.source_root)


def connect(deployment: Deployment) -> dict[str, Engine]:
    """One engine per node; an unreachable node stops everything before any change."""
    engines = {}
    for node in deployment.nodes:
        engine = Engine(node.host)
        try:
            engine.ping()
        except EngineError as err:
            # The engine's message already names the host ("<host> is unreachable (…)"): the node is named once beside it.
            raise RolloutError(f"node {node.name}: {err.message}", f"{node_reach_fix(node.host)}, then retry; nothing was changed") from None
        engines[node.name] = engine
    return engines


def baked_paths(lock: Lock) -> tuple[str, ...]:
    return tuple("/" + in_image(lock.source_root, f.path) for f in lock.files)


def make_fleet(deployment: Deployment, manifest: Manifest, lock: Lock) -> Fleet:
    return Fleet(deployment, connect(deployment), manifest.output.repository, switch_names(manifest), baked_paths(lock), lock.source_root)
