"""sign's all-or-nothing: the signature and attestation tags are put back as they were when signing fails halfway."""

from __future__ import annotations

import pytest

from kvbake.errors import RegistryError, SignatureError
from kvbake.attest.adapters import signature_tags
from kvbake.registry.core.remote_manifest import RemoteManifest

REFERENCE = "127.0.0.1:5000/team/release@sha256:" + "ab" * 32
SIG, ATT = "sha256-" + "ab" * 32 + ".sig", "sha256-" + "ab" * 32 + ".att"
OCI = "application/vnd.oci.image.manifest.v1+json"


def manifest(digest: str, media_type: str = OCI) -> RemoteManifest:
    return RemoteManifest("sha256:" + digest * 64, media_type, {}, f"raw {digest}".encode())


class FakeRegistry:
    """Tags to manifests, and what was put or deleted; `broken` makes every write fail."""

    def __init__(self, tags: dict[str, RemoteManifest]) -> None:
        self.tags, self.writes, self.broken = dict(tags), [], False

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def manifest(self, name: str, tag: str) -> RemoteManifest | None:
        assert name == "team/release"
        return self.tags.get(tag)

    def put_manifest(self, name: str, tag: str, raw: bytes, media_type: str) -> None:
        if self.broken:
            raise RegistryError("registry 127.0.0.1:5000 answered 405", "check the registry's log")
        assert name == "team/release"
        [put] = [m for m in ORIGINALS if m.raw == raw and m.media_type == media_type]
        self.writes.append(("put", tag, raw))
        self.tags[tag] = put

    def delete_manifest(self, name: str, digest: str) -> None:
        if self.broken:
            raise RegistryError("registry 127.0.0.1:5000 answered 405", "check the registry's log")
        assert name == "team/release"
        self.writes.append(("delete", digest))
        self.tags = {tag: m for tag, m in self.tags.items() if m.digest != digest}


ORIGINALS = [manifest("1"), manifest("2", "application/vnd.docker.distribution.manifest.v2+json")]


@pytest.fixture()
def registry(monkeypatch):
    made = FakeRegistry({SIG: ORIGINALS[0]})
    monkeypatch.setattr(signature_tags, "RegistryClient", lambda registry, auth: made)
    monkeypatch.setattr(signature_tags, "credentials_for", lambda registry: None)
    return made


def test_the_tags_cosign_writes_beside_a_digest():
    assert signature_tags.companion_tags(REFERENCE) == ("127.0.0.1:5000", "team/release", (SIG, ATT))


def test_a_failure_after_the_signature_puts_back_the_earlier_signature_and_deletes_a_first_attestation(registry):
    with pytest.raises(SignatureError) as caught:
        with signature_tags.all_or_nothing(REFERENCE):
            registry.tags[SIG] = manifest("3")  # the signature appended
            registry.tags[ATT] = manifest("4")  # an attestation written, then cosign failed
            raise SignatureError("cosign could not attest it (refused)", "read cosign's reason")
    assert registry.tags == {SIG: ORIGINALS[0]}
    assert registry.writes == [("put", SIG, b"raw 1"), ("delete", "sha256:" + "4" * 64)]
    assert caught.value.message.startswith("cosign could not attest it (refused)") and caught.value.message.endswith("as they were")
    assert caught.value.exit_code == 19


def test_an_unchanged_tag_is_left_alone_and_success_changes_nothing(registry):
    with pytest.raises(SignatureError):
        with signature_tags.all_or_nothing(REFERENCE):
            raise SignatureError("cosign could not sign it (refused)", "fix")
    assert registry.writes == []
    with signature_tags.all_or_nothing(REFERENCE):
        registry.tags[ATT] = manifest("4")
    assert registry.writes == [] and ATT in registry.tags


def test_a_tag_that_cannot_be_put_back_is_named(registry):
    registry.broken = True
    with pytest.raises(SignatureError) as caught:
        with signature_tags.all_or_nothing(REFERENCE):
            registry.tags[ATT] = manifest("4")
            raise SignatureError("cosign could not attest it (refused)", "fix")
    assert caught.value.message.endswith(f"; {ATT} (registry 127.0.0.1:5000 answered 405) could not be put back")


def test_a_tag_deleted_halfway_is_put_back_with_its_exact_bytes_and_media_type(monkeypatch):
    made = FakeRegistry({SIG: ORIGINALS[0], ATT: ORIGINALS[1]})
    monkeypatch.setattr(signature_tags, "RegistryClient", lambda registry, auth: made)
    monkeypatch.setattr(signature_tags, "credentials_for", lambda registry: None)
    with pytest.raises(SignatureError):
        with signature_tags.all_or_nothing(REFERENCE):
            del made.tags[SIG]
            made.tags[ATT] = manifest("4")
            raise SignatureError("cosign could not attest it (refused)", "fix")
    assert made.tags == {SIG: ORIGINALS[0], ATT: ORIGINALS[1]}
    assert made.writes == [("put", SIG, b"raw 1"), ("put", ATT, b"raw 2")]


def test_the_registry_is_opened_with_its_own_credentials(monkeypatch):
    made, opened = FakeRegistry({}), []
    monkeypatch.setattr(signature_tags, "RegistryClient", lambda registry, auth: opened.append((registry, auth)) or made)
    monkeypatch.setattr(signature_tags, "credentials_for", lambda registry: f"login for {registry}")
    with signature_tags.all_or_nothing(REFERENCE):
        pass
    assert opened == [("127.0.0.1:5000", "login for 127.0.0.1:5000")]
