"""Adapter: read registry replies: errors as one line, token answers, and blob redirects that never leak credentials."""

from __future__ import annotations

from typing import Any, Callable
from urllib.parse import urlsplit

import httpx

from kvbake.errors import RegistryError

REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})
MAX_BLOB_REDIRECTS = 5
DEFAULT_PORTS = {"http": 80, "https": 443}
FIX_REDIRECTS = ("check where the registry's storage redirects blob reads "
                 "(distribution: storage.redirect.disable: true serves blobs directly)")

# send(method, url, same_origin) -> reply; `same_origin` says whether the registry's credentials may go along
HopSender = Callable[[str, httpx.URL, bool], httpx.Response]


def origin(url: httpx.URL) -> tuple[str, str, int | None]:
    """(scheme, host, port) with the scheme's default port filled in: credentials stay within one origin."""
    return url.scheme, url.host.lower(), url.port or DEFAULT_PORTS.get(url.scheme)


def at_registry(url: httpx.URL, address: str) -> bool:
    """True when `url` points at the registry `address` (host[:port]) itself."""
    parts = urlsplit(f"//{address}")
    return url.host == (parts.hostname or "") and (parts.port is None or url.port in (None, parts.port))


def shown(url: httpx.URL) -> str:
    """The URL for messages and logs: no query or fragment (pre-signed storage URLs carry secrets there)."""
    return str(url.copy_with(query=None, fragment=None))


def next_url(reply: httpx.Response, address: str, what: str) -> httpx.URL:
    """The absolute URL a redirect points to (relative Locations resolve against the request)."""
    location = reply.headers.get("Location", "").strip()
    if not location:
        raise RegistryError(f"registry {address} answered {reply.status_code} for {what} without a Location header",
                            FIX_REDIRECTS)
    try:
        target = reply.request.url.join(location)
    except httpx.InvalidURL:
        raise RegistryError(f"registry {address} redirected {what} to an invalid URL", FIX_REDIRECTS) from None
    if target.scheme not in DEFAULT_PORTS or not target.host:
        raise RegistryError(f"registry {address} redirected {what} to a {target.scheme or 'scheme-less'} URL, not HTTP(S)",
                            FIX_REDIRECTS)
    return target


def follow(reply: httpx.Response, send: HopSender, home: httpx.URL, address: str, what: str) -> httpx.Response:
    """Follow redirects from `reply` (same method each hop) until a non-redirect answer, at most MAX_BLOB_REDIRECTS."""
    hops = 0
    while reply.status_code in REDIRECT_CODES:
        target = next_url(reply, address, what)
        if hops == MAX_BLOB_REDIRECTS:
            raise RegistryError(f"registry {address} redirected {what} more than {MAX_BLOB_REDIRECTS} times "
                                f"(last to {shown(target)})", FIX_REDIRECTS)
        reply = send(reply.request.method, target, origin(target) == origin(home))
        hops += 1
    return reply


def json_object(reply: httpx.Response) -> dict[str, Any]:
    """The reply's JSON object, or {} when the body is not one."""
    try:
        data = reply.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def token_of(reply: httpx.Response, address: str) -> str:
    """The token of a 200 answer from the token service; garbage is a one-line error."""
    try:
        data = reply.json()
    except ValueError:
        raise RegistryError(f"the token service of {address} answered 200 with a body that is not JSON",
                            "check the token realm the registry's WWW-Authenticate challenge names") from None
    token = (data.get("token") or data.get("access_token")) if isinstance(data, dict) else None
    if not isinstance(token, str) or not token.strip():
        raise RegistryError(f"the token service of {address} answered 200 without a token",
                            "check the registry's token service")
    return token


def detail(reply: httpx.Response) -> str:
    """' (CODE: message)' from a distribution error body, ' with an empty body', or '' (one line, bounded)."""
    if not reply.content:
        return " with an empty body"
    errors = json_object(reply).get("errors")
    first = errors[0] if isinstance(errors, list) and errors and isinstance(errors[0], dict) else {}
    text = ": ".join(str(first[key]) for key in ("code", "message") if first.get(key))
    return f" ({' '.join(text.split())[:160]})" if text else ""


def expect(reply: httpx.Response, what: str, address: str) -> None:
    """Raise unless `reply` is a success; a redirected reply names the host that answered."""
    if reply.status_code < 300:
        return
    where = "" if at_registry(reply.request.url, address) else f" (at {shown(reply.request.url)})"
    fix = "the registry failed; check its log and storage, then retry" if reply.status_code >= 500 else "check the registry's log"
    raise RegistryError(f"registry {address} answered {reply.status_code} for {what}{where}{detail(reply)}", fix)
