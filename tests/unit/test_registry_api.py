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
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbake.registry.adapters.credentials import RegistryAuth, credentials_for, lookup
from kvbake.digests import sha256_digest
from kvbake.errors import RegistryError
from kvbake.registry.adapters.registry_api import (
    DOCKER_MANIFEST,
    OCI_INDEX,
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
    with pytest.raises(RegistryError) as caught:
        parse_manifest(MANIFEST, "sha256:" + "0" * 64, DOCKER_MANIFEST)
    assert caught.value.exit_code == 11
    assert "sha256:" + "0" * 64 in caught.value.message and sha256_digest(MANIFEST) in caught.value.message
    assert "proxy" in caught.value.fix


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
    cause = "requires a login" if auth is None else f"refused the stored credentials of user {USER}"
    with registry(basic_registry([]), auth=auth) as client, pytest.raises(RegistryError) as failure:
        client.manifest("tiny", "v1")
    assert failure.value.exit_code == 11
    assert "registry 127.0.0.1:5000" in failure.value.message and cause in failure.value.message
    assert "docker login 127.0.0.1:5000" in failure.value.fix
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

    with registry(handler, address="registry.example") as client, pytest.raises(RegistryError) as caught:
        client.tags("app")
    assert caught.value.exit_code == 11
    assert all(field in caught.value.message for field in ("registry registry.example", "token realm", "over http"))
    assert "HTTPS" in caught.value.fix


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
    with registry(refusing(schemes), address="10.1.2.3:5000") as client, pytest.raises(RegistryError) as caught:
        client.tags("tiny")
    assert caught.value.exit_code == 11
    assert all(field in caught.value.message for field in ("registry 10.1.2.3:5000", "unreachable", "ConnectError"))
    assert "--registry HOST:PORT" in caught.value.fix
    assert schemes == ["https"]


def test_an_untrusted_certificate_never_falls_back_to_http():
    schemes: list[str] = []
    with registry(refusing(schemes, cert=True)) as client, pytest.raises(RegistryError) as caught:
        client.tags("tiny")
    assert caught.value.exit_code == 11
    assert "registry 127.0.0.1:5000" in caught.value.message and "certificate" in caught.value.message
    assert "/etc/docker/certs.d/127.0.0.1:5000/ca.crt" in caught.value.fix
    assert schemes == ["https"]


def test_login_store_entries_in_every_key_form(tmp_path, monkeypatch):
    encoded = base64.b64encode(f"{USER}:{SECRET}".encode()).decode()
    for key in ("127.0.0.1:5000", "https://127.0.0.1:5000", "http://127.0.0.1:5000/v1/"):
        assert lookup({"auths": {key: {"auth": encoded}}}, "127.0.0.1:5000") == RegistryAuth(USER, SECRET)
    assert lookup({"auths": {"https://index.docker.io/v1/": {"auth": encoded}}}, "docker.io") == RegistryAuth(USER, SECRET)
    assert lookup({"auths": {"other:5000": {"auth": encoded}}}, "127.0.0.1:5000") is None
    with pytest.raises(RegistryError) as caught:
        lookup({"auths": {"127.0.0.1:5000": {"auth": "%%%"}}}, "127.0.0.1:5000")
    assert caught.value.exit_code == 11
    assert all(field in caught.value.message for field in ("127.0.0.1:5000", "docker config", "base64"))
    assert "docker login 127.0.0.1:5000" in caught.value.fix
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
    with pytest.raises(RegistryError) as caught:
        lookup({"credsStore": "absent"}, "127.0.0.1:5000")
    assert caught.value.exit_code == 11
    assert "docker-credential-absent" in caught.value.message and "not installed" in caught.value.message
    assert "docker-credential-absent" in caught.value.fix


# --- blob redirects (object storage behind the registry) ---

BLOB = b"layer bytes"
BLOB_DIGEST = sha256_digest(BLOB)
SIGNED = "X-Amz-Signature=deadbeef"


def redirecting(status: int, location: str, storage: list[httpx.Request], registry_hits: list[httpx.Request]):
    """A Basic-auth registry whose blob reads redirect to `location`; every other host acts as the storage."""
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "127.0.0.1" and request.url.port == 5000 and not request.url.path.startswith("/storage/"):
            registry_hits.append(request)
            if request.headers.get("Authorization") != BASIC:
                return httpx.Response(401, headers={"WWW-Authenticate": 'Basic realm="r"'})
            if "/blobs/" in request.url.path:
                return httpx.Response(status, headers={"Location": location})
            return httpx.Response(200)
        storage.append(request)
        return httpx.Response(200, content=BLOB if request.method == "GET" else b"", headers={"Content-Length": str(len(BLOB))})
    return handler


@pytest.mark.parametrize("status", [302, 303, 307])
@pytest.mark.parametrize("location", [f"https://storage.example/b/{BLOB_DIGEST}?{SIGNED}", "https://127.0.0.1:5001/b",
                                      "http://127.0.0.1:5000/storage/b"])
def test_blob_redirects_to_another_origin_are_followed_without_credentials(status, location):
    storage: list[httpx.Request] = []
    hits: list[httpx.Request] = []
    with registry(redirecting(status, location, storage, hits), auth=RegistryAuth(USER, SECRET)) as client:
        assert client.blob("tiny", BLOB_DIGEST) == BLOB
        assert client.has_blob("tiny", BLOB_DIGEST)
    assert [request.method for request in storage] == ["GET", "HEAD"]
    assert str(storage[0].url) == location
    assert all("Authorization" not in request.headers for request in storage)
    assert hits[-1].headers["Authorization"] == BASIC


def test_a_redirect_within_the_registry_origin_keeps_the_credentials():
    storage: list[httpx.Request] = []
    with registry(redirecting(307, "/storage/b", storage, []), auth=RegistryAuth(USER, SECRET)) as client:
        assert client.blob("tiny", BLOB_DIGEST) == BLOB
    assert str(storage[0].url) == "https://127.0.0.1:5000/storage/b"
    assert storage[0].headers["Authorization"] == BASIC


def test_httpx_own_redirects_keep_authorization_on_a_scheme_upgrade_so_kvbake_follows_them_itself():
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.scheme == "http":
            return httpx.Response(307, headers={"Location": "https://127.0.0.1/b"})
        return httpx.Response(200, content=BLOB)

    with httpx.Client(transport=httpx.MockTransport(handler), follow_redirects=True) as plain:
        plain.get("http://127.0.0.1/v2/tiny/blobs/x", headers={"Authorization": BASIC})
    assert seen[-1].headers.get("Authorization") == BASIC  # another scheme and port, still sent by httpx
    storage: list[httpx.Request] = []
    with registry(redirecting(307, "https://127.0.0.1:443/b", storage, []), auth=RegistryAuth(USER, SECRET)) as client:
        assert client.blob("tiny", BLOB_DIGEST) == BLOB
    assert "Authorization" not in storage[0].headers


def test_a_redirect_loop_is_bounded_and_names_the_url_without_its_signature():
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v2/":
            return httpx.Response(200)
        return httpx.Response(307, headers={"Location": f"https://storage.example/loop?{SIGNED}"})

    with registry(handler) as client, pytest.raises(RegistryError) as failure:
        client.blob("tiny", BLOB_DIGEST)
    assert failure.value.exit_code == 11
    line = failure.value.one_line()
    assert "redirected blob " + BLOB_DIGEST + " more than 5 times (last to https://storage.example/loop)" in line
    assert "fix: check where the registry's storage redirects blob reads" in line and SIGNED not in line


def test_a_redirect_without_location_or_to_another_scheme_is_one_line():
    def handler(location: str | None):
        def answer(request: httpx.Request) -> httpx.Response:
            if request.url.path == "/v2/":
                return httpx.Response(200)
            return httpx.Response(302, headers={"Location": location} if location else {})
        return answer

    with registry(handler(None)) as client, pytest.raises(RegistryError, match="answered 302 for blob .* without a Location header"):
        client.has_blob("tiny", BLOB_DIGEST)
    with registry(handler("ftp://storage.example/b")) as client, pytest.raises(RegistryError, match="to a ftp URL, not HTTP"):
        client.blob("tiny", BLOB_DIGEST)


def test_storage_refusing_a_redirected_read_names_the_storage_without_the_signature():
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "storage.example":
            return httpx.Response(403 if request.method == "GET" else 404)
        if request.url.path == "/v2/":
            return httpx.Response(200)
        return httpx.Response(307, headers={"Location": f"https://storage.example/b?{SIGNED}"})

    with registry(handler) as client:
        assert client.has_blob("tiny", BLOB_DIGEST) is False
        with pytest.raises(RegistryError) as failure:
            client.blob("tiny", BLOB_DIGEST)
    line = failure.value.one_line()
    assert failure.value.exit_code == 11 and f"answered 403 for blob {BLOB_DIGEST} (at https://storage.example/b)" in line
    assert SIGNED not in line


def test_unreachable_storage_after_a_redirect_is_one_line():
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "storage.example":
            raise httpx.ConnectError("no route")
        if request.url.path == "/v2/":
            return httpx.Response(200)
        return httpx.Response(307, headers={"Location": f"https://storage.example/b?{SIGNED}"})

    with registry(handler) as client, pytest.raises(RegistryError) as failure:
        client.blob("tiny", BLOB_DIGEST)
    assert "redirected a blob read to https://storage.example/b, which failed (ConnectError)" in failure.value.one_line()
    assert SIGNED not in failure.value.one_line()


# --- other registry failures, each one line ---

@pytest.mark.parametrize("served", [b"layer bytes, altered", b"", BLOB + b"\n", BLOB[:-1]])
def test_a_blob_whose_bytes_do_not_hash_to_its_digest_is_refused(served):
    with registry(serving(200, served)) as client, pytest.raises(RegistryError) as failure:
        client.blob("tiny", BLOB_DIGEST)
    assert failure.value.exit_code == 11
    assert BLOB_DIGEST in failure.value.message and "127.0.0.1:5000" in failure.value.message
    with registry(serving(200, BLOB)) as client:
        assert client.blob("tiny", BLOB_DIGEST) == BLOB, "the same reply with the right bytes is read"


def test_a_redirected_blob_is_checked_against_its_digest_too():
    storage: list[httpx.Request] = []
    with registry(redirecting(307, "https://storage.example/b", storage, []), auth=RegistryAuth(USER, SECRET)) as client, \
            pytest.raises(RegistryError) as failure:
        client.blob("tiny", sha256_digest(b"other bytes"))
    assert failure.value.exit_code == 11 and "does not hash to its digest" in failure.value.message
    assert [request.method for request in storage] == ["GET"], "the bytes came from the storage"


def serving(status: int, body: bytes = b"", headers: dict[str, str] | None = None):
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v2/":
            return httpx.Response(200)
        return httpx.Response(status, content=body, headers=headers or {})
    return handler


def test_a_5xx_with_no_body_is_one_line():
    with registry(serving(503)) as client, pytest.raises(RegistryError) as failure:
        client.manifest("tiny", "v1")
    assert failure.value.exit_code == 11
    assert "registry 127.0.0.1:5000 answered 503 for tiny:v1 with an empty body; fix: the registry failed" in failure.value.one_line()


def test_a_distribution_error_body_is_quoted_on_one_line():
    body = json.dumps({"errors": [{"code": "UNKNOWN", "message": "filesystem:\nno space left", "detail": {}}]}).encode()
    with registry(serving(500, body)) as client, pytest.raises(RegistryError) as failure:
        client.blob("tiny", BLOB_DIGEST)
    assert f"answered 500 for blob {BLOB_DIGEST} (UNKNOWN: filesystem: no space left)" in failure.value.one_line()
    assert "\n" not in failure.value.one_line()


@pytest.mark.parametrize(("content_type", "fragment"), [
    ("text/html; charset=utf-8", "served the manifest sha256:"),
    ("application/vnd.docker.distribution.manifest.v1+prettyjws", "as application/vnd.docker.distribution.manifest.v1+prettyjws, not"),
    ("", "as no Content-Type, not as a manifest type"),
    ("application/vnd.oci.image.manifest.v1+json", "but its body says application/vnd.docker.distribution.manifest.v2+json"),
])
def test_a_manifest_with_the_wrong_content_type_is_refused(content_type, fragment):
    headers = {"Content-Type": content_type} if content_type else {}
    with registry(serving(200, MANIFEST, headers)) as client, pytest.raises(RegistryError) as failure:
        client.manifest("tiny", "v1")
    assert failure.value.exit_code == 11 and fragment in failure.value.one_line()


def test_a_digest_header_that_disagrees_with_the_body_is_refused_by_the_client():
    headers = {"Content-Type": DOCKER_MANIFEST, "Docker-Content-Digest": "sha256:" + "0" * 64}
    with registry(serving(200, MANIFEST, headers)) as client, pytest.raises(RegistryError) as failure:
        client.manifest("tiny", "v1")
    assert failure.value.exit_code == 11
    assert f"says the manifest is sha256:{'0' * 64} but its bytes hash to {sha256_digest(MANIFEST)}" in failure.value.one_line()


def test_a_manifest_asked_for_by_digest_must_hash_to_it():
    asked = "sha256:" + "5" * 64
    with registry(serving(200, MANIFEST, {"Content-Type": DOCKER_MANIFEST})) as client, pytest.raises(RegistryError) as failure:
        client.manifest("tiny", asked)
    assert f"answered the manifest {asked} with bytes that hash to {sha256_digest(MANIFEST)}" in failure.value.one_line()


@pytest.mark.parametrize(("change", "flaw"), [
    (lambda m: m["layers"][0].pop("size"), "layers[0] has no byte size"),
    (lambda m: m["layers"][0].update(digest="md5:x"), "layers[0] has no sha256 digest"),
    (lambda m: m.update(config="sha256:c"), "config is not an object"),
    (lambda m: m.update(layers={"a": 1}), "its layers are not a list"),
])
def test_a_malformed_manifest_is_one_line(change, flaw):
    data = json.loads(MANIFEST)
    change(data)
    with pytest.raises(RegistryError) as failure:
        parse_manifest(json.dumps(data).encode(), None, DOCKER_MANIFEST)
    assert failure.value.exit_code == 11 and f"is malformed: {flaw}" in failure.value.one_line()


def test_a_tag_list_that_is_not_a_list_of_names_is_refused():
    with registry(serving(200, b'{"name": "tiny", "tags": "v1"}')) as client, pytest.raises(RegistryError) as failure:
        client.tags("tiny")
    assert "listed the tags of tiny in a form that is not a list of names" in failure.value.one_line()


def bearer_registry(token_reply: httpx.Response):
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "auth.example":
            return token_reply
        return httpx.Response(401, headers={"WWW-Authenticate": 'Bearer realm="https://auth.example/token",service="reg"'})
    return handler


@pytest.mark.parametrize(("reply", "fragment"), [
    (httpx.Response(200, content=b"<html>login</html>"), "answered 200 with a body that is not JSON"),
    (httpx.Response(200, content=b'{"token": '), "answered 200 with a body that is not JSON"),
    (httpx.Response(200, json=["tok"]), "answered 200 without a token"),
    (httpx.Response(200, json={"token": ""}), "answered 200 without a token"),
    (httpx.Response(200, json={"token": 7}), "answered 200 without a token"),
    (httpx.Response(502), "answered 502 with an empty body"),
])
def test_a_token_service_answering_garbage_is_one_line(reply, fragment):
    with registry(bearer_registry(reply), address="registry.example", auth=RegistryAuth(USER, SECRET)) as client:
        with pytest.raises(RegistryError) as failure:
            client.tags("team/app")
    line = failure.value.one_line()
    assert failure.value.exit_code == 11 and f"the token service of registry.example {fragment}" in line and SECRET not in line


def test_a_401_without_a_challenge_is_one_line():
    with registry(serving(401), auth=RegistryAuth(USER, SECRET)) as client, pytest.raises(RegistryError) as failure:
        client.tags("tiny")
    assert "answered 401 without a WWW-Authenticate challenge" in failure.value.one_line()


@settings(max_examples=200, deadline=None)
@given(body=st.one_of(st.binary(max_size=200), st.recursive(
           st.none() | st.booleans() | st.integers() | st.text(max_size=12),
           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
               st.sampled_from(["mediaType", "config", "layers", "manifests", "digest", "size"]), inner, max_size=4),
           max_leaves=12).map(lambda value: json.dumps(value).encode())),
       content_type=st.sampled_from([DOCKER_MANIFEST, OCI_INDEX, "text/html", ""]),
       header=st.one_of(st.none(), st.text(max_size=80)))
