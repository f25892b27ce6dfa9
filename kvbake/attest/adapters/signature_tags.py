"""Adapter: the signature and attestation tags beside a release, read before `sign` and put back when it fails halfway."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from kvbake.errors import KvbakeError, SignatureError
from kvbake.registry.adapters.credentials import credentials_for
from kvbake.registry.adapters.registry_api import RegistryClient, split_repository
from kvbake.registry.core.remote_manifest import RemoteManifest


def companion_tags(reference: str) -> tuple[str, str, tuple[str, ...]]:
    """Registry, repository name and the tags cosign writes for `repo@sha256:…`: `sha256-<hex>.sig` and `.att`."""
    repository, _, digest = reference.partition("@")
    registry, name = split_repository(repository)
    stem = digest.replace(":", "-")
    return registry, name, (f"{stem}.sig", f"{stem}.att")


def put_back(client: RegistryClient, name: str, tag: str, before: RemoteManifest | None) -> None:
    """The tag as it was: deleted when it did not exist, else its earlier manifest's exact bytes."""
    now = client.manifest(name, tag)
    if now is None or (before is not None and now.digest == before.digest):
        if before is not None and now is None:
            client.put_manifest(name, tag, before.raw, before.media_type)
        return
    if before is None:
        client.delete_manifest(name, now.digest)
    else:
        client.put_manifest(name, tag, before.raw, before.media_type)


@contextmanager
def all_or_nothing(reference: str) -> Iterator[None]:
    """Signing and attesting as one step: when either fails, the signature and attestation tags of `reference` are put
    back as they were before (a first signature is deleted, an appended one undone), and the error says so."""
    registry, name, tags = companion_tags(reference)
    with RegistryClient(registry, credentials_for(registry)) as client:
        before = {tag: client.manifest(name, tag) for tag in tags}
        try:
            yield
        except SignatureError as err:
            left = []
            for tag in tags:
                try:
                    put_back(client, name, tag, before[tag])
                except KvbakeError as undo:
                    left.append(f"{tag} ({undo.message})")
            done = f"; {', '.join(left)} could not be put back" if left else "; the signature and attestation tags are as they were"
            raise SignatureError(err.message + done, err.fix) from None
