"""`build.py push`: push the verified image once, read it back from the registry, count the new bytes, record it."""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Mapping

from kvbake import __version__
from kvbake.bake.core.build_record import write_json_record
from kvbake.bake.core.plan import Plan
from kvbake.engines.adapters.client import Engine
from kvbake.errors import RegistryError
from kvbake.registry.adapters.credentials import credentials_for
from kvbake.registry.adapters.registry_api import RegistryClient, RemoteManifest, split_repository
from kvbake.ship.core.push_record import PUSHES_DIR

log = logging.getLogger(__name__)
KNOWN_TAGS_LIMIT = 50


@dataclass(frozen=True)
class Target:
    """Where the image goes: registry host, repository path in it, and tag."""

    registry: str
    name: str
    tag: str

    @property
    def repository(self) -> str:
        return f"{self.registry}/{self.name}"

    @property
    def reference(self) -> str:
        return f"{self.repository}:{self.tag}"


def target_for(reference: str, registry: str | None = None) -> Target:
    """The plan's `repo:tag`, with the registry host replaced by `registry` when given."""
    repository, _, tag = reference.rpartition(":")
    host, name = split_repository(repository)
    if registry:
        host = registry.strip().removeprefix("https://").removeprefix("http://").rstrip("/")
        if not host or "/" in host:
            raise RegistryError(f"--registry {registry!r} is not HOST[:PORT]", "pass the registry as HOST:PORT, e.g. 127.0.0.1:5000")
    return Target(host, name, tag)


@dataclass(frozen=True)
class Expected:
    """What the registry must hand back: the local config digest, diff_ids and labels."""

    config_digest: str
    diff_ids: tuple[str, ...]
    labels: Mapping[str, str]


def readback_failures(manifest: RemoteManifest, config: Mapping[str, Any], expected: Expected) -> list[str]:
    """Every way the registry's manifest and config differ from the local image (pure)."""
    failures = []
    if manifest.config_digest != expected.config_digest:
        failures.append(f"config digest {manifest.config_digest} is not the local image's {expected.config_digest}")
    diff_ids = tuple((config.get("rootfs") or {}).get("diff_ids") or ())
    if diff_ids != expected.diff_ids:
        failures.append(f"diff_ids are {len(diff_ids)} other layers, not the lock's base plus the thin layer ({len(expected.diff_ids)})")
    if len(manifest.layers) != len(expected.diff_ids):
        failures.append(f"the manifest lists {len(manifest.layers)} layers, the image has {len(expected.diff_ids)}")
    labels = (config.get("config") or {}).get("Labels") or {}
    if dict(labels) != dict(expected.labels):
        changed = sorted(set(labels.items()) ^ set(expected.labels.items()))
        failures.append(f"labels differ ({', '.join(sorted({k for k, _ in changed}))})")
    return failures


def overwrite_refusal(existing: RemoteManifest, config_digest: str, target: Target) -> RegistryError | None:
    """None when the tag already holds this image (same config digest); else the refusal (release tags are write-once)."""
    if existing.config_digest == config_digest:
        return None
    held = existing.config_digest or f"a {existing.media_type} {existing.digest}"
    return RegistryError(f"{target.reference} already holds other content (config {held}; the local image's config is {config_digest}); "
                         "release tags are never overwritten",
                         "bump the manifest and re-lock (a new lock gives a new tag), or set another output.tag")


@dataclass(frozen=True)
class Upload:
    """Which blobs of the pushed manifest were new to the registry, and their compressed bytes."""

    new_layers: tuple[tuple[str, int], ...]
    present_layers: tuple[tuple[str, int], ...]
    config_bytes: int
    config_new: bool
    thin_layer_compressed_bytes: int

    @property
    def uploaded_bytes(self) -> int:
        return sum(size for _, size in self.new_layers) + (self.config_bytes if self.config_new else 0)


def account(manifest: RemoteManifest, present_before: set[str]) -> Upload:
    """Split the manifest's blobs into new and already present (pure); the thin layer is the last one."""
    layers = manifest.layers
    config = manifest.data.get("config") or {}
    return Upload(tuple(layer for layer in layers if layer[0] not in present_before),
                  tuple(layer for layer in layers if layer[0] in present_before),
                  int(config.get("size") or 0), config.get("digest") not in present_before, layers[-1][1] if layers else 0)


def human_bytes(size: int) -> str:
    """1536 → '1.5 KB' (powers of 1024)."""
    value, unit = float(size), "B"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1024 or unit == "TB":
            break
        value /= 1024
    return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"


def upload_summary(upload: Upload) -> str:
    """'pushed 1 new layer, 2.1 KB (+ config 1.2 KB); 1 base layer already present'."""
    count = len(upload.new_layers)
    text = f"pushed {count} new layer{'s' * (count != 1)}, {human_bytes(sum(s for _, s in upload.new_layers))}"
    if upload.config_new:
        text += f" (+ config {human_bytes(upload.config_bytes)})"
    present = len(upload.present_layers)
    return text + f"; {present} base layer{'s' * (present != 1)} already present"


@dataclass(frozen=True)
class PushResult:
    """A pushed (or already present) release: the registry's manifest and what the push uploaded."""

    target: Target
    manifest: RemoteManifest
    upload: Upload
    image_id: str  # the pushing engine's own ID of the image (config or manifest digest, by its store)
    already_present: bool

    @property
    def pinned(self) -> str:
        """`repo@sha256:…`: what nodes pull."""
        return f"{self.target.repository}@{self.manifest.digest}"


