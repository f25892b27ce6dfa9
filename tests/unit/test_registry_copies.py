"""Where a registry already holds the local base (from RepoDigests), and which index entry is the base's platform."""

from __future__ import annotations

import pytest

from kvbake.bake.core.registry_copies import RegistryCopy, names_registry_host, platform_entries, registry_copies, repository_of

DIGEST = "sha256:" + "a" * 64
OTHER = "sha256:" + "b" * 64


@pytest.mark.parametrize(("reference", "repository"), [
    ("127.0.0.1:5000/kvbake/base:0.33.0", "127.0.0.1:5000/kvbake/base"),
    ("127.0.0.1:5000/kvbake/base", "127.0.0.1:5000/kvbake/base"),
    ("base@" + DIGEST, "base"),
    ("ghcr.io/x/y:1@" + DIGEST, "ghcr.io/x/y"),
    ("y:1", "y"),
])
def test_a_reference_loses_its_tag_and_digest_but_keeps_a_registry_port(reference: str, repository: str) -> None:
    assert repository_of(reference) == repository


@pytest.mark.parametrize(("repository", "hosted"), [
    ("ghcr.io/x/y", True), ("127.0.0.1:5000/y", True), ("localhost/y", True), ("x/y", False), ("y", False), ("localhost", False),
])
def test_a_registry_host_is_a_first_part_with_a_dot_a_port_or_localhost(repository: str, hosted: bool) -> None:
    assert names_registry_host(repository) is hosted


def test_copies_list_hosted_digests_with_the_base_s_own_repository_first() -> None:
    digests = [f"127.0.0.1:5000/mirror/base@{OTHER}", f"kvbake-standin/base@{DIGEST}", f"ghcr.io/org/base@{DIGEST}",
               "ghcr.io/org/base@md5:zz", "ghcr.io/org/nodigest"]
    copies = registry_copies("ghcr.io/org/base:1", digests)
    assert copies == [RegistryCopy("ghcr.io", "org/base", DIGEST), RegistryCopy("127.0.0.1:5000", "mirror/base", OTHER)]
    assert copies[0].reference == f"ghcr.io/org/base@{DIGEST}"
    assert registry_copies("kvbake-standin/base:1", [f"kvbake-standin/base@{DIGEST}"]) == []


def test_the_platform_s_entries_are_picked_and_attestations_left_out() -> None:
    index = {"manifests": [
        {"digest": "sha256:amd", "platform": {"os": "linux", "architecture": "amd64"}},
        {"digest": "sha256:arm", "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
        {"digest": "sha256:att", "platform": {"os": "linux", "architecture": "arm64"},
         "annotations": {"vnd.docker.reference.type": "attestation-manifest"}},
        {"digest": 7, "platform": {"os": "linux", "architecture": "arm64"}},
        {"digest": "sha256:none"},
    ]}
    assert platform_entries(index, "linux/arm64") == ["sha256:arm"]
    assert platform_entries(index, "linux/amd64") == ["sha256:amd"]
    assert platform_entries({}, "linux/amd64") == []
