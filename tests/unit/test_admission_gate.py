"""The signature gate over a stand-in cosign adapter: which key passes, what each refusal names, what the audit says."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from pathlib import Path

import pytest

from kvbake.deployfile import Signing
from kvbake.errors import SignatureError
from kvbake.attest.adapters import admission
from kvbake.attest.core.admission import SLSA_V02, key_fingerprint
from kvbake.attest.core.slsa import PREDICATE_TYPE
from kvbake.ship.adapters.rollout import admitted, audit_note
from kvbake.ship.core.release import Release

from message_words import says

DIGEST = "sha256:" + "ab" * 32
IMAGE = f"127.0.0.1:5000/team/release@{DIGEST}"
CONFIG = "sha256:" + "cd" * 32
MATERIALS = [{"uri": "docker-image://base", "digest": {"sha256": "11" * 32}}]
PEM = "-----BEGIN PUBLIC KEY-----\n" + base64.b64encode(b"key bytes").decode() + "\n-----END PUBLIC KEY-----\n"
RELEASE = Release(IMAGE, CONFIG, ("sha256:" + "0" * 64,), {}, "control", {}, 4096, (), "ops@host", "2026-12-03T00:00:00Z", "", None)


def envelope(subject: str = DIGEST, config: str = CONFIG, materials=MATERIALS) -> dict:
    statement = {"subject": [{"digest": {"sha256": subject.split(":")[1]}}], "predicateType": SLSA_V02,
                 "predicate": {"invocation": {"parameters": {"configDigest": config}}, "materials": materials}}
    return {"payload": base64.b64encode(json.dumps(statement).encode()).decode()}


class StandInCosign:
    """What cosign verifies, per key file name: the signed digests, and the attestation envelopes (or a refusal)."""

    def __init__(self, monkeypatch, signed: dict[str, list[str] | str], attested: dict[str, list[dict] | str]) -> None:
        self.signed, self.attested, self.calls = signed, attested, []
        monkeypatch.setattr(admission.cosign, "verify", self.verify)
        monkeypatch.setattr(admission.cosign, "verify_attestation", self.verify_attestation)

    def verify(self, reference: str, key: Path) -> list[dict]:
        self.calls.append(("verify", reference, key.name))
        found = self.signed.get(key.name, "no signatures found")
        if isinstance(found, str):
            raise SignatureError(f"cosign could not verify the signature of {reference} with {key.name} ({found})", "fix")
        return [{"critical": {"image": {"docker-manifest-digest": digest}}} for digest in found]

    def verify_attestation(self, reference: str, key: Path, predicate_type: str) -> list[dict]:
        self.calls.append(("verify-attestation", reference, key.name, predicate_type))
        found = self.attested.get(key.name, "none of the attestations matched the predicate type")
        if isinstance(found, str):
            raise SignatureError(f"cosign could not verify the attestation of {reference} with {key.name} ({found})", "fix")
        return found


@pytest.fixture()
def keys(tmp_path) -> tuple[Path, Path]:
    for name in ("alice.pub", "bob.pub"):
        (tmp_path / name).write_text(PEM)
    return tmp_path / "alice.pub", tmp_path / "bob.pub"


def refusal(signing: Signing, release: Release = RELEASE, materials=MATERIALS) -> SignatureError:
    with pytest.raises(SignatureError) as caught:
        admitted(signing, release, materials, "deploy.yaml")
    assert caught.value.exit_code == 19
    return caught.value


def test_without_a_required_signature_or_for_the_adopted_serve_cosign_is_never_run(monkeypatch, keys):
    cosign = StandInCosign(monkeypatch, {}, {})
    assert admitted(Signing(False, keys), RELEASE, MATERIALS, "deploy.yaml") is RELEASE
    adopted = replace(RELEASE, adopted={"container": "c", "kept_as": "k"})
    assert admitted(Signing(True, keys), adopted, MATERIALS, "deploy.yaml") is adopted
    assert cosign.calls == []


def test_the_gate_below_ship_takes_the_image_and_answers_with_the_signer_or_none(monkeypatch, keys):
    cosign = StandInCosign(monkeypatch, {"alice.pub": [DIGEST]}, {"alice.pub": [envelope()]})
    assert admission.signer(Signing(False, keys), IMAGE, CONFIG, MATERIALS, "deploy.yaml") is None and cosign.calls == []
    assert admission.signer(Signing(True, keys), IMAGE, CONFIG, MATERIALS, "deploy.yaml") == {"key": "alice.pub", "fingerprint": key_fingerprint(PEM)}
    assert admission.signature_note(IMAGE, None) == f"{IMAGE} (signature not required by the deployment file)"


def test_the_first_key_that_signs_and_attests_is_recorded_and_the_others_are_not_asked(monkeypatch, keys):
    cosign = StandInCosign(monkeypatch, {"bob.pub": [DIGEST]}, {"bob.pub": [envelope()]})
    passed = admitted(Signing(True, keys), RELEASE, MATERIALS, "deploy.yaml")
    assert passed.signed_by == {"key": "bob.pub", "fingerprint": key_fingerprint(PEM)}
    assert passed.id == RELEASE.id, "the signer is no part of what runs"
    assert [call[0] + " " + call[2] for call in cosign.calls] == ["verify alice.pub", "verify bob.pub", "verify-attestation bob.pub"]


def test_a_refusal_names_every_key_what_failed_for_it_and_the_digest(monkeypatch, keys):
    StandInCosign(monkeypatch, {"alice.pub": [DIGEST], "bob.pub": ["sha256:" + "ef" * 32]}, {"alice.pub": [envelope(config="sha256:" + "99" * 32)]})
    error = refusal(Signing(True, keys))
    assert error.message.startswith(f"{IMAGE} is not signed and attested with a key deploy.yaml lists (")
    alice, bob = error.message.split(" (", 1)[1].rstrip(")").split("; ", 1)
    assert alice.startswith("alice.pub: the attestation states config sha256:99")
    assert bob == f"bob.pub: the verified signature signs sha256:{'ef' * 32}, not {DIGEST}"
    assert error.fix.endswith("nothing was moved")


def test_cosigns_own_refusals_and_unreadable_envelopes_are_named(monkeypatch, keys):
    StandInCosign(monkeypatch, {"alice.pub": [DIGEST], "bob.pub": [DIGEST]}, {"alice.pub": "no matching attestations", "bob.pub": [{"payload": "%%"}]})
    message = refusal(Signing(True, keys)).message
    assert "alice.pub: no attestation verifies (no matching attestations)" in message
    assert "bob.pub: cosign printed an envelope that is not an in-toto statement (JSONDecodeError)" in message
    StandInCosign(monkeypatch, {}, {})
    assert "alice.pub: no signature verifies (no signatures found)" in refusal(Signing(True, keys)).message


def test_the_lock_materials_are_compared_on_deploy_only(monkeypatch, keys):
    StandInCosign(monkeypatch, {"alice.pub": [DIGEST]}, {"alice.pub": [envelope(materials=[])]})
    assert "materials are not the lock's" in refusal(Signing(True, keys[:1])).message
    assert admitted(Signing(True, keys[:1]), RELEASE, None, "deploy.yaml").signed_by["key"] == "alice.pub"


def test_a_required_signature_without_keys_is_refused_before_cosign_runs(monkeypatch):
    cosign = StandInCosign(monkeypatch, {}, {})
    error = refusal(Signing(True, ()))
    message = error.message
    assert message.startswith("deploy.yaml: signing.require_signature is true but signing.keys lists no key") and IMAGE in message
    assert says(error.fix, "signing.keys") and says(error.fix, "nothing was moved")
    assert cosign.calls == []


def test_the_audit_note_names_the_signer_or_why_there_is_none():
    assert audit_note(replace(RELEASE, signed_by={"key": "alice.pub", "fingerprint": "sha256:" + "12" * 32})) == \
        f"{IMAGE} signed by alice.pub (sha256:{'12' * 6})"
    assert audit_note(RELEASE).endswith("(signature not required by the deployment file)")
    assert audit_note(replace(RELEASE, adopted={"kept_as": "k"})).startswith("the adopted serve")


def test_cosigns_reason_is_the_text_in_its_last_parentheses():
    assert admission.cosign_reason(SignatureError("cosign could not verify x (no signatures found)", "f")) == "no signatures found"
    assert admission.cosign_reason(SignatureError("cosign is not installed", "f")) == "cosign is not installed"


def test_cosign_checks_the_release_s_own_reference_and_the_slsa_predicate_type(monkeypatch, keys):
    cosign = StandInCosign(monkeypatch, {"alice.pub": [DIGEST]}, {"alice.pub": [envelope()]})
    admitted(Signing(True, keys[:1]), RELEASE, MATERIALS, "deploy.yaml")
    assert cosign.calls == [("verify", IMAGE, "alice.pub"), ("verify-attestation", IMAGE, "alice.pub", PREDICATE_TYPE)]


def test_cosigns_reason_may_hold_parentheses_of_its_own_and_only_a_last_one_counts():
    assert admission.cosign_reason(SignatureError("cosign could not verify x (Error: key (expired))", "f")) == "Error: key (expired)"
    assert admission.cosign_reason(SignatureError("cosign (2.5) is not installed", "f")) == "cosign (2.5) is not installed"