def present_blobs(client: RegistryClient, target: Target, config_digest: str) -> set[str]:
    """Blobs of this repository the registry holds before the push: its tags' layers and our config, HEAD-checked."""
    candidates = {config_digest}
    for tag in client.tags(target.name)[-KNOWN_TAGS_LIMIT:]:
        found = client.manifest(target.name, tag)
        candidates.update(digest for digest, _ in (found.layers if found else []))
    return {digest for digest in sorted(candidates) if client.has_blob(target.name, digest)}


def remote_config(client: RegistryClient, target: Target, manifest: RemoteManifest) -> Mapping[str, Any]:
    """The image config blob the manifest names, as a JSON object ({} for an index)."""
    if not manifest.config_digest:
        return {}
    blob = client.blob(target.name, manifest.config_digest)
    try:
        config = json.loads(blob)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        config = None
    if not isinstance(config, dict):
        raise RegistryError(f"the config blob {manifest.config_digest} of {target.reference} is not a JSON object",
                            "the manifest names another blob as its config; inspect the registry, then push under a new tag")
    return config


def read_back(client: RegistryClient, target: Target, expected: Expected, engine_digests: list[str] | None) -> RemoteManifest:
    """The registry's manifest for the tag, checked against the local image; the engine's RepoDigest must agree."""
    manifest = client.manifest(target.name, target.tag)
    if manifest is None:
        raise RegistryError(f"{target.reference} is absent from the registry right after the push", "check the registry, then push again")
    config = remote_config(client, target, manifest)
    failures = readback_failures(manifest, config, expected)
    pinned = f"{target.repository}@{manifest.digest}"
    if engine_digests is not None and pinned not in engine_digests:
        failures.append(f"the engine pushed another manifest ({', '.join(engine_digests) or 'none recorded'})")
    missing = [digest for digest, _ in manifest.layers if not client.has_blob(target.name, digest)]
    failures += [f"layer {digest} is missing from the registry" for digest in missing]
    if failures:
        raise RegistryError(f"{target.reference} does not read back as pushed: {'; '.join(failures)}",
                            "another push changed the tag or the registry altered it; inspect the registry, then push under a new tag")
    return manifest


@contextlib.contextmanager
def local_tag(engine: Engine, image_id: str, reference: str) -> Iterator[None]:
    """Tag the image as `reference` for the push; remove that tag again afterwards when kvbake added it."""
    existed = reference in (engine.inspect_image(image_id) or {}).get("RepoTags", [])
    if not existed:
        engine.tag(image_id, reference)
    try:
        yield
    finally:
        if not existed:
            engine.untag(reference)


def _expected(engine: Engine, plan: Plan) -> tuple[Expected, str]:
    """What the registry must read back (by config digest), and the local store's ID of the image."""
    from kvbake.bake.adapters.verifier import verify_image

    report = verify_image(engine, plan, plan.reference, deep=False)
    labels = engine.require_image(report.image_id)["Config"]["Labels"]
    return Expected(report.config_digest, (*plan.lock.base.diff_ids, plan.layer.diff_id), dict(labels)), report.image_id


def push_image(engine: Engine, plan: Plan, registry: str | None = None) -> PushResult:
    """Verify locally, refuse to overwrite, push once, read back, and count what was new to the registry."""
    target = target_for(plan.reference, registry)
    expected, store_id = _expected(engine, plan)
    with RegistryClient(target.registry, credentials_for(target.registry, engine.config_dir())) as client:
        return ship(engine, client, target, expected, store_id)


def ship(engine: Engine, client: RegistryClient, target: Target, expected: Expected, store_id: str) -> PushResult:
    """The push itself, on a checked local image: refuse to overwrite, push once, read back, count the new bytes."""
    existing = client.manifest(target.name, target.tag)
    if existing is not None:
        refusal = overwrite_refusal(existing, expected.config_digest, target)
        if refusal is not None:
            raise refusal
        manifest = read_back(client, target, expected, None)
        log.info("%s already holds %s; nothing to push", target.reference, manifest.digest)
        return PushResult(target, manifest, account(manifest, {d for d, _ in manifest.layers} | {expected.config_digest}), store_id, True)
    present = present_blobs(client, target, expected.config_digest)
    with local_tag(engine, store_id, target.reference):
        engine.push(target.reference)
        digests = [d for d in engine.require_image(target.reference).get("RepoDigests") or [] if d.startswith(target.repository + "@")]
    manifest = read_back(client, target, expected, digests)
    if manifest.raw:
        engine.remember_manifest(manifest.raw)
    return PushResult(target, manifest, account(manifest, present), store_id, False)


def push_record(result: PushResult) -> dict[str, Any]:
    """The push record: what was pushed where, and the bytes it cost; never a credential."""
    upload = result.upload
    return {
        "kvbake": __version__, "status": "already present" if result.already_present else "pushed",
        "reference": result.target.reference, "registry": result.target.registry, "pinned": result.pinned,
        "manifest_digest": result.manifest.digest, "media_type": result.manifest.media_type,
        "config_digest": result.manifest.config_digest, "image_id": result.image_id,
        "layers": [{"digest": d, "size": s, "new": (d, s) in upload.new_layers} for d, s in result.manifest.layers],
        "uploaded_bytes": upload.uploaded_bytes, "thin_layer_compressed_bytes": upload.thin_layer_compressed_bytes,
        "new_layers": len(upload.new_layers), "present_layers": len(upload.present_layers),
        "pushed_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def write_push_record(manifest_root: Path, record: dict[str, Any]) -> Path:
    return write_json_record(manifest_root / PUSHES_DIR, record["reference"], record)
