"""Adapter: what trace finds again: the files beside the manifest, the registry's answer, and what every rank runs."""

from __future__ import annotations

import json
from pathlib import Path

from kvbake.bake.adapters.gitapply import patch_id
from kvbake.bake.core.chain import read_patch
from kvbake.bake.core.plan import make_plan, overlay_root, tag_for
from kvbake.digests import sha256_hex
from kvbake.errors import KvbakeError
from kvbake.lock import Lock, pinned_manifest_sha256
from kvbake.manifest import Manifest
from kvbake.provenance.core.trace import (PUSHED_MANIFEST, Link, checked, donor_link, file_links, image_links, manifest_links,
                                          patch_links, rank_links, recorded_digest)
from kvbake.rebase.adapters.rebaser import chain_taken_out


def local_links(manifest: Manifest, lock: Lock) -> list[Link]:
    """Donor, patches, files, thin layer and config: all from the project folder, no engine and no network."""
    links = [checked("donor", "manifest image sections", "the lock", lock.manifest_sha256, manifest.path.name,
                     pinned_manifest_sha256(manifest, lock.format)),
             donor_link(lock, manifest.donor.url, manifest.donor.revision)]
    links += patch_links(lock, patch_facts(manifest))
    overlay = overlay_files(manifest, lock)
    links += file_links(lock, {path: sha256_hex(data) for path, data in overlay.items()}, recovered_base(manifest))
    if len(overlay) == len(lock.files):
        derived = make_plan(manifest, lock, overlay).derived()
        links += image_links(lock, derived.layer_diff_id, derived.image_id)
    else:
        links += image_links(lock, None, None)
    return links


def patch_facts(manifest: Manifest) -> dict[str, tuple[str, str] | None]:
    """Each chain patch's sha256 and git patch-id as its file holds it now (None: the file is missing)."""
    facts: dict[str, tuple[str, str] | None] = {}
    for patch in manifest.chain:
        if not patch.path.is_file():
            facts[patch.id] = None
            continue
        facts[patch.id] = (sha256_hex(read_patch(patch)[0]), patch_id(patch.path, manifest.root))
    return facts


def overlay_files(manifest: Manifest, lock: Lock) -> dict[str, bytes]:
    """The overlay/ files the lock lists that exist."""
    root = overlay_root(manifest)
    return {f.path: (root / f.path).read_bytes() for f in lock.files if (root / f.path).is_file()}


def recovered_base(manifest: Manifest) -> dict[str, str | None]:
    """The base files the chain, taken back out of overlay/, comes to (hash; None for a file the chain creates); empty
    when the chain does not come back out."""
    try:
        state = chain_taken_out(manifest)
    except KvbakeError:
        return {}
    return {path: None if data is None else sha256_hex(data) for path, data in state.items()}


def registry_links(manifest: Manifest, lock: Lock) -> list[Link]:
    """The push record's digest, read back from the registry by the release tag, and the config it names."""
    from kvbake.registry.adapters.credentials import credentials_for
    from kvbake.registry.adapters.registry_api import RegistryClient, split_repository
    from kvbake.ship.core.push_record import PUSHES_DIR

    tag = tag_for(manifest, lock)
    pinned = pushed_digest(manifest.root / PUSHES_DIR / f"{tag}.json")
    registry, name = split_repository(pushed_repository(manifest, pinned))
    try:
        with RegistryClient(registry, credentials_for(registry)) as client:
            served = client.manifest(name, tag)
    except KvbakeError as err:
        return [checked("manifest", PUSHED_MANIFEST, "the push record", recorded_digest(pinned),
                        f"the registry ({err.message})", None)]
    return manifest_links(lock, pinned, served.digest if served else None, served.config_digest if served else None)


def pushed_repository(manifest: Manifest, pinned: str | None) -> str:
    """Where the release was pushed: the push record's repository (`push --registry` may name another registry than
    output.repository), else the manifest's."""
    return pinned.split("@", 1)[0] if pinned else manifest.output.repository


def pushed_digest(record_path: Path) -> str | None:
    """The digest reference the push record holds, or None when there is none to read."""
    try:
        pinned = json.loads(record_path.read_text(encoding="utf-8")).get("pinned")
    except (OSError, ValueError, AttributeError):
        return None
    return pinned if isinstance(pinned, str) and "@sha256:" in pinned else None


def fleet_links(fleet, lock: Lock) -> list[Link]:
    """Every rank: verify-running's checks of the recorded current release, which must be this lock's image."""
    from kvbake.ship.adapters.nodestate import NodeState

    failures: dict[str, list[str]] = {}
    for node in fleet.deployment.nodes:
        release = NodeState(node.name, fleet.engines[node.name]).read().current
        if release is None:
            failures[node.name] = ["no release recorded on the node"]
            continue
        found = list(fleet.check_rank(node.name, release).failures)
        if release.config_digest != lock.derived.image_id:
            found.append(f"the node's record says {release.config_digest}, the lock says {lock.derived.image_id}")
        failures[node.name] = found
    return rank_links(failures, lock.derived.image_id)


def signature_links(reference: str, keys: list[Path], lock: Lock, manifest: Manifest) -> list[Link]:
    """Per public key: cosign's verification of the signature and of the SLSA attestation of `reference`, judged by the
    same functions deploy admits a release with."""
    from kvbake.attest.adapters.admission import verified_signatures, verified_statements
    from kvbake.attest.core.slsa import provenance_predicate
    from kvbake.provenance.core.trace import attestation_link, signature_link

    digest = recorded_digest(reference)
    materials = provenance_predicate(lock, manifest.path.name)["materials"]
    links = []
    for key in keys:
        links.append(signature_link(key.name, digest, verified_signatures(reference, key)))
        links.append(attestation_link(key.name, digest, lock.derived.image_id, verified_statements(reference, key), materials))
    return links
