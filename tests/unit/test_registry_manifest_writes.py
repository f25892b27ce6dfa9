"""The registry client's manifest writes (put under a tag, delete by digest) against an in-process registry."""

from __future__ import annotations

import httpx
import pytest

from kvbake.digests import sha256_digest
from kvbake.errors import RegistryError
from kvbake.registry.adapters.registry_api import DOCKER_MANIFEST
from tests.unit.test_registry_api import BASIC, MANIFEST, SECRET, USER, registry
from kvbake.registry.adapters.credentials import RegistryAuth

DIGEST = sha256_digest(MANIFEST)


def recording(seen: list[httpx.Request], status: int, need_login: bool = False):
    """A registry that records every request past its ping and answers `status`, asking for a login first when `need_login`."""
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v2/":
            return httpx.Response(200)
        seen.append(request)
        if need_login and request.headers.get("Authorization") != BASIC:
            return httpx.Response(401, headers={"WWW-Authenticate": 'Basic realm="r"'})
        return httpx.Response(status)
    return handler


def test_put_sends_the_exact_bytes_under_the_tag_with_their_media_type():
    seen: list[httpx.Request] = []
    with registry(recording(seen, 201)) as client:
        assert client.put_manifest("team/tiny", "v1", MANIFEST, DOCKER_MANIFEST) is None
    (put,) = seen
    assert put.method == "PUT" and put.url.path == "/v2/team/tiny/manifests/v1"
    assert put.content == MANIFEST and put.headers["Content-Type"] == DOCKER_MANIFEST


def test_put_logs_in_when_asked_and_sends_the_bytes_again():
    seen: list[httpx.Request] = []
    with registry(recording(seen, 201, need_login=True), auth=RegistryAuth(USER, SECRET)) as client:
        client.put_manifest("tiny", "v1", MANIFEST, DOCKER_MANIFEST)
    assert [request.method for request in seen] == ["PUT", "PUT"]
    assert seen[-1].content == MANIFEST and seen[-1].headers["Authorization"] == BASIC


@pytest.mark.parametrize("status", [400, 404, 500])
def test_a_refused_put_names_the_status_and_the_tag(status):
    with registry(recording([], status)) as client, pytest.raises(RegistryError) as failure:
        client.put_manifest("tiny", "v1", MANIFEST, DOCKER_MANIFEST)
    assert failure.value.exit_code == RegistryError.exit_code
    assert f"registry 127.0.0.1:5000 answered {status} for tiny:v1" in failure.value.message


def test_delete_asks_for_the_manifest_by_digest():
    seen: list[httpx.Request] = []
    with registry(recording(seen, 202)) as client:
        assert client.delete_manifest("team/tiny", DIGEST) is None
    (delete,) = seen
    assert delete.method == "DELETE" and delete.url.path == f"/v2/team/tiny/manifests/{DIGEST}"
    assert delete.content == b""


@pytest.mark.parametrize("status", [404, 405, 503])
def test_a_refused_delete_names_the_status_and_the_digest(status):
    with registry(recording([], status)) as client, pytest.raises(RegistryError) as failure:
        client.delete_manifest("tiny", DIGEST)
    assert f"registry 127.0.0.1:5000 answered {status} for tiny@{DIGEST}" in failure.value.message


def dropping(request: httpx.Request) -> httpx.Response:
    """A registry that answers its ping and drops the connection of every other request."""
    if request.url.path == "/v2/":
        return httpx.Response(200)
    raise httpx.ConnectError("connection reset", request=request)


@pytest.mark.parametrize(("write", "method"), [
    (lambda client: client.put_manifest("tiny", "v1", MANIFEST, DOCKER_MANIFEST), "PUT"),
    (lambda client: client.delete_manifest("tiny", DIGEST), "DELETE"),
])
def test_a_dropped_connection_names_the_method_and_the_manifest_url(write, method):
    with registry(dropping) as client, pytest.raises(RegistryError) as failure:
        write(client)
    assert f"{method} /v2/tiny/manifests/" in failure.value.message and "ConnectError" in failure.value.message
