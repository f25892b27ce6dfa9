"""Adapter: each node's write fence, advanced by a compare-and-swap rename on the node's engine before every write."""

# Why a host whose lock was broken writes nothing more: ARCHITECTURE.md, "Node locks".

from __future__ import annotations

import threading
from typing import Any, Callable

from kvbake.engines.adapters.client import Engine
from kvbake.errors import RolloutError
from kvbake.ship.core.fencing import FENCE_IMAGE, FENCE_LABEL, WRITES, fence_name, newest_generation

CLAIM_TRIES = 5


class NodeFence:
    """One node's fence as this host holds it: the generation it set last. A write first renames the fence container
    from that generation to the next; the rename fails once any other host has claimed the fence since."""

    def __init__(self, node: str, engine: Engine, prove_held: Callable[[], None]) -> None:
        self.node = node
        self.engine = engine
        self.prove_held = prove_held  # raises LockLost, naming the holder, when this host no longer holds the node's lock
        self.generation: int | None = None
        self._mutex = threading.Lock()

    def claim(self) -> None:
        """Take the node's next generation, whoever set the newest one, then prove that this host holds the node's lock:
        a host that lost its lock while it claimed stops here, and the holder's next write claims past it. The first
        fence of a node is created from an image that holds no file, so that it pins no release image."""
        for _ in range(CLAIM_TRIES):
            newest = newest_generation(self.engine.containers_labelled(FENCE_LABEL))
            if newest is None:
                self.engine.ensure_empty_image(FENCE_IMAGE)
                taken = self.engine.create_marker(FENCE_IMAGE, fence_name(1), {FENCE_LABEL: "1"}) is not None
            else:
                taken = self.engine.rename_container(fence_name(newest), fence_name(newest + 1))
            if taken:
                self.generation = 1 if newest is None else newest + 1
                self.prove_held()
                return
        raise RolloutError(f"node {self.node}: its write fence moved {CLAIM_TRIES} times while this host claimed it",
                           "check that no other operator host runs a deploy here, then retry")

    def before_write(self) -> None:
        """Advance the fence by one generation, atomically on the node, or claim it anew when another host moved it."""
        with self._mutex:
            if self.generation is not None and self.engine.rename_container(fence_name(self.generation), fence_name(self.generation + 1)):
                self.generation += 1
                return
            self.claim()


class FencedEngine:
    """A node's engine whose every write (the calls `fencing.WRITES` names) first advances the node's fence."""

    def __init__(self, engine: Engine, fence: NodeFence) -> None:
        self._engine = engine
        self._fence = fence

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._engine, name)
        if name not in WRITES:
            return attribute

        def fenced(*args: Any, **kwargs: Any) -> Any:
            self._fence.before_write()
            return attribute(*args, **kwargs)

        return fenced

    def before_write(self) -> None:
        self._fence.before_write()


def before_write(engine: Engine | FencedEngine) -> None:
    """Advance a fenced engine's fence before a write kvbake does not make itself (the operator's launcher)."""
    if isinstance(engine, FencedEngine):
        engine.before_write()
