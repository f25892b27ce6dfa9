"""Adapter: a node's adopted serve, set aside while kvbake serves and brought back exactly, in every serve shape."""

# Adopted: its restart policy becomes `no` (kvbake alone starts and stops it now; undoing the adoption gives it back).
# Set aside: its restart policy is `no` (a reboot cannot start it next to kvbake's serve), it is stopped (a --rm
# container is then gone) and renamed to its kept name. Brought back: kvbake's serving container goes, the kept
# container gets its name and restart policy back and starts, or, when it is gone, a container is recreated from the
# recorded create spec on the serve's copy (its writable layer, committed by adopt); in the exec shape the recorded vLLM
# command line is exec'd into it again.

from __future__ import annotations

import os
import time
from typing import Any, Mapping

from kvbake.engines.adapters.client import Engine
from kvbake.errors import RolloutError
from kvbake.launcher.core.launch_plan import to_main_log
from kvbake.secret_env import missing_secrets, restore_args
from kvbake.ship.core.adopted_copy import as_recorded, copy_of, image_to_recreate
from kvbake.ship.core.create_spec import create_spec, spec_differences, with_secrets
from kvbake.ship.core.release import Release

START_WAIT_S = 30.0


def serve_name(adopted: Release, default: str) -> str:
    """The adopted serve's own container name (records of an earlier kvbake name none: the launcher's)."""
    return str(adopted.adopted.get("name") or default)


def is_the_adopted(container: Mapping[str, Any] | None, info: Mapping[str, Any]) -> bool:
    """That very container, or one recreated from its recorded spec (the same create spec, whatever its name)."""
    if container is None:
        return False
    if container.get("Id") == info.get("container_id"):
        return True
    spec = info.get("spec")
    return bool(spec) and not spec_differences(without_restart_policy(spec), without_restart_policy(as_recorded(create_spec(container), info)))


