"""The registry HTTP client and the login store, against recorded replies (no network, no engine)."""

from __future__ import annotations

import base64
import json
import os
import ssl
import stat
from pathlib import Path

import httpx
import pytest

from kvbake.credentials import RegistryAuth, credentials_for, lookup
from kvbake.digests import sha256_digest
from kvbake.errors import RegistryError
from kvbake.registry_api import (
    DOCKER_MANIFEST,
    RegistryClient,
    is_loopback,
    parse_challenge,
    parse_manifest,
    split_repository,
)

SECRET = "s3cret-Pa55word"
USER = "pusher"
BASIC = "Basic " + base64.b64encode(f"{USER}:{SECRET}".encode()).decode()
MANIFEST = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST,
                       "config": {"digest": "sha256:" + "c" * 64, "size": 10},
                       "layers": [{"digest": "sha256:" + "a" * 64, "size": 7}]}).encode()


def test_challenges_parse_with_quotes_and_commas():
    bearer = parse_challenge('Bearer realm="https://auth.example/token",service="reg",scope="repository:a/b:pull,push"')
    assert bearer.scheme == "bearer"
    assert dict(bearer.params) == {"realm": "https://auth.example/token", "service": "reg", "scope": "repository:a/b:pull,push"}
    assert parse_challenge('Basic realm="kvbake-rig"').params == {"realm": "kvbake-rig"}


@pytest.mark.parametrize(("repository", "expected"), [
    ("127.0.0.1:5000/tiny", ("127.0.0.1:5000", "tiny")),
    ("registry.example/team/dsv41-kvpack", ("registry.example", "team/dsv41-kvpack")),
    ("localhost/x", ("localhost", "x")),
    ("team/app", ("docker.io", "team/app")),
    ("app", ("docker.io", "library/app")),
])
def test_repository_split(repository, expected):
    assert split_repository(repository) == expected


@pytest.mark.parametrize(("address", "loopback"), [
    ("127.0.0.1:5000", True), ("127.1.2.3", True), ("[::1]:5000", True), ("localhost:5000", True),
    ("10.0.0.5:5000", False), ("registry.example:443", False), ("localhost.example:5000", False),
])
def test_loopback_detection(address, loopback):
    assert is_loopback(address) is loopback


def test_a_manifest_whose_bytes_do_not_match_the_digest_header_is_refused():
    assert parse_manifest(MANIFEST, sha256_digest(MANIFEST), DOCKER_MANIFEST).layers == [("sha256:" + "a" * 64, 7)]
    with pytest.raises(RegistryError, match="hash to"):
        parse_manifest(MANIFEST, "sha256:" + "0" * 64, DOCKER_MANIFEST)


def registry(handler, address="127.0.0.1:5000", auth=None, tmp_path=Path("/nonexistent")) -> RegistryClient:
    return RegistryClient(address, auth, certs_root=tmp_path, transport=httpx.MockTransport(handler))


def basic_registry(seen: list[httpx.Request]):
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.headers.get("Authorization") != BASIC:
            return httpx.Response(401, headers={"WWW-Authenticate": 'Basic realm="r"'})
        if request.url.path.endswith("/manifests/v1"):
            return httpx.Response(200, content=MANIFEST, headers={"Docker-Content-Digest": sha256_digest(MANIFEST), "Content-Type": DOCKER_MANIFEST})
        return httpx.Response(404)
    return handler


def test_basic_auth_from_the_store_reads_a_manifest():
    seen: list[httpx.Request] = []
    with registry(basic_registry(seen), auth=RegistryAuth(USER, SECRET)) as client:
        found = client.manifest("tiny", "v1")
        assert found is not None and found.digest == sha256_digest(MANIFEST)
        assert client.manifest("tiny", "absent") is None
    assert seen[0].url.scheme == "https"


@pytest.mark.parametrize("auth", [None, RegistryAuth(USER, "wrong-" + SECRET)])
def test_missing_or_wrong_credentials_are_one_line_without_the_secret(auth):
    with registry(basic_registry([]), auth=auth) as client, pytest.raises(RegistryError) as failure:
        client.manifest("tiny", "v1")
    message = failure.value.one_line()
    assert "docker login 127.0.0.1:5000" in message and "\n" not in message
    assert SECRET not in message and SECRET not in repr(auth)


