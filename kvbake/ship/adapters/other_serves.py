"""Adapter: the vLLM serves a node runs beside the ones kvbake knows (its launcher's container, the adopted serve)."""

# One GPU node, one serve: a second vLLM serve (an old launcher's, a container recreated by hand after adopt) would share
# the GPU with kvbake's, and a tensor-parallel rank that shares its GPU either fails to start or starves.

from __future__ import annotations

from kvbake.engines.adapters.client import Engine
from kvbake.errors import EngineError, RolloutError
from kvbake.ship.adapters import adopted_serve
from kvbake.ship.adapters.fleet import Fleet
from kvbake.ship.core.noderecords import NodeRecords
from kvbake.serve.core.serve_reading import read_serve, serves_in_commands


def serving_containers(engine: Engine) -> dict[str, str]:
    """Every running container of the node whose processes include a vLLM serve: its ID -> its name."""
    found = {}
    for name in engine.running_containers():
        if runs_a_serve(engine, name):
            inspect = engine.container_inspect(name)
            if inspect is not None:
                found[str(inspect["Id"])] = name
    return found


def runs_a_serve(engine: Engine, name: str) -> bool:
    """Whether a running container runs a vLLM serve. A container the python3 probe cannot read (an image without
    python3 can still run a vLLM from a bundled interpreter) is read through the engine's `docker top` instead; when
    neither reads it, it is named rather than passed over."""
    try:
        return bool(read_serve(engine.processes(name)).serving)
    except EngineError as probe:
        try:
            return serves_in_commands([command for _, command in engine.top(name)])
        except EngineError as top:
            raise EngineError(f"could not read {name}: {probe.message}; {top.message}",
                              "check that the container still runs and the node's engine answers, then retry") from None


def known_serves(fleet: Fleet, node: str, records: NodeRecords) -> set[str]:
    """The IDs of the serving containers kvbake accounts for on a node: the adopted serve, and its launcher's container
    unless the node serves the adopted serve (then a container under the launcher's name is someone else's)."""
    engine, launcher_name = fleet.engines[node], fleet.deployment.launcher.container
    known = set()
    launcher = engine.container_inspect(launcher_name)
    if launcher is not None and not (records.current and records.current.adopted):
        known.add(str(launcher["Id"]))
    for release in (records.adopted, records.current, records.previous):
        if release is not None and release.adopted:
            found = adopted_serve.find(engine, release, launcher_name)
            if found is not None:
                known.add(str(found["Id"]))
    return known


def other_serves(fleet: Fleet, node: str, records: NodeRecords) -> list[str]:
    """The names of the node's running containers that run a vLLM serve kvbake does not account for, sorted."""
    known = known_serves(fleet, node, records)
    return sorted(name for container_id, name in serving_containers(fleet.engines[node]).items() if container_id not in known)


def refuse_other_serves(fleet: Fleet, records: dict[str, NodeRecords]) -> None:
    """Before anything moves: a node that runs a vLLM serve kvbake does not account for is refused, named."""
    for node, node_records in records.items():
        others = other_serves(fleet, node, node_records)
        if others:
            raise RolloutError(f"node {node} runs another vLLM serve in {', '.join(others)} (neither kvbake's nor the adopted one): "
                               "a second serve on one GPU node", "stop that container and retire the launcher that starts it (or adopt "
                               "it instead of the current serve), then retry; nothing was changed")
