"""The signature gate's pure checks: what cosign verified must sign and attest exactly the release's digest."""

from __future__ import annotations

import base64
import hashlib

import pytest

from kvbake.attest.core.admission import SLSA_V02, attestation_problem, key_fingerprint, material_text, signature_problem

DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32
CONFIG = "sha256:" + "ef" * 32
MATERIALS = [{"uri": "docker-image://base", "digest": {"sha256": "11" * 32}}, {"uri": "patch:a.patch", "digest": {"sha256": "22" * 32}}]


def payload(digest: str) -> dict:
    return {"critical": {"image": {"docker-manifest-digest": digest}, "type": "cosign container image signature"}}


def statement(subject: str = DIGEST, config: str = CONFIG, materials=MATERIALS, kind: str = SLSA_V02) -> dict:
    return {"subject": [{"name": "r", "digest": {"sha256": subject.split(":")[1]}}], "predicateType": kind,
            "predicate": {"invocation": {"parameters": {"configDigest": config}}, "materials": materials}}


def test_a_signature_must_sign_the_digest_and_no_other():
    assert signature_problem([payload(DIGEST)], DIGEST) is None
    assert signature_problem([payload(DIGEST), payload(DIGEST)], DIGEST) is None
    assert signature_problem([payload(OTHER)], DIGEST) == f"the verified signature signs {OTHER}, not {DIGEST}"
    assert signature_problem([payload(DIGEST), payload(OTHER)], DIGEST) is not None
    assert signature_problem([], DIGEST) == f"the verified signature signs no digest, not {DIGEST}"


def test_an_attestation_must_name_the_digest_state_the_config_and_hold_the_locks_materials():
    assert attestation_problem([statement()], DIGEST, CONFIG, MATERIALS) is None
    assert attestation_problem([statement()], DIGEST, CONFIG, None) is None, "rollback: no lock to compare materials with"
    assert attestation_problem([statement(subject=OTHER)], DIGEST, CONFIG, MATERIALS) == f"no verified attestation names {DIGEST} as its subject"
    assert attestation_problem([statement(config=OTHER)], DIGEST, CONFIG, MATERIALS) == f"the attestation states config {OTHER}, the release is {CONFIG}"
    changed = [MATERIALS[0], {"uri": "patch:a.patch", "digest": {"sha256": "33" * 32}}]
    assert attestation_problem([statement(materials=changed)], DIGEST, CONFIG, MATERIALS) == \
        "the attestation's materials are not the lock's (base, patches, donor commit)"
    assert attestation_problem([statement(materials=changed)], DIGEST, CONFIG, None) is None
    assert attestation_problem([statement(materials=MATERIALS[::-1])], DIGEST, CONFIG, MATERIALS) is not None, "order counts"
    assert attestation_problem([statement(kind="https://example.com/other")], DIGEST, CONFIG, MATERIALS).endswith("not SLSA provenance v0.2")


@pytest.mark.parametrize("predicate", [
    {"invocation": {"parameters": {}}, "materials": MATERIALS},
    {"invocation": {"parameters": {"configDigest": ""}}, "materials": MATERIALS},
    {"invocation": {}, "materials": MATERIALS},
    {"materials": MATERIALS},
    {},
], ids=["no configDigest", "an empty configDigest", "no parameters", "no invocation", "an empty predicate"])
@pytest.mark.parametrize("materials", [MATERIALS, None], ids=["deploy", "rollback"])
def test_an_attestation_that_states_no_config_digest_is_refused(predicate, materials):
    """Saying nothing of the config is no proof of it: the gate stays shut."""
    unstated = {**statement(), "predicate": predicate}
    problem = attestation_problem([unstated], DIGEST, CONFIG, materials)
    assert problem is not None and problem.startswith("the attestation states config ") and problem.endswith(f"the release is {CONFIG}")


def test_every_attestation_naming_the_digest_must_agree():
    good, bad = statement(), statement(config=OTHER)
    assert attestation_problem([good, bad], DIGEST, CONFIG, MATERIALS) is not None
    assert attestation_problem([good, statement(subject=OTHER, config=OTHER)], DIGEST, CONFIG, MATERIALS) is None


def test_a_key_fingerprint_is_the_sha256_of_its_der_bytes_whatever_the_line_breaks():
    der = bytes(range(91))
    body = base64.b64encode(der).decode()
    one = f"-----BEGIN PUBLIC KEY-----\n{body}\n-----END PUBLIC KEY-----\n"
    wrapped = "-----BEGIN PUBLIC KEY-----\n" + "\n".join(body[i:i + 64] for i in range(0, len(body), 64)) + "\n-----END PUBLIC KEY-----\n"
    assert key_fingerprint(one) == key_fingerprint(wrapped) == f"sha256:{hashlib.sha256(der).hexdigest()}"
    assert key_fingerprint(one) != key_fingerprint(one.replace(body[:4], "AAAA"))


def test_a_signature_over_several_digests_names_each_of_them():
    problem = signature_problem([payload(DIGEST), payload(OTHER)], DIGEST)
    assert f"{DIGEST}, {OTHER}" in problem


def test_an_attestation_of_another_kind_names_that_kind():
    assert "https://example.com/other" in attestation_problem([statement(kind="https://example.com/other")], DIGEST, CONFIG, MATERIALS)


def test_materials_read_as_each_uri_with_its_sorted_digests_in_order():
    text = material_text([{"uri": "docker-image://base", "digest": {"sha256": "11", "md5": "00"}}, {"uri": "patch:a.patch"}])
    assert text.split("; ") == ["docker-image://base [('md5', '00'), ('sha256', '11')]", "patch:a.patch []"]


def test_a_key_whose_body_is_not_strict_base64_is_fingerprinted_by_its_text():
    body = "QUJD!"
    pem = f"-----BEGIN PUBLIC KEY-----\n{body}\n-----END PUBLIC KEY-----\n"
    assert key_fingerprint(pem) == f"sha256:{hashlib.sha256(body.encode()).hexdigest()}"
