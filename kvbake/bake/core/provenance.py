"""Provenance labels: the OCI standard keys plus kvbake's own namespace, computed from the manifest and lock."""

from __future__ import annotations

from kvbake.bake.core.derived_image import rfc3339
from kvbake.lock import Lock
from kvbake.manifest import Manifest
from kvbake.secretscan import refuse_credentials

OCI = "org.opencontainers.image."
OWN = "org.kvbake."


def base_digest(lock: Lock) -> tuple[str, str]:
    """The digest for base.digest and what it is: the registry manifest digest when known, else the config digest."""
    if lock.base.repo_digest:
        return lock.base.repo_digest, "manifest"
    return lock.base.config_digest, "config"


def labels(manifest: Manifest, lock: Lock, version: str) -> dict[str, str]:
    """Every label the derived image carries; never a credential or a host path."""
    digest, digest_kind = base_digest(lock)
    chain = ",".join(f"{p.id}:{p.sha256}" for p in lock.patches)
    title = f"{manifest.name} (stand-in example)" if manifest.standin else manifest.name
    result = {
        OCI + "base.name": manifest.base.image,
        OCI + "base.digest": digest,
        OCI + "created": rfc3339(lock.source_date_epoch),
        OCI + "revision": lock.donor_revision,
        OCI + "source": lock.donor_url,
        OCI + "version": version,
        OCI + "title": title,
        OCI + "licenses": manifest.licenses,
        OWN + "format": str(lock.format),
        OWN + "manifest.sha256": lock.manifest_sha256,
        OWN + "lock.sha256": lock.core_sha256(),
        OWN + "chain": chain,
        OWN + "donor.revision": lock.donor_revision,
        OWN + "overlay.tree-sha256": lock.overlay_tree_sha256,
        OWN + "base.digest-kind": digest_kind,
        OWN + "base.config-digest": lock.base.config_digest,
        OWN + "switches": ",".join(sorted(manifest.switches)),
        OWN + "switches.default": "off",
        OWN + "forbidden": ",".join(sorted(manifest.forbidden)),
    }
    if manifest.standin:
        result[OWN + "standin"] = "true"
    refuse_credentials(result, "image labels")
    return result


def switch_names(manifest: Manifest) -> tuple[str, ...]:
    """Every name that must never be set in an image's Env: declared and forbidden switches."""
    return tuple(sorted({*manifest.switches, *manifest.forbidden}))
