"""The registry client's requests and refusals: methods, Accept, challenges, redirects, session cookie and TLS trust."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import httpx
import pytest

from kvbake.errors import RegistryError
from kvbake.registry.adapters.credentials import RegistryAuth
from kvbake.registry.adapters.registry_api import DOCKER_MANIFEST, HUB_API, OCI_INDEX, OCI_MANIFEST, USER_AGENT, RegistryClient, parse_challenge
from message_words import says
from test_registry_api import BASIC, BLOB, BLOB_DIGEST, MANIFEST, SECRET, USER, registry, serving

SESSION = "registry-session=s1"
CA_NAME = "kvbake test registry CA"


def session_registry(location: str, storage: list[httpx.Request]):
    """A Basic-auth registry on 127.0.0.1:5000 that hands out a session cookie and redirects blob reads to `location`;
    every request outside its /v2/ API plays the storage."""
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.port == 5000 and request.url.path.startswith("/v2/"):
            if request.headers.get("Authorization") != BASIC:
                return httpx.Response(401, headers={"WWW-Authenticate": 'Basic realm="r"'})
            headers = {"Set-Cookie": f"{SESSION}; Path=/"}
            if "/blobs/" in request.url.path:
                return httpx.Response(307, headers={**headers, "Location": location})
            return httpx.Response(200, headers=headers)
        storage.append(request)
        return httpx.Response(200, content=BLOB)
    return handler


def test_a_redirect_within_the_registry_origin_keeps_the_registrys_session():
    storage: list[httpx.Request] = []
    with registry(session_registry("/storage/b", storage), auth=RegistryAuth(USER, SECRET)) as client:
        assert client.blob("tiny", BLOB_DIGEST) == BLOB
    assert str(storage[0].url) == "https://127.0.0.1:5000/storage/b"
    assert storage[0].headers.get("Cookie") == SESSION


@pytest.mark.parametrize("location", ["https://127.0.0.1:5001/b", "http://127.0.0.1:5000/storage/b"])
def test_storage_on_another_origin_of_the_same_host_gets_no_registry_session(location):
    storage: list[httpx.Request] = []
    with registry(session_registry(location, storage), auth=RegistryAuth(USER, SECRET)) as client:
        assert client.blob("tiny", BLOB_DIGEST) == BLOB
    assert str(storage[0].url) == location
    assert "Cookie" not in storage[0].headers and "Authorization" not in storage[0].headers


class TrustRecordingClient(httpx.Client):
    """httpx's client, noting the TLS trust (`verify`) each client kvbake opens is given, by its base URL."""

    opened: list[tuple[str, object]] = []

    def __init__(self, *args, verify: object = True, **kwargs) -> None:
        TrustRecordingClient.opened.append((str(kwargs.get("base_url") or ""), verify))
        super().__init__(*args, verify=verify, **kwargs)


def engine_ca(certs_root: Path, address: str) -> None:
    """A CA the engines trust for `address`, where they read it: certs.d/<address>/ca.crt."""
    folder = certs_root / address
    folder.mkdir(parents=True)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={CA_NAME}",
                    "-keyout", str(folder / "ca.key"), "-out", str(folder / "ca.crt")], check=True, capture_output=True)


def trusts(verify: object, name: str) -> bool:
    return isinstance(verify, ssl.SSLContext) and verify.verify_mode == ssl.CERT_REQUIRED and any(
        ("commonName", name) in subject for cert in verify.get_ca_certs() for subject in cert["subject"])


def test_storage_on_another_host_is_verified_with_the_ca_engines_trust_for_the_registry(tmp_path, monkeypatch):
    engine_ca(tmp_path, "127.0.0.1:5000")
    monkeypatch.setattr(TrustRecordingClient, "opened", [])
    monkeypatch.setattr(httpx, "Client", TrustRecordingClient)
    storage: list[httpx.Request] = []
    with registry(session_registry(f"https://storage.example/b/{BLOB_DIGEST}", storage), auth=RegistryAuth(USER, SECRET),
                  tmp_path=tmp_path) as client:
        assert client.blob("tiny", BLOB_DIGEST) == BLOB
    assert [url for url, _ in TrustRecordingClient.opened] == ["https://127.0.0.1:5000", ""]
    assert all(trusts(verify, CA_NAME) for _, verify in TrustRecordingClient.opened)