def test_any_manifest_reply_parses_or_is_a_one_line_registry_error(body, content_type, header):
    try:
        found = parse_manifest(body, header, content_type)
    except RegistryError as err:
        assert err.exit_code == 11 and "\n" not in err.one_line() and "fix:" in err.one_line()
    else:
        assert found.digest == sha256_digest(body) and isinstance(found.layers, list)


@settings(max_examples=200, deadline=None)
@given(header=st.text(max_size=120))
def test_any_challenge_header_parses(header):
    assert isinstance(parse_challenge(header).params, dict)


# --- the login store: malformed configs and helpers are one line ---

@pytest.mark.parametrize(("config", "fragment"), [
    ({"auths": ["127.0.0.1:5000"]}, "has a auths that is not an object"),
    ({"credHelpers": "kvbaketest"}, "has a credHelpers that is not an object"),
    ({"credsStore": 7}, "names a credsStore that is not a helper name"),
    ({"credHelpers": {"127.0.0.1:5000": ["x"]}}, "names a credHelpers entry that is not a helper name"),
    ({"auths": {"127.0.0.1:5000": {"auth": 12345}}}, "is not valid base64 user:password"),
])
def test_a_malformed_login_store_is_one_line(config, fragment):
    with pytest.raises(RegistryError) as failure:
        lookup(config, "127.0.0.1:5000")
    assert failure.value.exit_code == 11 and fragment in failure.value.one_line() and "fix:" in failure.value.one_line()


