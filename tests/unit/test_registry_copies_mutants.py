"""Registry copies of the base: the first `@` and `:` end a repository, equal ranks keep their order, attestations are passed over."""

from __future__ import annotations

import pytest

from kvbake.bake.core.registry_copies import RegistryCopy, platform_entries, registry_copies, repository_of

DIGEST = "sha256:" + "a" * 64
OTHER = "sha256:" + "b" * 64


@pytest.mark.parametrize("reference", ["ghcr.io/x/y@sha256:aa@sha256:bb", "ghcr.io/x/y:1:2"])
def test_a_repository_ends_at_the_first_at_sign_and_the_first_colon_of_its_last_part(reference: str) -> None:
    assert repository_of(reference) == "ghcr.io/x/y"


def test_copies_from_other_repositories_keep_the_engine_s_order() -> None:
    digests = [f"ghcr.io/zeta/base@{DIGEST}", f"127.0.0.1:5000/alpha/base@{OTHER}"]
    assert registry_copies("ghcr.io/org/base:1", digests) == [RegistryCopy("ghcr.io", "zeta/base", DIGEST),
                                                              RegistryCopy("127.0.0.1:5000", "alpha/base", OTHER)]


def test_a_repo_digest_with_a_second_at_sign_names_no_copy() -> None:
    assert registry_copies("ghcr.io/org/base:1", [f"ghcr.io/org/base@v1@{DIGEST}"]) == []


def test_an_attestation_before_the_platform_s_entry_is_passed_over() -> None:
    index = {"manifests": [
        {"digest": "sha256:att", "platform": {"os": "unknown", "architecture": "unknown"},
         "annotations": {"vnd.docker.reference.type": "attestation-manifest"}},
        {"digest": "sha256:amd", "platform": {"os": "linux", "architecture": "amd64"}},
    ]}
    assert platform_entries(index, "linux/amd64") == ["sha256:amd"]