def recording(seen: list[httpx.Request], answer):
    """The registry `answer` plays, noting every request but the /v2/ ping."""
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path != "/v2/":
            seen.append(request)
        return answer(request)
    return handler


def test_a_manifest_is_read_with_get_accepting_every_manifest_type():
    seen: list[httpx.Request] = []
    answer = serving(200, MANIFEST, {"Content-Type": DOCKER_MANIFEST})
    with registry(recording(seen, answer)) as client:
        assert client.manifest("tiny", "v1").media_type == DOCKER_MANIFEST
    assert [request.method for request in seen] == ["GET"]
    assert all(says(seen[0].headers.get("Accept"), media_type) for media_type in (DOCKER_MANIFEST, OCI_MANIFEST, OCI_INDEX))


def test_tags_are_listed_with_get():
    seen: list[httpx.Request] = []
    with registry(recording(seen, serving(200, b'{"name": "tiny", "tags": ["v1"]}'))) as client:
        assert client.tags("tiny") == ["v1"]
    assert [(request.method, request.url.path) for request in seen] == [("GET", "/v2/tiny/tags/list")]


def test_a_failed_blob_head_names_the_blob_and_the_registry():
    with registry(serving(500)) as client, pytest.raises(RegistryError) as failure:
        client.has_blob("tiny", BLOB_DIGEST)
    assert says(failure.value.message, f"registry 127.0.0.1:5000 answered 500 for blob {BLOB_DIGEST}")


def test_a_failed_tag_list_names_the_repository_and_the_registry():
    with registry(serving(500)) as client, pytest.raises(RegistryError) as failure:
        client.tags("tiny")
    assert says(failure.value.message, "registry 127.0.0.1:5000 answered 500 for tags of tiny")


def test_a_tag_list_that_is_not_a_list_of_names_tells_to_check_the_proxy():
    with registry(serving(200, b'{"name": "tiny", "tags": "v1"}')) as client, pytest.raises(RegistryError) as failure:
        client.tags("tiny")
    assert says(failure.value.fix, "any proxy in front of it")


def test_a_blob_that_does_not_hash_to_its_digest_tells_to_check_the_storage():
    with registry(serving(200, b"other bytes")) as client, pytest.raises(RegistryError) as failure:
        client.blob("tiny", BLOB_DIGEST)
    assert says(failure.value.fix, "check the registry's storage")


def test_a_redirect_loop_names_the_registry():
    with registry(serving(307, headers={"Location": "https://storage.example/loop"})) as client, pytest.raises(RegistryError) as failure:
        client.blob("tiny", BLOB_DIGEST)
    assert says(failure.value.message, "registry 127.0.0.1:5000 redirected")


@pytest.mark.parametrize("header", [
    'Bearer realm="https://auth.example/token", service="reg", scope="repository:a:pull"',
    "Bearer realm=https://auth.example/token,service=reg,scope=repository:a:pull",
])
def test_challenge_parameters_parse_with_spaces_after_commas_and_without_quotes(header):
    challenge = parse_challenge(header)
    assert challenge.scheme == "bearer"
    assert dict(challenge.params) == {"realm": "https://auth.example/token", "service": "reg", "scope": "repository:a:pull"}


def test_a_challenge_parameter_keeps_its_whole_name():
    assert dict(parse_challenge('Bearer realm="r",X-Trace="t"').params) == {"realm": "r", "x-trace": "t"}


def challenging(header: str | None, tokens: list[httpx.Request]):
    """A registry that asks for auth with `header` (none when None); its token realm, auth.example, hands out tok-1."""
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "auth.example":
            tokens.append(request)
            return httpx.Response(200, json={"token": "tok-1"})
        if request.headers.get("Authorization") != "Bearer tok-1":
            return httpx.Response(401, headers={"WWW-Authenticate": header} if header else {})
        return httpx.Response(200, headers={"Content-Length": "3"})
    return handler


