"""Reading registry replies: whether a URL is the registry itself, the detail of a distribution error body, and the token
a token service answers (either field name), each failure with the fix that names where to look."""

from __future__ import annotations

import httpx
import pytest

from kvbake.errors import RegistryError
from kvbake.registry.adapters.registry_replies import at_registry, detail, expect, token_of


def reply(status: int, url: str = "https://127.0.0.1:5000/v2/x/blobs/d", **options) -> httpx.Response:
    return httpx.Response(status, request=httpx.Request("GET", url), **options)


@pytest.mark.parametrize(("url", "address", "inside"), [
    ("https://127.0.0.1:5000/v2/", "127.0.0.1:5000", True),
    ("https://127.0.0.1/v2/", "127.0.0.1:5000", True),
    ("https://127.0.0.1:6000/v2/", "127.0.0.1:5000", False),
    ("https://127.0.0.1:6000/v2/", "127.0.0.1", True),
    ("https://storage.example/v2/", "127.0.0.1:5000", False),
])
def test_a_url_is_at_the_registry_when_host_and_any_given_port_match(url, address, inside):
    assert at_registry(httpx.URL(url), address) is inside


def test_the_detail_is_the_first_errors_code_and_message_bounded_to_one_line():
    body = {"errors": [{"code": "DENIED", "message": "requested access\nto the resource is denied"}, {"code": "OTHER"}]}
    assert detail(reply(403, json=body)) == " (DENIED: requested access to the resource is denied)"
    long = {"errors": [{"code": "X", "message": "y" * 400}]}
    assert detail(reply(500, json=long)) == " (" + ("X: " + "y" * 400)[:160] + ")"


@pytest.mark.parametrize("body", [{"errors": []}, {"errors": ["DENIED"]}, {"errors": "DENIED"}, {"errors": [{}]}, {"other": 1}, [1]])
def test_an_error_body_without_a_readable_first_error_adds_nothing(body):
    assert detail(reply(500, json=body)) == ""


def test_an_empty_error_body_is_said_so():
    assert detail(reply(500)) == " with an empty body"


def test_a_failure_from_another_host_names_where_it_was_answered():
    with pytest.raises(RegistryError) as failure:
        expect(reply(403, url="https://storage.example/blob?sig=secret"), "blob d", "127.0.0.1:5000")
    assert "(at https://storage.example/blob)" in failure.value.message and "sig=secret" not in failure.value.message
    with pytest.raises(RegistryError) as failure:
        expect(reply(503), "blob d", "127.0.0.1:5000")
    assert "(at " not in failure.value.message and "answered 503 for blob d" in failure.value.message
    assert "storage" in failure.value.fix


@pytest.mark.parametrize("body", [{"token": "t1"}, {"access_token": "t1"}, {"token": "", "access_token": "t1"}])
def test_the_token_is_read_from_either_field(body):
    assert token_of(reply(200, json=body), "127.0.0.1:5000") == "t1"


@pytest.mark.parametrize(("options", "named", "fix"), [
    ({"content": b"<html>"}, "not JSON", "WWW-Authenticate"),
    ({"json": {"token": "  "}}, "without a token", "token service"),
    ({"json": ["t1"]}, "without a token", "token service"),
])
def test_a_token_answer_without_a_token_names_the_service_and_where_to_look(options, named, fix):
    with pytest.raises(RegistryError) as failure:
        token_of(reply(200, **options), "127.0.0.1:5000")
    assert "token service of 127.0.0.1:5000" in failure.value.message and named in failure.value.message
    assert failure.value.fix.startswith("check the") and fix in failure.value.fix
