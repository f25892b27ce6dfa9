"""Pure checks of what a rank runs: image layers and labels, the exact switch set in Env, no bind mount over baked files."""

from __future__ import annotations

import posixpath
from typing import Any, Mapping, Sequence

from kvbake.engines.core.detection import store_named
from kvbake.errors import PresetError
from kvbake.serve.core.serve_description import CODE_OVERRIDES
from kvbake.serve.core.serve_reading import RAY_WORKER
from kvbake.ship.core.adopted_copy import as_recorded, runs_the_copy
from kvbake.ship.core.create_spec import create_spec, spec_differences
from kvbake.ship.core.release import RUNTIME_KEYS, runtime_config


def parse_expect(text: str) -> dict[str, str]:
    """`--expect "A=1,B=2"`; an empty string means no switch may be set."""
    expected: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise PresetError(f"--expect item {item!r} is not NAME=VALUE", 'write --expect "NAME=VALUE,NAME=VALUE", or --expect "" for none')
        expected[name] = value
    return expected


def switch_env(env: Sequence[str] | None, names: Sequence[str]) -> dict[str, str]:
    """The declared and forbidden switches a container's Env sets, with their values."""
    result = {}
    for item in env or ():
        name, _, value = item.partition("=")
        if name in names:
            result[name] = value
    return result


def mount_failures(mounts: Sequence[Mapping[str, Any]] | None, baked: Sequence[str]) -> list[str]:
    """A bind mount may not cover a baked file or any directory above one: that would undo the bake."""
    failures = []
    for mount in mounts or ():
        destination = str(mount.get("Destination", "")).rstrip("/") or "/"
        prefix = destination if destination.endswith("/") else destination + "/"
        covered = [path for path in baked if path == destination or path.startswith(prefix)]
        if covered:
            failures.append(f"a {mount.get('Type', 'bind')} mount at {destination} covers baked file {covered[0]}")
    return failures


def override_failures(env: Sequence[str] | None, image_env: Sequence[str] | None, mounts: Sequence[Mapping[str, Any]] | None,
                      source_root: str) -> list[str]:
    """A container may not set a code-selecting variable the image does not set the same way, nor mount anything over
    the source root, inside it or above it: either would run other code than the baked chain."""
    own = dict(item.partition("=")[::2] for item in image_env or ())
    failures = []
    for item in env or ():
        name, _, value = item.partition("=")
        if name in CODE_OVERRIDES and own.get(name) != value:
            failures.append(f"{name} is set to {value!r} in the container, not as the image sets it ({own.get(name, 'unset')!r})")
    root = source_root.rstrip("/")
    for mount in mounts or ():
        destination = str(mount.get("Destination", "")).rstrip("/") or "/"
        above = root == destination or root.startswith(destination.rstrip("/") + "/")
        if above or destination.startswith(root + "/"):
            where = "over or above" if above else "inside"
            failures.append(f"a {mount.get('Type', 'bind')} mount at {destination} is {where} the source root {root}")
    return failures


def workdir_failures(container: Mapping[str, Any]) -> list[str]:
    """A mount over (or above) the container's working directory, or one that puts a `vllm` package or module right in
    it, may hold a `vllm` that `python -m` imports before the baked one (it puts the working directory first on sys.path).
    A container without a working directory runs in /."""
    workdir = str((container.get("Config") or {}).get("WorkingDir") or "/").rstrip("/") or "/"
    failures = []
    for mount in container.get("Mounts") or ():
        destination = str(mount.get("Destination", "")).rstrip("/") or "/"
        kind = mount.get("Type", "bind")
        if workdir == destination or workdir.startswith(destination.rstrip("/") + "/"):
            failures.append(f"a {kind} mount at {destination} holds the working directory {workdir}, "
                            "which python -m searches before the baked sources")
        elif destination in (posixpath.join(workdir, "vllm"), posixpath.join(workdir, "vllm.py")):
            failures.append(f"a {kind} mount at {destination} puts a vllm in the working directory {workdir}, "
                            "which python -m searches before the baked sources")
    return failures


def expected_image_id(store: str, config_digest: str, pinned: str) -> tuple[str, str]:
    """The Id a node's store gives the release's image, and what it is: the config digest on the classic store, the
    pulled manifest's digest (`repo@sha256:…`) on the containerd store."""
    image_store = store_named(store)
    return image_store.pulled_id(config_digest, pinned), image_store.id_meaning