def test_the_token_is_asked_for_the_scope_the_challenge_names():
    tokens: list[httpx.Request] = []
    header = 'Bearer realm="https://auth.example/token",service="reg",scope="repository:team/app:pull,push"'
    with registry(challenging(header, tokens), address="registry.example", auth=RegistryAuth(USER, SECRET)) as client:
        assert client.has_blob("team/app", BLOB_DIGEST)
    assert [request.url.params["scope"] for request in tokens] == ["repository:team/app:pull,push"]


def test_a_401_without_a_challenge_tells_to_check_the_auth_settings():
    with registry(challenging(None, []), auth=RegistryAuth(USER, SECRET)) as client, pytest.raises(RegistryError) as failure:
        client.has_blob("tiny", BLOB_DIGEST)
    assert says(failure.value.message, "without a WWW-Authenticate challenge")
    assert says(failure.value.fix, "check the registry's auth settings")


@pytest.mark.parametrize("header", ['Bearer service="reg"', 'Digest realm="https://auth.example/token"'])
def test_a_bearer_challenge_without_realm_or_another_scheme_is_unsupported(header):
    tokens: list[httpx.Request] = []
    with registry(challenging(header, tokens), auth=RegistryAuth(USER, SECRET)) as client, pytest.raises(RegistryError) as failure:
        client.has_blob("tiny", BLOB_DIGEST)
    scheme = header.split()[0].lower()
    assert says(failure.value.message, f"registry 127.0.0.1:5000 asks for an unsupported auth scheme '{scheme}'")
    assert says(failure.value.fix, "use a registry with Basic or Bearer token auth") and tokens == []


def dropping_after_the_ping(request: httpx.Request) -> httpx.Response:
    """A registry that answers its /v2/ ping, then drops every connection."""
    if request.url.path == "/v2/":
        return httpx.Response(200)
    raise httpx.ConnectError("connection reset", request=request)


@pytest.mark.parametrize(("read", "request_line"), [
    (lambda client: client.manifest("tiny", "v1"), "GET /v2/tiny/manifests/v1"),
    (lambda client: client.tags("tiny"), "GET /v2/tiny/tags/list"),
    (lambda client: client.blob("tiny", BLOB_DIGEST), f"GET /v2/tiny/blobs/{BLOB_DIGEST}"),
    (lambda client: client.has_blob("tiny", BLOB_DIGEST), f"HEAD /v2/tiny/blobs/{BLOB_DIGEST}"),
])
def test_a_dropped_read_names_its_request_method_and_path(read, request_line):
    with registry(dropping_after_the_ping) as client, pytest.raises(RegistryError) as failure:
        read(client)
    assert says(failure.value.message, f"{request_line} failed (ConnectError)")
    assert says(failure.value.fix, "check that the registry is up")


def test_every_request_names_kvbake_as_its_user_agent():
    seen: list[httpx.Request] = []
    with registry(recording(seen, serving(200, b'{"name": "tiny", "tags": []}'))) as client:
        assert client.tags("tiny") == []
    assert [request.headers.get("User-Agent") for request in seen] == [USER_AGENT]


def test_docker_io_is_reached_at_its_registry_api_host():
    seen: list[httpx.Request] = []
    handler = recording(seen, serving(200, b'{"name": "library/app", "tags": ["1"]}'))
    with RegistryClient("docker.io", None, certs_root=Path("/nonexistent"), transport=httpx.MockTransport(handler)) as client:
        assert client.tags("library/app") == ["1"]
    assert [request.url.host for request in seen] == [HUB_API]


def test_a_403_names_the_user_the_repository_and_the_grant_it_needs():
    with registry(serving(403), auth=RegistryAuth(USER, SECRET)) as client, pytest.raises(RegistryError) as failure:
        client.tags("tiny")
    assert says(failure.value.message, f"registry 127.0.0.1:5000 denies user {USER} access to tiny")
    assert says(failure.value.fix, "grant pull and push on tiny") and says(failure.value.fix, "docker login 127.0.0.1:5000")
