"""Pure checks over image inspect data and read-back hashes; each returns every failure, not just the first."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from kvbake.errors import IntegrityError


@dataclass(frozen=True)
class Expectation:
    """What a derived image must look like; layer_diff_id and config_digest are None for the docker builder.
    `store_id` is the ID this engine's store must report (config digest or manifest digest), when kvbake predicted it."""

    base_diff_ids: tuple[str, ...]
    labels: Mapping[str, str]
    switch_names: tuple[str, ...]
    layer_diff_id: str | None
    config_digest: str | None
    max_new_layers: int = 1
    store_id: str | None = None
    id_meaning: str = "config digest"


def env_names(env: Sequence[str] | None) -> set[str]:
    return {item.split("=", 1)[0] for item in env or ()}


def layer_failures(layers: Sequence[str], expected: Expectation) -> list[str]:
    failures = []
    base = list(expected.base_diff_ids)
    if list(layers[: len(base)]) != base:
        failures.append("the base layers are not a prefix of the image's layers")
    new = list(layers[len(base):])
    if expected.layer_diff_id is not None:
        if len(new) != 1:
            failures.append(f"expected exactly one new layer, found {len(new)}")
        elif new[0] != expected.layer_diff_id:
            failures.append(f"the new layer {new[0][:19]} is not the thin layer {expected.layer_diff_id[:19]}")
    elif not 1 <= len(new) <= expected.max_new_layers:
        failures.append(f"expected 1 to {expected.max_new_layers} new layers, found {len(new)}")
    return failures


def label_failures(labels: Mapping[str, str] | None, expected: Mapping[str, str]) -> list[str]:
    labels = labels or {}
    failures = [f"label {k} is {labels.get(k)!r}, expected {v!r}" for k, v in sorted(expected.items()) if labels.get(k) != v]
    own = [k for k in labels if k.startswith("org.kvbake.") and k not in expected]
    failures += [f"unexpected label {k}" for k in sorted(own)]
    return failures


def env_failures(env: Sequence[str] | None, switch_names: Sequence[str]) -> list[str]:
    present = sorted(env_names(env) & set(switch_names))
    return [f"switch {name} is set in the image Env (every switch must default off)" for name in present]


def image_failures(inspect: Mapping[str, Any], expected: Expectation) -> list[str]:
    """Every way the inspected image differs from the expectation. `ConfigDigest` is the adapter's resolved
    config digest (the Id on the classic store, the manifest's config on the containerd store)."""
    config = inspect.get("Config") or {}
    failures = layer_failures(inspect.get("RootFS", {}).get("Layers", []), expected)
    failures += label_failures(config.get("Labels"), expected.labels)
    failures += env_failures(config.get("Env"), expected.switch_names)
    if expected.config_digest is not None and inspect.get("ConfigDigest") != expected.config_digest:
        failures.append(f"config digest {str(inspect.get('ConfigDigest'))[:19]} is not the reproducible {expected.config_digest[:19]}")
    if expected.store_id is not None and inspect.get("Id") != expected.store_id:
        failures.append(f"image ID {str(inspect.get('Id'))[:19]} is not the predicted {expected.id_meaning} {expected.store_id[:19]}")
    return failures


def file_failures(found: Mapping[str, str | None], expected: Mapping[str, str]) -> list[str]:
    """Read-back file hashes against the lock's overlay hashes."""
    failures = []
    for path, want in sorted(expected.items()):
        got = found.get(path)
        if got is None:
            failures.append(f"{path} is missing from the image")
        elif got != want:
            failures.append(f"{path} has sha256 {got[:12]}…, the lock says {want[:12]}…")
    return failures


def raise_if_failed(what: str, failures: Sequence[str]) -> None:
    if failures:
        raise IntegrityError(f"{what}: {len(failures)} check(s) failed: {'; '.join(failures)}",
                             "do not use this image; rebuild it with python build.py")


def moved_tag(reference: str, now: str, pinned: str) -> tuple[str, str]:
    """The cause and fix when the base reference the lock pinned names another image now: the upstream tag moved."""
    return (f"{reference} now names another image (config {now}), not the one the lock pins (config {pinned})",
            f"to move the chain to the new image, run python build.py rebase --to {reference} and review its report; to keep "
            "the locked base, load that image again (better: pin base.image by digest)")


def platform_of(inspect: Mapping[str, Any]) -> str:
    return f"{inspect.get('Os')}/{inspect.get('Architecture')}"


def base_failures(inspect: Mapping[str, Any], config_digest: str, diff_ids: Sequence[str], platform: str) -> list[str]:
    """The local base against the lock: config digest (however the store names the image), diff_ids and platform."""
    failures = []
    if inspect.get("ConfigDigest") != config_digest:
        failures.append(f"config digest {str(inspect.get('ConfigDigest'))[:19]} differs from the lock's {config_digest[:19]}")
    layers = list(inspect.get("RootFS", {}).get("Layers", []))
    if layers != list(diff_ids):
        failures.append(f"diff_ids differ from the lock ({len(layers)} layers here, {len(diff_ids)} locked)")
    if platform_of(inspect) != platform:
        failures.append(f"platform {platform_of(inspect)} differs from the lock's {platform}")
    return failures