def rank_failures(node: str, container: Mapping[str, Any] | None, image: Mapping[str, Any] | None, layers: Sequence[str],
                  labels: Mapping[str, str], baked: Sequence[str], image_id: tuple[str, str] | None = None, source_root: str | None = None, *,
                  config_digest: tuple[str | None, str] | None = None, image_config: Mapping[str, Any] | None = None) -> list[str]:
    """Every way one rank's container and image differ from the release it should run; `image_id` is (expected Id, its
    meaning) on this node, `config_digest` (the running image's, the release's) kvbake's identity on either store,
    `image_config` the release image's Env, Entrypoint, Cmd and WorkingDir. The switch set is checked where it acts, in
    each serving process's environment (process_checks): a `docker exec -e` never shows in the container's Env."""
    if container is None:
        return [f"{node}: the serving container is not there"]
    failures = []
    if not (container.get("State") or {}).get("Running"):
        failures.append(f"{node}: the serving container is not running")
    if image_id is not None and container.get("Image") != image_id[0]:
        failures.append(f"{node}: the container runs image {str(container.get('Image'))[:19]}, not the release's {image_id[1]} {image_id[0][:19]}")
    if config_digest is not None and config_digest[0] != config_digest[1]:
        failures.append(f"{node}: the running image's config is {str(config_digest[0])[:19]}, not the release's {config_digest[1][:19]}")
    if image is None or list(image.get("RootFS", {}).get("Layers", [])) != list(layers):
        failures.append(f"{node}: the running image's layers differ from the release")
    image_labels = ((image or {}).get("Config") or {}).get("Labels") or {}
    failures += [f"{node}: label {k} differs" for k in sorted(set(labels) | set(image_labels)) if image_labels.get(k) != labels.get(k)]
    if image is not None and image_config is not None:
        found = runtime_config(image.get("Config"))
        failures += [f"{node}: the running image's {key} is {found[key]!r}, not the release's {image_config.get(key)!r}"
                     for key in RUNTIME_KEYS if found[key] != image_config.get(key)]
    failures += [f"{node}: {m}" for m in mount_failures(container.get("Mounts"), baked)]
    failures += [f"{node}: {m}" for m in workdir_failures(container)]
    if source_root:
        image_env = ((image or {}).get("Config") or {}).get("Env")
        unflagged = [m for m in container.get("Mounts") or () if not mount_failures([m], baked)]
        failures += [f"{node}: {m}" for m in override_failures((container.get("Config") or {}).get("Env"), image_env, unflagged, source_root)]
    return failures


def adopted_rank_failures(node: str, container: Mapping[str, Any] | None, image: Mapping[str, Any] | None, release: Any) -> list[str]:
    """An adopted serve must be that very container again (or one recreated from its recorded spec, on its own image or
    on the copy of its writable layer adopt committed), running that image; its own mounts and overrides are what it
    always ran with, so they are not flagged. Its switch set is checked in its processes (process_checks)."""
    if container is None:
        return [f"{node}: the adopted serving container is not there"]
    failures = []
    spec = release.adopted.get("spec")
    recreated = as_recorded(create_spec(container), release.adopted)
    if container.get("Id") != release.adopted["container_id"] and (not spec or spec_differences(spec, recreated)):
        failures.append(f"{node}: the serving container is {str(container.get('Id'))[:12]}, not the adopted {release.adopted['container_id'][:12]}"
                        + (" nor one recreated from its spec" if spec else ""))
    if not (container.get("State") or {}).get("Running"):
        failures.append(f"{node}: the adopted serving container is not running")
    own_layers = image is not None and list(image.get("RootFS", {}).get("Layers", [])) == list(release.layers)
    if not own_layers and not runs_the_copy(container, image, release.adopted, release.layers):
        failures.append(f"{node}: the running image's layers differ from the adopted serve's")
    return failures


def agreement_failures(observed: Mapping[str, tuple]) -> list[str]:
    """All ranks must run the same layers and, serve by serve, the same switch set and arguments (less those that differ
    per rank): `observed` holds each rank's (layers, serves) signature."""
    serving = {value for value in observed.values() if value[1] != RAY_WORKER}  # a Ray worker rank runs no vLLM serve
    if len(serving) <= 1 and len({value[0] for value in observed.values()}) <= 1:
        return []
    return ["the ranks disagree: " + "; ".join(f"{node} runs {len(v[0])} layers with {describe_serves(v[1])}" for node, v in sorted(observed.items()))]


def describe_serves(serves: tuple) -> str:
    """(switch set, model, arguments) of each serve, for people."""
    if serves == RAY_WORKER:
        return "a Ray node (the head's vLLM places its workers there)"
    if not serves:
        return "no vLLM serve"
    return " and ".join(f"{dict(switches) or 'no switches'}, {len(arguments)} arguments" for switches, _, arguments in serves)