def test_bearer_token_flow_asks_the_realm_with_basic_auth_and_the_scope():
    tokens: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "auth.example":
            tokens.append(request)
            return httpx.Response(200, json={"token": "tok-1"})
        if request.headers.get("Authorization") != "Bearer tok-1":
            return httpx.Response(401, headers={"WWW-Authenticate": 'Bearer realm="https://auth.example/token",service="reg"'})
        return httpx.Response(200, headers={"Content-Length": "3"}) if request.method == "HEAD" else httpx.Response(404)

    with registry(handler, address="registry.example", auth=RegistryAuth(USER, SECRET)) as client:
        assert client.has_blob("team/app", "sha256:" + "a" * 64)
        assert not client.manifest("team/app", "absent")
    assert len(tokens) == 1
    assert tokens[0].url.params["scope"] == "repository:team/app:pull" and tokens[0].url.params["service"] == "reg"
    assert tokens[0].headers["Authorization"] == BASIC


def test_a_plain_http_token_realm_on_a_remote_host_is_refused():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, headers={"WWW-Authenticate": 'Bearer realm="http://auth.example/token"'})

    with registry(handler, address="registry.example") as client, pytest.raises(RegistryError, match="token realm over http"):
        client.tags("app")


def refusing(schemes: list[str], cert: bool = False):
    def handler(request: httpx.Request) -> httpx.Response:
        schemes.append(request.url.scheme)
        if request.url.scheme == "https":
            if cert:
                raise httpx.ConnectError("verify failed") from ssl.SSLCertVerificationError("self-signed")
            raise httpx.ConnectError("wrong version number")
        return httpx.Response(200, json={"tags": ["a"]})
    return handler


def test_plain_http_only_on_loopback():
    schemes: list[str] = []
    with registry(refusing(schemes)) as client:
        assert client.tags("tiny") == ["a"]
    assert schemes[:2] == ["https", "http"]
    schemes.clear()
    with registry(refusing(schemes), address="10.1.2.3:5000") as client, pytest.raises(RegistryError, match="unreachable"):
        client.tags("tiny")
    assert schemes == ["https"]


def test_an_untrusted_certificate_never_falls_back_to_http():
    schemes: list[str] = []
    with registry(refusing(schemes, cert=True)) as client, pytest.raises(RegistryError, match="ca.crt"):
        client.tags("tiny")
    assert schemes == ["https"]


def test_login_store_entries_in_every_key_form(tmp_path, monkeypatch):
    encoded = base64.b64encode(f"{USER}:{SECRET}".encode()).decode()
    for key in ("127.0.0.1:5000", "https://127.0.0.1:5000", "http://127.0.0.1:5000/v1/"):
        assert lookup({"auths": {key: {"auth": encoded}}}, "127.0.0.1:5000") == RegistryAuth(USER, SECRET)
    assert lookup({"auths": {"https://index.docker.io/v1/": {"auth": encoded}}}, "docker.io") == RegistryAuth(USER, SECRET)
    assert lookup({"auths": {"other:5000": {"auth": encoded}}}, "127.0.0.1:5000") is None
    with pytest.raises(RegistryError, match="not valid base64"):
        lookup({"auths": {"127.0.0.1:5000": {"auth": "%%%"}}}, "127.0.0.1:5000")
    (tmp_path / "config.json").write_text(json.dumps({"auths": {"127.0.0.1:5000": {"auth": encoded}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    assert credentials_for("127.0.0.1:5000") == RegistryAuth(USER, SECRET)
    assert credentials_for("127.0.0.1:5000", tmp_path / "elsewhere") is None


def test_credential_helpers_are_asked_for_their_registry(tmp_path, monkeypatch):
    helper = tmp_path / "docker-credential-kvbaketest"
    helper.write_text('#!/bin/sh\nread server\n[ "$1" = get ] && [ "$server" = "127.0.0.1:5000" ] || { echo "credentials not found"; exit 1; }\n'
                      f'echo \'{{"ServerURL":"127.0.0.1:5000","Username":"{USER}","Secret":"{SECRET}"}}\'\n')
    helper.chmod(helper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert lookup({"credHelpers": {"127.0.0.1:5000": "kvbaketest"}}, "127.0.0.1:5000") == RegistryAuth(USER, SECRET)
    assert lookup({"credsStore": "kvbaketest"}, "127.0.0.1:5000") == RegistryAuth(USER, SECRET)
    assert lookup({"credsStore": "kvbaketest"}, "127.0.0.1:6000") is None
    with pytest.raises(RegistryError, match="docker-credential-absent.*not installed"):
        lookup({"credsStore": "absent"}, "127.0.0.1:5000")