def without_restart_policy(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The spec less its restart policy, which kvbake itself turns off while the serve is set aside."""
    return {**spec, "host": {key: value for key, value in (spec.get("host") or {}).items() if key != "RestartPolicy"}}


def find(engine: Engine, adopted: Release, default: str) -> dict[str, Any] | None:
    """The adopted serve's container now, under its own name or its kept name, or None."""
    info = adopted.adopted
    for name in (serve_name(adopted, default), adopted.kept_as, info.get("container_id")):
        found = engine.container_inspect(str(name)) if name else None
        if is_the_adopted(found, info):
            return found
    return None


def set_aside(engine: Engine, node: str, adopted: Release, default: str) -> None:
    """Stop the adopted serve and keep it under its kept name, never restarted at boot; nothing to do when it is gone
    or already set aside."""
    found = find(engine, adopted, default)
    if found is None:
        return
    container_id = str(found["Id"])
    if not (found.get("HostConfig") or {}).get("AutoRemove"):
        engine.set_restart_policy(container_id, "no")
    if (found.get("State") or {}).get("Running"):
        engine.stop(container_id)
    if engine.container_inspect(container_id) is not None and str(found.get("Name", "")).lstrip("/") != adopted.kept_as:
        if not engine.rename_container(container_id, str(adopted.kept_as)) and engine.container_inspect(container_id) is not None:
            raise RolloutError(f"node {node}: the adopted serve could not be kept as {adopted.kept_as} (the name is taken)",
                               f"remove or rename the container {adopted.kept_as} on that node, then retry")


def bring_back(engine: Engine, node: str, adopted: Release, default: str, kvbake_container: str) -> None:
    """Replace kvbake's serving container by the adopted serve, exactly as it ran, started afresh (a running one is
    stopped first): the ranks of a gang start together."""
    info, name = adopted.adopted, serve_name(adopted, default)
    found = find(engine, adopted, default)
    if found is not None and (found.get("State") or {}).get("Running"):
        # Still serving (its node was never set aside, or a set-aside stopped half-way): its peers restart now, and a
        # rank left running would miss them (a head whose exec'd vLLM lost its worker), so it restarts with the gang;
        # only a --rm serve that could not be recreated stays as it runs.
        if not recreatable(found, info):
            return
        engine.stop(str(found["Id"]))  # a --rm one is gone now, and recreated from its spec below
        found = find(engine, adopted, default)
    if found is None and not info.get("spec"):
        raise RolloutError(f"node {node}: the adopted serving container {adopted.kept_as} is gone and an earlier kvbake recorded no "
                           "create spec to recreate it", "deploy a kvbake release instead (python build.py deploy --preset NAME)")
    if not is_the_adopted(engine.container_inspect(kvbake_container), info):  # set aside half-way, it may still hold that name
        engine.remove_container(kvbake_container)
    if found is None:
        engine.recreate(with_secrets(spec_to_recreate(engine, node, info), os.environ), name)
    else:
        if str(found.get("Name", "")).lstrip("/") != name and not engine.rename_container(str(found["Id"]), name):
            raise RolloutError(f"node {node}: the adopted serve cannot take its name {name} back (another container holds it)",
                               f"remove that container {name}, then roll back again")
        restore_restart_policy(engine, found, info)
    engine.start(name)
    if info.get("ray_exec"):  # the Ray node docker exec started beside the main process: up before vLLM is exec'd
        exec_again(engine, node, name, info["ray_exec"], wait=True)
    if info.get("exec"):
        exec_again(engine, node, name, info["exec"])


def spec_to_recreate(engine: Engine, node: str, info: Mapping[str, Any]) -> dict[str, Any]:
    """The recorded create spec on the adopted serve's copy (its writable layer as adopt found it: a launcher's mods
    included), or on its own image when an earlier kvbake made no copy."""
    image, copy = image_to_recreate(info), copy_of(info)
    if copy and engine.image_id_of(image) is None:
        raise RolloutError(f"node {node}: the adopted serve's copy {copy['reference']} is gone from the node, "
                           "so its serve cannot be recreated with what its container held", "roll forward to a kvbake release instead "
                           "(python build.py deploy --preset NAME), or start the serve again with its launcher and adopt it anew")
    return {**info["spec"], "image": image}


def recreatable(container: Mapping[str, Any], info: Mapping[str, Any]) -> bool:
    """Whether the adopted serve survives being set aside: kept when stopped, or recreated from its recorded spec (a
    --rm container recorded by an earlier kvbake, with no spec, would be lost)."""
    return not (container.get("HostConfig") or {}).get("AutoRemove") or bool(info.get("spec"))


def hand_over_restart_policy(engine: Engine, adopted: Release | None, default: str, to_kvbake: bool) -> None:
    """`adopt` turns the adopted serve's restart policy off: from then on kvbake alone stops and starts it, and neither
    the engine nor a crash loop starts it beside kvbake's serve. Undoing the adoption gives the policy back; a --rm
    serve has none."""
    found = find(engine, adopted, default) if adopted is not None else None
    if found is None or (found.get("HostConfig") or {}).get("AutoRemove"):
        return
    if to_kvbake:
        engine.set_restart_policy(str(found["Id"]), "no")
    else:
        restore_restart_policy(engine, found, adopted.adopted)


def restore_restart_policy(engine: Engine, container: Mapping[str, Any], info: Mapping[str, Any]) -> None:
    """The adopted serve's own restart policy again (a --rm container has none)."""
    if not (container.get("HostConfig") or {}).get("AutoRemove"):
        recorded = (((info.get("spec") or {}).get("host") or {}).get("RestartPolicy") or {}).get("Name")
        engine.set_restart_policy(str(container["Id"]), str(info.get("restart") or recorded or "no"))


def exec_again(engine: Engine, node: str, name: str, command: Mapping[str, Any], wait: bool = False) -> None:
    """Start the adopted serve's vLLM (or its Ray node) again the way it was started: `docker exec -d` of its command
    line, with the environment it was given on top of the container's, its working directory and its user; with
    `wait`, until the command returns (`ray start` returns once its node runs)."""
    deadline = time.monotonic() + START_WAIT_S
    while not ((engine.container_inspect(name) or {}).get("State") or {}).get("Running"):
        if time.monotonic() > deadline:
            raise RolloutError(f"node {node}: the adopted container {name} did not start within {START_WAIT_S:g} s",
                               f"read its log (docker logs {name}) on that node")
        time.sleep(0.2)
    secrets = {secret: os.environ[secret] for secret in command.get("secret_env") or ()}
    argv = restore_args(command["argv"], {secret: os.environ[secret] for secret in command.get("secret_args") or ()})
    engine.exec_detached(name, argv if wait else to_main_log(argv), {**(command.get("env") or {}), **secrets}, command.get("cwd"),
                         command.get("user"), wait=wait)


def secrets_needed(adopted: Release) -> tuple[str, ...]:
    """The secret variables bringing this adopted serve back may need: its container's (variables, and values withheld
    from its command line and labels), its exec'd vLLM's and its Ray node's."""
    info = adopted.adopted or {}
    carriers = (info.get("spec") or {}, info.get("exec") or {}, info.get("ray_exec") or {})
    return tuple(sorted({name for carrier in carriers for key in ("secret_env", "secret_args") for name in carrier.get(key) or ()}))


def refuse_missing_secrets(releases: Mapping[str, Release | None]) -> None:
    """Before anything moves: an adopted serve this command (or its revert) may bring back needs its secrets from the
    environment kvbake runs in."""
    for node, release in releases.items():
        missing = missing_secrets(secrets_needed(release), os.environ) if release is not None and release.adopted else []
        if missing:
            raise RolloutError(f"node {node}: the adopted serve needs {', '.join(missing)} to come back, which this environment does not set",
                               f"export {' '.join(missing)} where kvbake runs (kvbake records secrets by name only), then retry; nothing was changed")


def release_kept(engine: Engine, adopted: Release, default: str) -> bool:
    """Remove the set-aside adopted container (`adopt --release`); False when there was none. A serving one stays."""
    found = find(engine, adopted, default)
    if found is None or (found.get("State") or {}).get("Running"):
        return False
    engine.remove_container(str(found["Id"]))
    return True
