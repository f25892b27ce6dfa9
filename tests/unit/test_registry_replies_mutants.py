"""Registry replies: redirects refused or followed (with credentials kept home), origins, shown URLs, failed answers."""

from __future__ import annotations

import httpx
import pytest

from kvbake.errors import RegistryError
from kvbake.registry.adapters.registry_replies import expect, follow, next_url, origin, shown
from message_words import says

BLOB = "https://127.0.0.1:5000/v2/x/blobs/d"
WHERE_REDIRECTS_GO = "storage.redirect.disable: true"


def redirect(location: str | None, url: str = BLOB) -> httpx.Response:
    headers = {} if location is None else {"Location": location}
    return httpx.Response(302, request=httpx.Request("GET", url), headers=headers)


def refusal(reply: httpx.Response) -> RegistryError:
    with pytest.raises(RegistryError) as failure:
        next_url(reply, "127.0.0.1:5000", "blob d")
    return failure.value


@pytest.mark.parametrize(("location", "named"), [
    (None, "without a Location header"),
    ("http://[::1", "redirected blob d to an invalid URL"),
    ("ftp://storage.example/d", "redirected blob d to a ftp URL"),
])
def test_a_redirect_that_cannot_be_followed_names_the_blob_and_where_redirects_are_set(location, named):
    failure = refusal(redirect(location))
    assert says(failure.message, named) and says(failure.message, "127.0.0.1:5000")
    assert says(failure.fix, WHERE_REDIRECTS_GO)


def test_a_location_that_resolves_to_no_scheme_is_called_scheme_less():
    failure = refusal(redirect("/elsewhere", url="/v2/x/blobs/d"))
    assert says(failure.message, "to a scheme-less URL") and says(failure.fix, WHERE_REDIRECTS_GO)


def test_a_relative_location_resolves_against_the_request():
    assert str(next_url(redirect("/v2/x/blobs/e"), "127.0.0.1:5000", "blob d")) == "https://127.0.0.1:5000/v2/x/blobs/e"


@pytest.mark.parametrize(("url", "expected"), [
    ("https://Storage.Example/d", ("https", "storage.example", 443)),
    ("http://storage.example/d", ("http", "storage.example", 80)),
    ("https://storage.example:8443/d", ("https", "storage.example", 8443)),
])
def test_an_origin_is_the_scheme_the_lower_case_host_and_the_port_default_or_given(url, expected):
    assert origin(httpx.URL(url)) == expected


def test_a_shown_url_drops_its_query_and_fragment():
    assert shown(httpx.URL("https://storage.example/d?X-Amz-Signature=secret#part")) == "https://storage.example/d"



def follow_redirects(redirects: int) -> tuple[httpx.Response, list[tuple[str, bool]]]:
    """A blob read the registry redirects `redirects` times, the last time to storage elsewhere; what answers at last,
    and each hop sent with whether the registry's credentials may go along."""
    sent: list[tuple[str, bool]] = []

    def send(method: str, url: httpx.URL, same_origin: bool) -> httpx.Response:
        sent.append((str(url), same_origin))
        if len(sent) < redirects - 1:
            return redirect(f"/v2/x/blobs/hop{len(sent)}", url=str(url))
        if len(sent) == redirects - 1:
            return redirect("https://storage.example/d", url=str(url))
        return httpx.Response(200, request=httpx.Request(method, url), content=b"blob")

    first = redirect("/v2/x/blobs/hop0" if redirects > 1 else "https://storage.example/d")
    return follow(first, send, httpx.URL(BLOB), "127.0.0.1:5000", "blob d"), sent


def test_five_redirects_are_followed_and_credentials_go_only_to_the_registry():
    reply, sent = follow_redirects(5)
    assert reply.status_code == 200 and len(sent) == 5
    assert [same for _, same in sent] == [True, True, True, True, False]
    assert sent[0][0] == "https://127.0.0.1:5000/v2/x/blobs/hop0" and sent[-1][0] == "https://storage.example/d"


def test_a_sixth_redirect_is_refused_naming_the_limit():
    with pytest.raises(RegistryError) as failure:
        follow_redirects(6)
    assert says(failure.value.message, "more than 5 times") and says(failure.value.fix, WHERE_REDIRECTS_GO)


def test_a_redirect_followed_without_a_location_names_the_registry():
    with pytest.raises(RegistryError) as failure:
        follow(redirect(None), lambda *hop: pytest.fail("nothing may be sent"), httpx.URL(BLOB), "127.0.0.1:5000", "blob d")
    assert says(failure.value.message, "registry 127.0.0.1:5000 answered 302 for blob d")


def answered(status: int) -> httpx.Response:
    return httpx.Response(status, request=httpx.Request("GET", BLOB))


def test_any_answer_below_300_is_a_success():
    assert expect(answered(299), "blob d", "127.0.0.1:5000") is None


@pytest.mark.parametrize(("status", "storage"), [(300, False), (404, False), (499, False), (500, True), (503, True)])
def test_an_answer_from_300_fails_and_from_500_the_fix_says_to_check_storage(status, storage):
    with pytest.raises(RegistryError) as failure:
        expect(answered(status), "blob d", "127.0.0.1:5000")
    assert says(failure.value.message, f"answered {status} for blob d")
    assert says(failure.value.fix, "check its log and storage") is storage and says(failure.value.fix, "log")
