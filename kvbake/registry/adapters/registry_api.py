"""Adapter: read manifests and blobs over the distribution v2 HTTP API, with Basic/Bearer auth and verified TLS."""

from __future__ import annotations

import base64
import ipaddress
import logging
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlsplit

import httpx

from kvbake import __version__
from kvbake.digests import sha256_digest
from kvbake.errors import RegistryError
from kvbake.registry.adapters.credentials import RegistryAuth
from kvbake.registry.adapters.registry_replies import detail, expect, follow, json_object, shown, token_of
from kvbake.registry.core.remote_manifest import (  # re-exported: callers read manifests through this module
    DOCKER_LIST,
    DOCKER_MANIFEST,
    MANIFEST_ACCEPT,
    OCI_INDEX,
    OCI_MANIFEST,
    RemoteManifest,
    parse_manifest,
)

log = logging.getLogger(__name__)
__all__ = ["DOCKER_LIST", "DOCKER_MANIFEST", "MANIFEST_ACCEPT", "OCI_INDEX", "OCI_MANIFEST", "Challenge", "RegistryClient",
           "RemoteManifest", "is_loopback", "parse_challenge", "parse_manifest", "split_repository", "tls_context"]

ENGINE_CERTS_ROOT = Path("/etc/docker/certs.d")
HUB_API = "registry-1.docker.io"
USER_AGENT = f"kvbake/{__version__}"
TIMEOUT_SECONDS = 30.0


def split_repository(repository: str) -> tuple[str, str]:
    """'host:port/path' → ('host:port', 'path'); a name without a registry host is on docker.io."""
    first, _, rest = repository.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    return "docker.io", repository if "/" in repository else f"library/{repository}"


def is_loopback(address: str) -> bool:
    """True for localhost, 127.0.0.0/8 and ::1 (with or without a port)."""
    try:  # urlsplit refuses a malformed bracketed host, ip_address anything but an address: neither is loopback
        host = urlsplit(f"//{address}").hostname or ""
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Challenge:
    """A parsed WWW-Authenticate header: the scheme and its parameters."""

    scheme: str
    params: Mapping[str, str]


def parse_challenge(header: str) -> Challenge:
    """'Bearer realm="https://t",service="r",scope="repository:a:pull"' → Challenge('bearer', {...})."""
    scheme, _, rest = header.strip().partition(" ")
    params: dict[str, str] = {}
    while rest.strip():
        key, _, rest = rest.strip().lstrip(",").strip().partition("=")
        if rest.startswith('"'):
            value, _, rest = rest[1:].partition('"')
        else:
            value, _, rest = rest.partition(",")
        params[key.strip().lower()] = value.strip()
    return Challenge(scheme.lower(), params)


def tls_context(address: str, certs_root: Path = ENGINE_CERTS_ROOT) -> ssl.SSLContext:
    """System trust plus the CA engines use for this registry (certs.d/<host:port>/ca.crt), when present."""
    context = ssl.create_default_context()
    ca = certs_root / address / "ca.crt"
    if ca.is_file():
        context.load_verify_locations(cafile=str(ca))
    return context


def _cert_rejected(err: BaseException) -> bool:
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _basic(auth: RegistryAuth) -> str:
    return "Basic " + base64.b64encode(f"{auth.username}:{auth.secret}".encode()).decode()


