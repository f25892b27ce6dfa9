"""Pure: whether what cosign verified with one reviewer's key signs and attests exactly the release a node will run."""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Any, Mapping, Sequence

SLSA_V02 = "https://slsa.dev/provenance/v0.2"


def key_fingerprint(pem: str) -> str:
    """sha256 of the public key's DER bytes: the same value whichever file name or line breaks carry it."""
    body = "".join(line.strip() for line in pem.splitlines() if line.strip() and not line.startswith("-----"))
    try:
        der = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        der = body.encode()
    return f"sha256:{hashlib.sha256(der).hexdigest()}"


def signed_digests(payloads: Sequence[Mapping[str, Any]]) -> list[str]:
    """The manifest digests cosign's verified simple-signing payloads name."""
    return sorted({str(((p.get("critical") or {}).get("image") or {}).get("docker-manifest-digest")) for p in payloads})


def signature_problem(payloads: Sequence[Mapping[str, Any]], digest: str) -> str | None:
    """None when a verified signature signs `digest` and none signs another; else what is wrong."""
    signed = signed_digests(payloads)
    if signed != [digest]:
        return f"the verified signature signs {', '.join(signed) or 'no digest'}, not {digest}"
    return None


def subject_digests(statement: Mapping[str, Any]) -> set[str]:
    return {f"sha256:{(s.get('digest') or {}).get('sha256')}" for s in statement.get("subject") or []}


def material_text(materials: Sequence[Mapping[str, Any]]) -> str:
    """Materials as one comparable text: each uri with its digests, in order."""
    return "; ".join(f"{m.get('uri')} {sorted((m.get('digest') or {}).items())}" for m in materials)


def attestation_problem(statements: Sequence[Mapping[str, Any]], digest: str, config_digest: str,
                        materials: Sequence[Mapping[str, Any]] | None) -> str | None:
    """None when at least one verified SLSA statement names `digest` as its subject and every one that does states the
    release's config digest and, when `materials` is given (a deploy, from the lock), exactly those materials."""
    naming = [s for s in statements if digest in subject_digests(s)]
    if not naming:
        return f"no verified attestation names {digest} as its subject"
    for statement in naming:
        predicate = statement.get("predicate") or {}
        if statement.get("predicateType") != SLSA_V02:
            return f"the attestation of {digest} is a {statement.get('predicateType')}, not SLSA provenance v0.2"
        stated = ((predicate.get("invocation") or {}).get("parameters") or {}).get("configDigest")
        if stated != config_digest:
            return f"the attestation states config {stated}, the release is {config_digest}"
        if materials is not None and material_text(predicate.get("materials") or []) != material_text(materials):
            return "the attestation's materials are not the lock's (base, patches, donor commit)"
    return None
