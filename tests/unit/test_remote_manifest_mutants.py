"""A manifest refusal quotes a digest, reference or media type the registry gave only up to its first 80 characters."""

from __future__ import annotations

import pytest

from kvbake.digests import sha256_digest
from kvbake.errors import RegistryError
from kvbake.registry.core.remote_manifest import DOCKER_MANIFEST, parse_manifest
from message_words import says
from test_remote_manifest_shapes import GOOD, body_of

LONG = "sha256:" + "f" * 120


def refusal(body: bytes, header_digest: str | None, reference: str | None = None) -> RegistryError:
    with pytest.raises(RegistryError) as caught:
        parse_manifest(body, header_digest, DOCKER_MANIFEST, reference)
    return caught.value


def test_a_long_digest_header_is_quoted_up_to_80_characters() -> None:
    assert says(refusal(body_of(GOOD), LONG).message, f"manifest is {LONG[:80]}")


def test_a_long_digest_reference_is_quoted_up_to_80_characters() -> None:
    assert says(refusal(body_of(GOOD), None, LONG).message, f"the manifest {LONG[:80]}")


def test_a_long_media_type_in_the_body_is_quoted_up_to_80_characters() -> None:
    declared = "application/" + "x" * 120
    body = body_of({**GOOD, "mediaType": declared})
    assert says(refusal(body, sha256_digest(body)).message, f"its body says {declared[:80]}")
