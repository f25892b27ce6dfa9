"""The signing push --sign and sign share: the key opened first, then the pushed digest signed and attested as one step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvbake.attest.adapters import cosign
from kvbake.attest.adapters.signature_tags import all_or_nothing
from kvbake.attest.core.slsa import PREDICATE_TYPE, provenance_predicate
from kvbake.lock import Lock


def opened_key(key: Path) -> str:
    """The password of a signing key, once cosign is there, the file is a cosign key and the password opens it."""
    cosign.cosign_binary()
    cosign.check_private_key(key)
    secret = cosign.password()
    cosign.check_password(key, secret)
    return secret


def sign_pushed(reference: str, lock: Lock, manifest_name: str, key: Path, secret: str) -> tuple[dict[str, Any], str]:
    """Sign the pushed digest (`reference`, from the push record) and attest its SLSA provenance, as one step."""
    predicate = provenance_predicate(lock, manifest_name)
    with all_or_nothing(reference):
        cosign.sign(reference, key, secret)
        cosign.attest(reference, key, secret, predicate, PREDICATE_TYPE)
    data = {"image": reference, "key": str(key), "attestation": PREDICATE_TYPE, "materials": len(predicate["materials"])}
    return data, (f"signed {reference} with {key.name} and attached its SLSA provenance "
                  f"({len(predicate['materials'])} materials: the base, {len(lock.patches)} patches, the donor commit)")