class RegistryClient:
    """One registry: HTTPS first (plain HTTP only on loopback), then authorised reads of one repository."""

    def __init__(self, registry: str, auth: RegistryAuth | None, *, certs_root: Path = ENGINE_CERTS_ROOT,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.registry = registry
        self.address = HUB_API if registry == "docker.io" else registry
        self.auth = auth
        self.loopback = is_loopback(self.address)
        self._options: dict[str, Any] = {"timeout": TIMEOUT_SECONDS, "transport": transport, "headers": {"User-Agent": USER_AGENT}}
        self._verify = tls_context(self.address, certs_root)
        self._http: httpx.Client | None = None
        self._storage: dict[bool, httpx.Client] = {}  # clients for hosts blobs redirect to, by trust_env
        self._authorization: str | None = None

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for client in (self._http, *self._storage.values()):
            if client is not None:
                client.close()

    def _client(self, scheme: str) -> httpx.Client:
        return httpx.Client(base_url=f"{scheme}://{self.address}", verify=self._verify, trust_env=not self.loopback, **self._options)

    def _storage_client(self, url: httpx.URL) -> httpx.Client:
        """A client without registry credentials for another host (proxy variables honoured unless it is loopback)."""
        trust_env = not is_loopback(url.netloc.decode("ascii"))
        if trust_env not in self._storage:
            self._storage[trust_env] = httpx.Client(verify=self._verify, trust_env=trust_env, **self._options)
        return self._storage[trust_env]

    def _ping(self) -> httpx.Client:
        """Connect over HTTPS; fall back to plain HTTP only when the registry is on loopback."""
        attempts = ("https", "http") if self.loopback else ("https",)
        failure: httpx.TransportError | None = None
        for scheme in attempts:
            client = self._client(scheme)
            try:
                client.get("/v2/")
            except httpx.TransportError as err:
                client.close()
                if _cert_rejected(err):
                    raise RegistryError(f"registry {self.address} presented a certificate that is not trusted",
                                        f"install its CA as {ENGINE_CERTS_ROOT}/{self.address}/ca.crt (where engines read it)") from None
                failure = err
                continue
            log.debug("registry %s answers over %s", self.address, scheme)
            return client
        raise RegistryError(f"registry {self.address} is unreachable ({type(failure).__name__}: {failure})",
                            "start the registry or pass the right --registry HOST:PORT")

    @property
    def http(self) -> httpx.Client:
        if self._http is None:
            self._http = self._ping()
        return self._http

    def _send(self, method: str, name: str, path: str, accept: str | None = None, content: bytes | None = None,
              content_type: str | None = None) -> httpx.Response:
        url = f"/v2/{name}/{path}"
        headers = {"Accept": accept} if accept else {}
        if content_type:
            headers["Content-Type"] = content_type
        response = self._request(method, url, headers, content)
        if response.status_code == 401:
            self._authorize(response, name)
            response = self._request(method, url, headers, content)
            if response.status_code == 401:
                raise self._refused()
        if response.status_code == 403:
            raise RegistryError(f"registry {self.address} denies {self._who()} access to {name}",
                                f"grant pull and push on {name}, or docker login {self.registry} as another user")
        return response

    def _request(self, method: str, url: str, headers: dict[str, str], content: bytes | None = None) -> httpx.Response:
        if self._authorization:
            headers = {**headers, "Authorization": self._authorization}
        try:
            return self.http.request(method, url, headers=headers, content=content)
        except httpx.HTTPError as err:
            raise RegistryError(f"registry {self.address}: {method} {url} failed ({type(err).__name__})",
                                "check that the registry is up, then retry") from None

    def _who(self) -> str:
        return f"user {self.auth.username}" if self.auth and not self.auth.is_identity_token else "these credentials"

    def _refused(self) -> RegistryError:
        if self.auth is None:
            return RegistryError(f"registry {self.address} requires a login and the engine's login store has none for it",
                                 f"docker login {self.registry} (with the same DOCKER_CONFIG), then retry")
        return RegistryError(f"registry {self.address} refused the stored credentials of {self._who()}",
                             f"docker login {self.registry} again with the right password")

    def _authorize(self, response: httpx.Response, name: str) -> None:
        header = response.headers.get("WWW-Authenticate", "")
        if not header.strip():
            raise RegistryError(f"registry {self.address} answered 401 without a WWW-Authenticate challenge",
                                "check the registry's auth settings and any proxy in front of it")
        challenge = parse_challenge(header)
        if self.auth is None:
            if challenge.scheme != "bearer":
                raise self._refused()
        elif challenge.scheme == "basic":
            self._authorization = _basic(self.auth)
            return
        if challenge.scheme != "bearer" or not challenge.params.get("realm"):
            raise RegistryError(f"registry {self.address} asks for an unsupported auth scheme {challenge.scheme!r}",
                                "use a registry with Basic or Bearer token auth")
        scope = challenge.params.get("scope") or f"repository:{name}:pull"
        self._authorization = "Bearer " + self._token(challenge.params["realm"], challenge.params.get("service"), scope)

    def _token(self, realm: str, service: str | None, scope: str) -> str:
        """The Bearer token flow: ask the realm for a token for `scope`, with Basic auth or a refresh token."""
        parts = urlsplit(realm)
        if parts.scheme != "https" and not (parts.scheme == "http" and is_loopback(parts.netloc)):
            raise RegistryError(f"registry {self.address} sends its token realm over {parts.scheme or 'no scheme'}",
                                "serve the token realm over HTTPS")
        params = {k: v for k, v in (("service", service), ("scope", scope)) if v}
        try:
            if self.auth is not None and self.auth.is_identity_token:
                form = {**params, "grant_type": "refresh_token", "refresh_token": self.auth.secret, "client_id": "kvbake"}
                reply = self.http.post(realm, data=form)
            else:
                headers = {"Authorization": _basic(self.auth)} if self.auth else {}
                reply = self.http.get(realm, params=params, headers=headers)
        except httpx.HTTPError as err:
            raise RegistryError(f"the token service of {self.address} is unreachable ({type(err).__name__})",
                                "check the registry's token realm, then retry") from None
        if reply.status_code in (401, 403):
            raise self._refused()
        if reply.status_code != 200:
            raise RegistryError(f"the token service of {self.address} answered {reply.status_code}{detail(reply)}",
                                "check the registry's token service, then retry")
        return token_of(reply, self.address)

    def manifest(self, name: str, reference: str) -> RemoteManifest | None:
        """The manifest at a tag or digest, or None when the registry has none."""
        reply = self._send("GET", name, f"manifests/{reference}", MANIFEST_ACCEPT)
        if reply.status_code == 404:
            return None
        expect(reply, f"{name}:{reference}", self.address)
        return parse_manifest(reply.content, reply.headers.get("Docker-Content-Digest"), reply.headers.get("Content-Type", ""),
                              reference)

    def put_manifest(self, name: str, reference: str, raw: bytes, media_type: str) -> None:
        """Put a manifest's exact bytes under a tag (its blobs must be in the repository already)."""
        expect(self._send("PUT", name, f"manifests/{reference}", content=raw, content_type=media_type), f"{name}:{reference}", self.address)

    def delete_manifest(self, name: str, digest: str) -> None:
        """Delete a manifest by digest, and with it every tag that names it."""
        expect(self._send("DELETE", name, f"manifests/{digest}"), f"{name}@{digest}", self.address)

    def _blob_reply(self, method: str, name: str, digest: str) -> httpx.Response:
        """GET or HEAD a blob, following redirects (to object storage) without sending credentials to other hosts."""
        first = self._send(method, name, f"blobs/{digest}")
        return follow(first, self._hop, self.http.base_url, self.address, f"blob {digest}")

    def _hop(self, method: str, url: httpx.URL, same_origin: bool) -> httpx.Response:
        """One redirect hop: the registry's own client and credentials on its origin, a bare client elsewhere."""
        log.debug("blob read redirected to %s", shown(url))
        client = self.http if same_origin else self._storage_client(url)
        headers = {"Authorization": self._authorization} if same_origin and self._authorization else {}
        try:
            return client.request(method, url, headers=headers)
        except httpx.HTTPError as err:
            raise RegistryError(f"registry {self.address} redirected a blob read to {shown(url)}, which failed ({type(err).__name__})",
                                "check that the registry's storage is reachable from here, then retry") from None

    def blob(self, name: str, digest: str) -> bytes:
        """A blob's bytes, checked against its digest."""
        reply = self._blob_reply("GET", name, digest)
        expect(reply, f"blob {digest}", self.address)
        if sha256_digest(reply.content) != digest:
            raise RegistryError(f"blob {digest} from {self.address} does not hash to its digest", "check the registry's storage")
        return reply.content

    def has_blob(self, name: str, digest: str) -> bool:
        """HEAD a blob: True when the registry holds it for this repository."""
        reply = self._blob_reply("HEAD", name, digest)
        if reply.status_code == 404:
            return False
        expect(reply, f"blob {digest}", self.address)
        return True

    def tags(self, name: str) -> list[str]:
        """The repository's tags ([] for an unknown repository)."""
        reply = self._send("GET", name, "tags/list")
        if reply.status_code == 404:
            return []
        expect(reply, f"tags of {name}", self.address)
        tags = json_object(reply).get("tags") or []
        if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
            raise RegistryError(f"registry {self.address} listed the tags of {name} in a form that is not a list of names",
                                "check the registry and any proxy in front of it")
        return tags
