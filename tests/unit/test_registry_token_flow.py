"""The registry client's Bearer token flow over a recorded registry: a refresh token is posted as a form, a password goes
as Basic auth, an anonymous client asks with no header; the realm's scheme, refusals, failures and unreachable token
services each stop with what to check."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest

from kvbake.digests import sha256_digest
from kvbake.errors import RegistryError
from kvbake.registry.adapters.credentials import RegistryAuth
from kvbake.registry.adapters.registry_api import RegistryClient

ADDRESS = "registry.example"


def bearer_registry(realm: str, token_reply, asked: list[httpx.Request]):
    """A registry whose every request needs the Bearer token the realm hands out; `token_reply` answers the realm."""
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/token":
            asked.append(request)
            return token_reply(request)
        if request.headers.get("Authorization") != "Bearer tok-1":
            return httpx.Response(401, headers={"WWW-Authenticate": f'Bearer realm="{realm}",service="reg"'})
        return httpx.Response(200, json={"name": "app", "tags": ["t1"]})
    return handler


def client(handler, auth=None) -> RegistryClient:
    return RegistryClient(ADDRESS, auth, certs_root=Path("/nonexistent"), transport=httpx.MockTransport(handler))


def granted(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"token": "tok-1"})


def test_an_identity_token_is_posted_as_a_refresh_grant():
    asked: list[httpx.Request] = []
    with client(bearer_registry("https://auth.example/token", granted, asked), RegistryAuth("<token>", "refresh-9")) as registry:
        assert registry.tags("app") == ["t1"]
    assert len(asked) == 1 and asked[0].method == "POST"
    form = dict(httpx.QueryParams(asked[0].content.decode()))
    assert form == {"service": "reg", "scope": "repository:app:pull", "grant_type": "refresh_token", "refresh_token": "refresh-9",
                    "client_id": "kvbake"}
    assert "Authorization" not in asked[0].headers


def test_an_anonymous_client_asks_the_realm_without_credentials():
    asked: list[httpx.Request] = []
    with client(bearer_registry("https://auth.example/token", granted, asked)) as registry:
        assert registry.tags("app") == ["t1"]
    assert asked[0].method == "GET" and "Authorization" not in asked[0].headers
    assert asked[0].url.params["scope"] == "repository:app:pull"


def test_a_plain_http_realm_is_accepted_on_loopback_only():
    asked: list[httpx.Request] = []
    with client(bearer_registry("http://127.0.0.1:5001/token", granted, asked)) as registry:
        assert registry.tags("app") == ["t1"]
    for realm, named in (("http://auth.example/token", "over http"), ("ftp://127.0.0.1/token", "over ftp"), ("//auth.example/token", "over no scheme")):
        with client(bearer_registry(realm, granted, [])) as registry, pytest.raises(RegistryError) as failure:
            registry.tags("app")
        assert named in failure.value.message and "HTTPS" in failure.value.fix


@pytest.mark.parametrize(("status", "auth", "named"), [
    (401, RegistryAuth("pusher", "pw"), "refused the stored credentials of user pusher"),
    (403, RegistryAuth("<token>", "refresh-9"), "refused the stored credentials of these credentials"),
])
def test_a_token_service_that_refuses_is_the_login_refusal(status, auth, named):
    with client(bearer_registry("https://auth.example/token", lambda r: httpx.Response(status), []), auth) as registry:
        with pytest.raises(RegistryError) as failure:
            registry.tags("app")
    assert named in failure.value.message and f"docker login {ADDRESS}" in failure.value.fix


@pytest.mark.parametrize("status", [404, 402, 500])
def test_a_token_service_failure_names_its_answer_and_the_service_to_check(status):
    with client(bearer_registry("https://auth.example/token", lambda r: httpx.Response(status), []), RegistryAuth("pusher", "pw")) as registry:
        with pytest.raises(RegistryError) as failure:
            registry.tags("app")
    assert f"the token service of {ADDRESS} answered {status}" in failure.value.message
    assert failure.value.fix.startswith("check the registry's token service")


def test_an_unreachable_token_service_names_the_failure_and_the_realm_to_check():
    def unreachable(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with client(bearer_registry("https://auth.example/token", unreachable, []), RegistryAuth("pusher", "pw")) as registry:
        with pytest.raises(RegistryError) as failure:
            registry.tags("app")
    assert "unreachable (ConnectError)" in failure.value.message and failure.value.fix.startswith("check the registry's token realm")


def test_blob_storage_on_another_host_is_reached_through_the_proxy_settings_but_loopback_storage_never():
    with client(lambda request: httpx.Response(404)) as registry:
        remote = registry._storage_client(httpx.URL("https://storage.example/blob"))
        local = registry._storage_client(httpx.URL("http://127.0.0.1:9000/blob"))
        assert remote.trust_env is True and local.trust_env is False
        assert registry._storage_client(httpx.URL("https://other-storage.example/b")) is remote, "one client per kind, reused"


def test_a_blob_redirect_is_logged_without_its_query(caplog):
    blob = b"layer bytes"
    digest = sha256_digest(blob)

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "storage.example":
            return httpx.Response(200, content=blob)
        return httpx.Response(307, headers={"Location": "https://storage.example/blob?sig=secret"})

    with caplog.at_level(logging.DEBUG, logger="kvbake.registry.adapters.registry_api"), client(handler) as registry:
        assert registry.blob("app", digest) == blob
    assert "blob read redirected to https://storage.example/blob" in [r.getMessage() for r in caplog.records]


def test_a_blob_redirect_to_storage_that_cannot_be_reached_names_it_and_what_to_check():
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "storage.example":
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(307, headers={"Location": "https://storage.example/blob?sig=secret"})

    with client(handler) as registry, pytest.raises(RegistryError) as failure:
        registry.blob("app", "sha256:" + "a" * 64)
    assert "redirected a blob read to https://storage.example/blob, which failed (ConnectError)" in failure.value.message
    assert failure.value.fix.startswith("check that the registry's storage is reachable from here")
