"""The SLSA provenance (v0.2) predicate of a release, from its manifest and lock: the base, every patch, the donor."""

from __future__ import annotations

import re
from typing import Any

from kvbake import __version__
from kvbake.lock import Lock

PREDICATE_TYPE = "slsaprovenance"  # cosign's name for https://slsa.dev/provenance/v0.2
BUILD_TYPE = "kvbake/bake@v1"
SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def hex_of(digest: str) -> str:
    """The 64 hex digits of a sha256 digest; ValueError naming anything else."""
    algorithm, _, value = digest.partition(":")
    if algorithm != "sha256" or not SHA256_HEX.fullmatch(value):
        raise ValueError(f"not a sha256 digest: {digest!r}")
    return value


def provenance_predicate(lock: Lock, manifest_name: str) -> dict[str, Any]:
    """What the release is made of, each by its digest: the base image by its config digest (and the registry digest it
    was pulled by, when there is one), each patch by the sha256 of its bytes and its git patch-id, and the donor
    repository by its commit. The subject, the pushed image's manifest digest, is cosign's to state."""
    # SLSA v0.2 materials hold a URI and digests only (cosign keeps nothing else); the rest goes in the parameters.
    base = {"uri": f"docker-image://{lock.base.reference}", "digest": {"sha256": hex_of(lock.base.config_digest)}}
    patches = [{"uri": f"patch:{patch.file}", "digest": {"sha256": patch.sha256, "gitPatchId": patch.patch_id}} for patch in lock.patches]
    donor = {"uri": lock.donor_url, "digest": {"sha1": lock.donor_revision}}
    parameters = {"sourceRoot": lock.source_root, "sourceDateEpoch": lock.source_date_epoch, "chain": [p.id for p in lock.patches],
                  "baseRegistryDigest": lock.base.repo_digest, "layerDiffId": lock.derived.layer_diff_id,
                  "configDigest": lock.derived.image_id, "manifestSha256": lock.manifest_sha256}
    return {
        "builder": {"id": f"kvbake/{__version__}"},
        "buildType": BUILD_TYPE,
        "invocation": {"configSource": {"uri": lock.donor_url, "digest": {"sha1": lock.donor_revision}, "entryPoint": manifest_name},
                       "parameters": parameters},
        "metadata": {"reproducible": True, "completeness": {"parameters": True, "environment": True, "materials": True}},
        "materials": [base, *patches, donor],
    }
