"""The sigstore policy-controller's ClusterImagePolicies that stand in for deploy's signature gate, as data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from kvbake.attest.core.admission import SLSA_V02
from kvbake.attest.core.slsa import hex_of
from kvbake.kubernetes.core.crd_schemas import CIP_API

# kvbake signs the `sha256-<digest>.sig` form (attest/adapters/cosign.py: cosign 3 is told --new-bundle-format=false,
# so that cosign 2 finds it too); the policy-controller must read that form, which it calls legacy, not the bundle.
SIGNATURE_FORMAT = "legacy"
INCLUDE_LABEL = "policy.sigstore.dev/include"  # a namespace the policy-controller enforces policies in
# A glob holds letters, digits and - _ : / * . only: `*` (anything but a slash) stands where the `@` of a digest
# reference would be.
DIGEST_GLOB = "{repository}*sha256:{hex}"


def key_authorities(keys: Sequence[Path], prefix: str) -> list[dict[str, Any]]:
    """One authority per reviewer's key (any one passes a policy; the policy-controller wants every key of one
    authority's attestations to verify), each public key inline, no `ctlog`: the policy-controller then checks no
    transparency log, as kvbake signs without one (--tlog-upload=false) for a private registry."""
    return [{"name": f"{prefix}-{index}", "key": {"data": key.read_text(encoding="utf-8"), "hashAlgorithm": "sha256"},
             "signatureFormat": SIGNATURE_FORMAT} for index, key in enumerate(keys, start=1)]


def with_pull_secret(authorities: list[dict[str, Any]], pull_secret: str) -> list[dict[str, Any]]:
    """The authorities reading signatures from the private registry with the pods' pull secret, when one is named."""
    if not pull_secret:
        return authorities
    return [{**authority, "source": [{"signaturePullSecrets": [{"name": pull_secret}]}]} for authority in authorities]


def signature_policy(name: str, repository: str, keys: Sequence[Path], pull_secret: str) -> dict[str, Any]:
    """Every image of the repository must carry a signature of one listed key: the pods' pull by digest included."""
    return {"apiVersion": CIP_API, "kind": "ClusterImagePolicy", "metadata": {"name": f"{name}-signed"},
            "spec": {"images": [{"glob": f"{repository}*"}], "mode": "enforce",
                     "authorities": with_pull_secret(key_authorities(keys, "signature"), pull_secret)}}


def provenance_condition(config_digest: str, materials: Sequence[Mapping[str, Any]]) -> str:
    """The attestation's policy, as deploy's gate checks it (attest/core/admission.py): SLSA provenance v0.2 stating
    the release's config digest and exactly the lock's materials. Written as JSON, which is CUE: every field it names
    must be there with that value, and the materials list must hold exactly these entries, in this order."""
    condition = {"predicateType": SLSA_V02,
                 "predicate": {"invocation": {"parameters": {"configDigest": config_digest}}, "materials": list(materials)}}
    return json.dumps(condition, indent=1, sort_keys=True) + "\n"


def provenance_policy(name: str, repository: str, digest: str, config_digest: str, materials: Sequence[Mapping[str, Any]],
                      keys: Sequence[Path], pull_secret: str) -> dict[str, Any]:
    """This release's digest must carry an SLSA provenance attestation of one listed key that states its config
    digest and the lock's materials. It is named by the release's config digest, so each export adds its own and an
    earlier release's pods stay admitted by theirs."""
    attestation = {"name": "slsa-provenance", "predicateType": SLSA_V02,
                   "policy": {"type": "cue", "data": provenance_condition(config_digest, materials)}}
    authorities = [{**authority, "attestations": [attestation]} for authority in key_authorities(keys, "provenance")]
    return {"apiVersion": CIP_API, "kind": "ClusterImagePolicy",
            "metadata": {"name": f"{name}-provenance-{hex_of(config_digest)[:12]}"},
            "spec": {"images": [{"glob": DIGEST_GLOB.format(repository=repository, hex=hex_of(digest))}], "mode": "enforce",
                     "authorities": with_pull_secret(authorities, pull_secret)}}


def namespace(name: str, enforced: bool) -> dict[str, Any]:
    """The namespace the serve runs in; labelled so that the policy-controller enforces the policies there."""
    metadata: dict[str, Any] = {"name": name}
    if enforced:
        metadata["labels"] = {INCLUDE_LABEL: "true"}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}
