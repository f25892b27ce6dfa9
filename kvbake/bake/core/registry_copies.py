"""Pure: the registry copies of a local image (from its RepoDigests) and an index's entries for one platform."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from kvbake.bake.core.image_checks import platform_of

ATTESTATION_KIND = "vnd.docker.reference.type"


@dataclass(frozen=True)
class RegistryCopy:
    """One registry repository that holds the image under a manifest digest."""

    registry: str
    name: str
    digest: str

    @property
    def reference(self) -> str:
        return f"{self.registry}/{self.name}@{self.digest}"


def names_registry_host(repository: str) -> bool:
    """`ghcr.io/x/y`, `127.0.0.1:5000/y`, `localhost/y` name a registry host; `x/y` and `y` do not."""
    first, slash, _ = repository.partition("/")
    return bool(slash) and ("." in first or ":" in first or first == "localhost")


def repository_of(reference: str) -> str:
    """`host:5000/a/b:tag` and `a/b@sha256:…` without their tag or digest."""
    name = reference.split("@", 1)[0]
    head, slash, last = name.rpartition("/")
    return f"{head}{slash}{last.split(':', 1)[0]}"


def registry_copies(reference: str, repo_digests: list[str]) -> list[RegistryCopy]:
    """Every `host/name@sha256:…` the engine lists for the image whose repository names a registry host, the base
    reference's own repository first. A digest without a host (a loaded image on the containerd store) names no
    registry and is left out."""
    own = repository_of(reference)
    copies = []
    for item in repo_digests:
        repository, at, digest = item.partition("@")
        if at and digest.startswith("sha256:") and names_registry_host(repository):
            registry, _, name = repository.partition("/")
            copies.append((repository != own, RegistryCopy(registry, name, digest)))
    return [copy for _, copy in sorted(copies, key=lambda pair: pair[0])]


def platform_entries(index: Mapping[str, Any], platform: str) -> list[str]:
    """Digests of the index entries for `platform` (os/arch, as the lock writes it), attestations left out."""
    found = []
    for entry in index.get("manifests") or []:
        described = entry.get("platform") or {}
        annotations = entry.get("annotations") or {}
        if ATTESTATION_KIND in annotations:
            continue
        entry_platform = platform_of({"Os": described.get("os"), "Architecture": described.get("architecture")})
        if entry_platform == platform and isinstance(entry.get("digest"), str):
            found.append(entry["digest"])
    return found
