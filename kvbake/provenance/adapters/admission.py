"""Adapter: the signature gate of deploy and rollback: cosign verifies the release's digest with the reviewers' keys."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from kvbake.deployfile import Signing
from kvbake.errors import SignatureError
from kvbake.provenance.adapters import cosign
from kvbake.provenance.core.admission import attestation_problem, key_fingerprint, signature_problem
from kvbake.provenance.core.slsa import PREDICATE_TYPE
from kvbake.ship.core.release import Release


def admitted(signing: Signing, release: Release, materials: Sequence[Mapping[str, Any]] | None, deploy_file: str) -> Release:
    """The release with the key that signed it (`signed_by`), when the deployment requires a signature: one listed key
    must sign its digest and attest its SLSA provenance (the release's config digest; the lock's materials on a
    deploy). An adopted serve is no kvbake image and is never signed; it passes as it is."""
    if not signing.require_signature or release.adopted:
        return release
    if not signing.keys:
        raise SignatureError(f"{deploy_file}: signing.require_signature is true but signing.keys lists no key, so {release.image} "
                             "cannot be checked", "list the reviewers' public keys (python build.py keys makes a pair) under "
                             "signing.keys, or set require_signature: false; nothing was moved")
    digest = release.image.partition("@")[2]
    refusals = []
    for key in signing.keys:
        problem = key_problem(release.image, digest, release.config_digest, key, materials)
        if problem is None:
            return replace(release, signed_by={"key": key.name, "fingerprint": key_fingerprint(key.read_text(encoding="utf-8"))})
        refusals.append(f"{key.name}: {problem}")
    raise SignatureError(f"{release.image} is not signed and attested with a key {deploy_file} lists ({'; '.join(refusals)})",
                         "have a reviewer sign this digest (python build.py sign --key THEIR.key), or list their key under "
                         "signing.keys; nothing was moved")


def key_problem(reference: str, digest: str, config_digest: str, key: Path, materials: Sequence[Mapping[str, Any]] | None) -> str | None:
    """What is wrong with the signature and attestation of `reference` under one key, or None."""
    try:
        problem = signature_problem(cosign.verify(reference, key), digest)
    except SignatureError as err:
        return f"no signature verifies ({cosign_reason(err)})"
    if problem:
        return problem
    try:
        envelopes = cosign.verify_attestation(reference, key, PREDICATE_TYPE)
    except SignatureError as err:
        return f"no attestation verifies ({cosign_reason(err)})"
    try:
        statements = [json.loads(base64.b64decode(envelope["payload"])) for envelope in envelopes]
    except (KeyError, ValueError, TypeError) as err:
        return f"cosign printed an envelope that is not an in-toto statement ({type(err).__name__})"
    return attestation_problem(statements, digest, config_digest, materials)


def cosign_reason(err: SignatureError) -> str:
    """cosign's own last line, which run_cosign keeps in parentheses."""
    message = err.message
    return message[message.index("(") + 1:-1] if message.endswith(")") and "(" in message else message


def audit_note(release: Release) -> str:
    """What the node's audit log says of the signature of the release it moves to."""
    if release.adopted:
        return "the adopted serve (no kvbake image, never signed)"
    if release.signed_by:
        return f"{release.image} signed by {release.signed_by['key']} ({release.signed_by['fingerprint'][:19]})"
    return f"{release.image} (signature not required by the deployment file)"
