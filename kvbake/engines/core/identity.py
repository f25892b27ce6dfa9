"""The identity model: the config digest is kvbake's identity on every engine; each store's own image ID is predicted from it."""

from __future__ import annotations

from dataclasses import dataclass

from kvbake.digests import sha256_digest
from kvbake.engines.core.detection import EngineProfile


@dataclass(frozen=True)
class ExpectedId:
    """The ID one engine will report for the derived image, and what kind of digest it is."""

    profile: EngineProfile
    config_digest: str
    store_id: str

    def describe(self) -> str:
        return f"{self.profile.name}: image ID = {self.profile.id_meaning} {self.store_id}"


def expected_id(profile: EngineProfile, config_bytes: bytes, manifest_bytes: bytes | None) -> ExpectedId:
    """Classic store: the config digest. Containerd store: the digest of the manifest kvbake writes."""
    return ExpectedId(profile, sha256_digest(config_bytes), profile.image_store.derived_id(config_bytes, manifest_bytes))
