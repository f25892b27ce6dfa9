"""A redirecting front for the rig registry: blob reads answered with a 307 to a "storage" port, as object stores do."""

# It proxies the registry API on one loopback port and answers blob reads with a 307 to a second loopback port, the
# storage, which serves the bytes through a signed URL. The storage records whether a request carried an Authorization
# header.

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, BinaryIO
from urllib.parse import parse_qs, urlsplit

import httpx

from kvbake_rig.logins import Credentials
from kvbake_rig.ports import LOOPBACK
from kvbake_rig.registry import RegistryEndpoint

BLOB_PATH = re.compile(r"^/v2/(?P<name>.+)/blobs/(?P<digest>sha256:[0-9a-f]{64})$")
STORAGE_PATH = re.compile(r"^/storage/(?P<name>.+)/(?P<digest>sha256:[0-9a-f]{64})$")
HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-authorization",
                        "proxy-authenticate", "content-length"})
RELAYED_BLOB_HEADERS = ("content-type", "docker-content-digest", "etag")
TLS_HANDSHAKE = b"\x16"  # the record type that starts a TLS ClientHello


@dataclass(frozen=True)
class StorageHit:
    """One request the storage port served: method, blob, whether it carried Authorization, and who sent it."""

    method: str
    digest: str
    authorization: bool
    user_agent: str


def read_body(headers: Any, stream: BinaryIO) -> bytes:
    """The request body, by Content-Length or chunked transfer coding (what the engine sends for blob uploads)."""
    if "chunked" in headers.get("Transfer-Encoding", "").lower():
        parts = []
        while size := int(stream.readline().split(b";")[0].strip() or b"0", 16):
            parts.append(stream.read(size))
            stream.readline()
        while stream.readline().strip():
            pass  # trailers end with an empty line
        return b"".join(parts)
    return stream.read(int(headers.get("Content-Length") or 0))


class _Handler(BaseHTTPRequestHandler):
    """Common plumbing: HTTP/1.1 with exact lengths, quiet logs, and a reply helper."""

    protocol_version = "HTTP/1.1"
    front: RedirectFront

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
        pass

    def handle_one_request(self) -> None:
        """A TLS ClientHello gets the answer Go's HTTP servers give (the registry's own, too), which tells an engine
        trying HTTPS first to fall back to HTTP. Python's parser would answer it in HTTP/0.9 form, with no status line,
        and the containerd image store's fallback, which looks for "HTTP/", would give up."""
        if self.rfile.peek(1)[:1] == TLS_HANDSHAKE:
            self.wfile.write(b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
            self.close_connection = True
            return
        super().handle_one_request()

    def reply(self, status: int, headers: list[tuple[str, str]], body: bytes = b"", length: int | None = None) -> None:
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class _FrontHandler(_Handler):
    """The registry's face: blob reads are authorised upstream, then redirected; everything else is proxied."""

    def _any(self) -> None:
        body = read_body(self.headers, self.rfile) if self.command in ("POST", "PUT", "PATCH") else b""
        blob = BLOB_PATH.match(urlsplit(self.path).path)
        if blob and self.command in ("GET", "HEAD"):
            check = self.front.upstream_request("HEAD", self.path, self._forwarded(), b"")
            if check.status_code == 200:
                self.reply(307, [("Location", self.front.signed_url(blob["name"], blob["digest"]))])
                return
            self._relay(check)
            return
        self._relay(self.front.upstream_request(self.command, self.path, self._forwarded(), body))

    def _forwarded(self) -> dict[str, str]:
        return {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP and k.lower() != "accept-encoding"}

    def _relay(self, answer: httpx.Response) -> None:
        headers = [(k, v) for k, v in answer.headers.multi_items() if k.lower() not in HOP_BY_HOP]
        length = int(answer.headers.get("Content-Length") or 0) if self.command == "HEAD" else None
        self.reply(answer.status_code, headers, answer.content, length)

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _any


class _StorageHandler(_Handler):
    """The "object storage": serves a blob for a valid signature, fetched from the registry with the rig's own login."""

    def _read(self) -> None:
        parts = urlsplit(self.path)
        found = STORAGE_PATH.match(parts.path)
        self.front.record(StorageHit(self.command, found["digest"] if found else parts.path,
                                     "Authorization" in self.headers, self.headers.get("User-Agent", "")))
        signature = (parse_qs(parts.query).get("signature") or [""])[0]
        if not found or not hmac.compare_digest(signature, self.front.signature(found["name"], found["digest"])):
            self.reply(403, [("Content-Type", "text/plain")], b"bad signature\n")
            return
        answer = self.front.upstream_request(self.command, f"/v2/{found['name']}/blobs/{found['digest']}", self.front.own_login(), b"")
        headers = [(k, v) for k, v in answer.headers.items() if k.lower() in RELAYED_BLOB_HEADERS]
        length = int(answer.headers.get("Content-Length") or 0) if self.command == "HEAD" else None
        self.reply(answer.status_code, headers, answer.content, length)

    do_GET = do_HEAD = _read


def _serve(handler: type[_Handler], front: RedirectFront) -> ThreadingHTTPServer:
    bound = type(handler.__name__, (handler,), {"front": front})
    server = ThreadingHTTPServer((LOOPBACK, 0), bound)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name=f"rig-{handler.__name__}", daemon=True).start()
    return server