def test_an_empty_helper_name_means_no_helper_as_for_the_docker_cli():
    encoded = base64.b64encode(f"{USER}:{SECRET}".encode()).decode()
    config = {"credsStore": "", "credHelpers": {"127.0.0.1:5000": ""}, "auths": {"127.0.0.1:5000": {"auth": encoded}}}
    assert lookup(config, "127.0.0.1:5000") == RegistryAuth(USER, SECRET)


@pytest.mark.parametrize(("script", "fragment"), [
    ("#!/bin/sh\necho '[\"not\", \"an object\"]'\n", "answered with something that is not a JSON object"),
    ("#!/bin/sh\necho 'Username: pusher'\n", "answered with something that is not a JSON object"),
    (None, "cannot be run"),
])
def test_a_credential_helper_that_answers_garbage_or_cannot_run_is_one_line(tmp_path, monkeypatch, script, fragment):
    helper = tmp_path / "docker-credential-kvbakebad"
    helper.write_text(script or "#!/bin/sh\nexit 0\n")
    if script:
        helper.chmod(helper.stat().st_mode | stat.S_IXUSR)
    else:
        helper.chmod(0o600)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(RegistryError) as failure:
        lookup({"credsStore": "kvbakebad"}, "127.0.0.1:5000")
    assert failure.value.exit_code == 11 and f"docker-credential-kvbakebad {fragment}" in failure.value.one_line().replace("the credential helper ", "")


JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                           st.sampled_from(["auths", "auth", "identitytoken", "127.0.0.1:5000", "https://127.0.0.1:5000"]),
                           inner, max_size=3), max_leaves=10)


@settings(max_examples=100, deadline=None)
@given(config=st.dictionaries(st.sampled_from(["auths", "HttpHeaders", "credsStore"]), JSONISH.filter(lambda v: not isinstance(v, str) or not v),
                              max_size=3))
def test_any_login_store_gives_credentials_none_or_a_one_line_registry_error(config):
    try:
        found = lookup(config, "127.0.0.1:5000")
    except RegistryError as err:
        assert err.exit_code == 11 and "\n" not in err.one_line()
    else:
        assert found is None or isinstance(found, RegistryAuth)


@pytest.mark.parametrize("extra", [{"layers": 5}, {"config": 7}, {"layers": "x", "config": []}])
def test_an_index_with_stray_image_fields_has_no_layers_and_no_config(extra):
    """Found by the property test above: an index whose body also carries non-list layers or a non-object config."""
    body = json.dumps({"mediaType": OCI_INDEX, "manifests": [], **extra}).encode()
    found = parse_manifest(body, None, OCI_INDEX)
    assert (found.layers, found.config_digest) == ([], None)
