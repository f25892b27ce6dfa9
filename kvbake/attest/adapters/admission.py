"""Adapter: the signature gate of deploy and rollback: cosign verifies a release's digest with the reviewers' keys."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from kvbake.attest.adapters import cosign
from kvbake.attest.core.admission import attestation_problem, key_fingerprint, signature_problem
from kvbake.attest.core.slsa import PREDICATE_TYPE
from kvbake.deployfile import Signing
from kvbake.errors import SignatureError


def signer(signing: Signing, image: str, config_digest: str, materials: Sequence[Mapping[str, Any]] | None,
           deploy_file: str) -> dict[str, str] | None:
    """The key that signed `image` (`{"key": file name, "fingerprint": sha256}`), when the deployment requires a
    signature (None when it does not): one listed key must sign its digest and attest its SLSA provenance (the
    release's config digest; the lock's materials on a deploy)."""
    if not signing.require_signature:
        return None
    if not signing.keys:
        raise SignatureError(f"{deploy_file}: signing.require_signature is true but signing.keys lists no key, so {image} "
                             "cannot be checked", "list the reviewers' public keys (python build.py keys makes a pair) under "
                             "signing.keys, or set require_signature: false; nothing was moved")
    digest = image.partition("@")[2]
    refusals = []
    for key in signing.keys:
        problem = key_problem(image, digest, config_digest, key, materials)
        if problem is None:
            return {"key": key.name, "fingerprint": key_fingerprint(key.read_text(encoding="utf-8"))}
        refusals.append(f"{key.name}: {problem}")
    raise SignatureError(f"{image} is not signed and attested with a key {deploy_file} lists ({'; '.join(refusals)})",
                         "have a reviewer sign this digest (python build.py sign --key THEIR.key), or list their key under "
                         "signing.keys; nothing was moved")


def key_problem(reference: str, digest: str, config_digest: str, key: Path, materials: Sequence[Mapping[str, Any]] | None) -> str | None:
    """What is wrong with the signature and attestation of `reference` under one key, or None."""
    payloads = verified_signatures(reference, key)
    if isinstance(payloads, str):
        return f"no signature verifies ({payloads})"
    problem = signature_problem(payloads, digest)
    if problem:
        return problem
    statements = verified_statements(reference, key)
    if isinstance(statements, str):
        return statements
    return attestation_problem(statements, digest, config_digest, materials)


def verified_signatures(reference: str, key: Path) -> list[dict[str, Any]] | str:
    """The simple-signing payloads cosign verifies with one key, or cosign's reason why none verifies."""
    try:
        return cosign.verify(reference, key)
    except SignatureError as err:
        return cosign_reason(err)


def verified_statements(reference: str, key: Path) -> list[dict[str, Any]] | str:
    """The in-toto statements of the SLSA attestations cosign verifies with one key, or why there are none."""
    try:
        envelopes = cosign.verify_attestation(reference, key, PREDICATE_TYPE)
    except SignatureError as err:
        return f"no attestation verifies ({cosign_reason(err)})"
    try:
        return [json.loads(base64.b64decode(envelope["payload"])) for envelope in envelopes]
    except (KeyError, ValueError, TypeError) as err:
        return f"cosign printed an envelope that is not an in-toto statement ({type(err).__name__})"


def cosign_reason(err: SignatureError) -> str:
    """cosign's own last line, which run_cosign keeps in parentheses."""
    message = err.message
    return message[message.index("(") + 1:-1] if message.endswith(")") and "(" in message else message


def signature_note(image: str, signed_by: Mapping[str, str] | None) -> str:
    """What the node's audit log says of the signature of the kvbake image it moves to."""
    if signed_by:
        return f"{image} signed by {signed_by['key']} ({signed_by['fingerprint'][:19]})"
    return f"{image} (signature not required by the deployment file)"