class RedirectFront:
    """A context manager: `address` is the front registry clients use; `hits` lists what the storage port served."""

    def __init__(self, upstream: RegistryEndpoint, credentials: Credentials | None = None) -> None:
        self.upstream = upstream
        self.credentials = credentials
        self.hits: list[StorageHit] = []
        self._key = secrets.token_bytes(32)
        self._lock = threading.Lock()
        self._servers: list[ThreadingHTTPServer] = []
        self._http: httpx.Client | None = None

    @property
    def address(self) -> str:
        """host:port of the front (what `--registry` and `docker login` name)."""
        return f"{LOOPBACK}:{self._servers[0].server_port}"

    @property
    def storage_address(self) -> str:
        """host:port of the storage the front redirects blob reads to."""
        return f"{LOOPBACK}:{self._servers[1].server_port}"

    def signature(self, name: str, digest: str) -> str:
        return hmac.new(self._key, f"{name}\n{digest}".encode(), hashlib.sha256).hexdigest()

    def signed_url(self, name: str, digest: str) -> str:
        """The storage URL of one blob; the signature in its query stands in for a pre-signed object URL."""
        return f"http://{self.storage_address}/storage/{name}/{digest}?signature={self.signature(name, digest)}"

    def own_login(self) -> dict[str, str]:
        """The front's own Authorization for the registry (the storage side never sees the client's)."""
        if self.credentials is None:
            return {}
        pair = f"{self.credentials.username}:{self.credentials.password}".encode()
        return {"Authorization": "Basic " + base64.b64encode(pair).decode()}

    def upstream_request(self, method: str, path: str, headers: dict[str, str], body: bytes) -> httpx.Response:
        """Send one request to the real registry, keeping the Host clients used (so its Location URLs name the front)."""
        assert self._http is not None, "the redirect front is not running"
        headers = {**headers, "Accept-Encoding": "identity"}  # relay the registry's bytes exactly as it sent them
        return self._http.request(method, path, headers=headers, content=body or None)

    def record(self, hit: StorageHit) -> None:
        with self._lock:
            self.hits.append(hit)

    def __enter__(self) -> RedirectFront:
        self._http = self.upstream.http_client()
        self._http.timeout = httpx.Timeout(120.0)
        try:
            self._servers = [_serve(_FrontHandler, self), _serve(_StorageHandler, self)]
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        self._servers = []
        if self._http is not None:
            self._http.close()
            self._http = None

