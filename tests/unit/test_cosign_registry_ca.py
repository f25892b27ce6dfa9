"""cosign reaches what the engines reach: the CA the engines trust for a registry (certs.d/<host:port>/ca.crt) is handed
to cosign as its registry CA on every call, and doctor's cosign check tells a certificate cosign cannot verify from an
image that is merely not there."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from kvbake.attest.adapters.cosign import registry_options, registry_reach
from kvbake.errors import SignatureError
from message_words import says

REFERENCE = "registry.lan:5000/kvbake/dsv41-kvpack@sha256:" + "a" * 64


def with_ca(root: Path, address: str) -> Path:
    ca = root / address / "ca.crt"
    ca.parent.mkdir(parents=True)
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    return ca


def test_the_engines_ca_for_the_registry_is_cosigns_registry_ca(tmp_path: Path):
    ca = with_ca(tmp_path, "registry.lan:5000")
    assert registry_options(REFERENCE, tmp_path) == ["--registry-cacert", str(ca)]
    assert registry_options("127.0.0.1:5443/x@sha256:a", tmp_path) == ["--allow-http-registry"]
    assert registry_options("other.lan:5000/x@sha256:a", tmp_path) == [], "another registry's CA is not given"


def test_a_loopback_registry_with_a_ca_gets_both(tmp_path: Path):
    ca = with_ca(tmp_path, "127.0.0.1:5443")
    assert registry_options("127.0.0.1:5443/x@sha256:a", tmp_path) == ["--allow-http-registry", "--registry-cacert", str(ca)]


def fake_cosign(folder: Path, monkeypatch: pytest.MonkeyPatch, stderr: str, code: int) -> Path:
    """A cosign that records its arguments and answers as told."""
    script = folder / "cosign"
    script.write_text(f"#!/bin/sh\necho \"$@\" > {folder / 'argv'}\necho '{stderr}' >&2\nexit {code}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("KVBAKE_COSIGN", str(script))
    return folder / "argv"


@pytest.mark.parametrize(("stderr", "code"), [("", 0), ("Error: GET https://registry.lan:5000/v2/x/manifests/t: MANIFEST_UNKNOWN", 1)])
def test_a_registry_cosign_reaches_is_ok_even_without_the_image(tmp_path: Path, monkeypatch, stderr, code):
    ca = with_ca(tmp_path / "certs", "registry.lan:5000")
    argv = fake_cosign(tmp_path, monkeypatch, stderr, code)
    assert registry_reach("registry.lan:5000/kvbake/x:kvbake-doctor", tmp_path / "certs") == \
        f"cosign reaches registry.lan:5000 with the engines' CA {ca}"
    assert argv.read_text().split() == ["triangulate", "--registry-cacert", str(ca), "registry.lan:5000/kvbake/x:kvbake-doctor"]


def test_a_certificate_cosign_cannot_verify_names_where_the_engines_ca_goes(tmp_path: Path, monkeypatch):
    fake_cosign(tmp_path, monkeypatch, "Error: x509: certificate signed by unknown authority", 1)
    with pytest.raises(SignatureError) as failed:
        registry_reach("registry.lan:5000/kvbake/x:kvbake-doctor", tmp_path / "certs")
    assert says(failed.value.message, "cosign cannot reach registry.lan:5000") and says(failed.value.message, "x509")
    assert says(failed.value.fix, f"{tmp_path / 'certs'}/registry.lan:5000/ca.crt")


def test_a_registry_that_does_not_answer_says_so(tmp_path: Path, monkeypatch):
    fake_cosign(tmp_path, monkeypatch, "Error: dial tcp 10.0.0.9:5000: connect: connection refused", 1)
    with pytest.raises(SignatureError) as failed:
        registry_reach("registry.lan:5000/kvbake/x:t", tmp_path)
    assert says(failed.value.fix, "check the registry's address")


def test_a_cosign_that_never_answers_is_a_fail_line_not_a_crash(tmp_path: Path, monkeypatch):
    script = tmp_path / "cosign"
    script.write_text("#!/bin/sh\nexec sleep 30\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("KVBAKE_COSIGN", str(script))
    with pytest.raises(SignatureError) as failed:
        registry_reach("registry.lan:5000/kvbake/x:kvbake-doctor", tmp_path / "certs", timeout_s=0.5)
    assert says(failed.value.message, "cosign did not reach registry.lan:5000 within 0.5 s")
    assert says(failed.value.fix, "check that the registry answers from this host")
