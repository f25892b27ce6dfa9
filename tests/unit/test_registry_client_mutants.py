"""The registry client's connection: the /v2/ ping, the scheme it settles on and logs, proxy variables by host, dropped writes."""

from __future__ import annotations

import logging

import httpx
import pytest

from kvbake.errors import RegistryError
from kvbake.registry.adapters.registry_api import DOCKER_MANIFEST, is_loopback
from message_words import says
from test_registry_api import BLOB_DIGEST, MANIFEST, refusing, registry, serving
from test_registry_api_mutants import dropping_after_the_ping

TAGS = b'{"name": "tiny", "tags": ["v1"]}'
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy")


@pytest.fixture
def no_proxy_variables(monkeypatch):
    """No proxy in the environment, so a client that honours it still reaches the in-process registry."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def rooted_at_v2(request: httpx.Request) -> httpx.Response:
    """A registry whose API root is /v2/ exactly: it drops the connection for any other path outside /v2/tiny/."""
    if request.url.path == "/v2/" or request.url.path.startswith("/v2/tiny/"):
        return httpx.Response(200, content=TAGS)
    raise httpx.ConnectError("no such endpoint", request=request)


@pytest.mark.parametrize("address", ["127.0.0.1:5000", "registry.example"])
def test_the_ping_asks_for_the_api_root_v2(address, no_proxy_variables):
    with registry(rooted_at_v2, address=address) as client:
        assert client.tags("tiny") == ["v1"]


@pytest.mark.parametrize(("address", "handler", "scheme"), [
    pytest.param("127.0.0.1:5000", serving(200, TAGS), "https", id="loopback-over-https"),
    pytest.param("registry.example", serving(200, TAGS), "https", id="remote-over-https"),
    pytest.param("127.0.0.1:5000", refusing([]), "http", id="loopback-falling-back-to-http"),
])
def test_the_debug_log_names_the_registry_and_the_scheme_it_answers_over(caplog, no_proxy_variables, address, handler, scheme):
    caplog.set_level(logging.DEBUG, logger="kvbake.registry.adapters.registry_api")
    with registry(handler, address=address) as client:
        assert client.tags("tiny")
    assert any(says(record.getMessage(), f"registry {address} answers over {scheme}") for record in caplog.records)


@pytest.mark.parametrize(("address", "proxied"), [("127.0.0.1:5000", False), ("localhost:5000", False), ("[::1]:5000", False),
                                                  ("registry.example", True), ("10.0.0.5:5000", True)])
def test_proxy_variables_are_honoured_for_a_remote_registry_only(no_proxy_variables, address, proxied):
    with registry(serving(200, TAGS), address=address) as client:
        assert client.http.trust_env is proxied


@pytest.mark.parametrize(("write", "request_line"), [
    (lambda client: client.put_manifest("tiny", "v1", MANIFEST, DOCKER_MANIFEST), "PUT /v2/tiny/manifests/v1"),
    (lambda client: client.delete_manifest("tiny", BLOB_DIGEST), f"DELETE /v2/tiny/manifests/{BLOB_DIGEST}"),
])
def test_a_dropped_write_names_its_request_method_and_path(write, request_line):
    with registry(dropping_after_the_ping) as client, pytest.raises(RegistryError) as failure:
        write(client)
    assert says(failure.value.message, f"{request_line} failed (ConnectError)")


@pytest.mark.parametrize("address", ["[]:5000", "[:5000", "[127.0.0.1]:5000"])
def test_an_address_that_is_no_url_host_is_not_loopback(address):
    assert is_loopback(address) is False
