"""Manifests as a registry serves them, checked before use: the digest header and a digest reference, the media type the
reply and the body give, and each way a body's descriptors can be malformed, named by where."""

from __future__ import annotations

import json

import pytest

from kvbake.digests import sha256_digest
from kvbake.errors import RegistryError
from kvbake.registry.core.remote_manifest import (DOCKER_LIST, DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST, RemoteManifest, parse_manifest,
                                              shape_flaw)

DIGEST = "sha256:" + "a" * 64
GOOD = {"config": {"digest": DIGEST, "size": 10}, "layers": [{"digest": DIGEST, "size": 0}]}


@pytest.mark.parametrize(("data", "flaw"), [
    ({"layers": []}, "config is not an object"),
    ({"config": {"digest": "sha256:abc", "size": 1}, "layers": []}, "config has no sha256 digest"),
    ({"config": {"digest": "md5:" + "a" * 67, "size": 1}, "layers": []}, "config has no sha256 digest"),
    ({"config": {"digest": DIGEST, "size": -1}, "layers": []}, "config has no byte size"),
    ({"config": {"digest": DIGEST, "size": True}, "layers": []}, "config has no byte size"),
    ({"config": {"digest": DIGEST, "size": "1"}, "layers": []}, "config has no byte size"),
    ({"config": {"digest": DIGEST, "size": 1}, "layers": {}}, "its layers are not a list"),
    ({"config": {"digest": DIGEST, "size": 1}, "layers": [GOOD["config"], {"digest": DIGEST}]}, "layers[1] has no byte size"),
    ({"config": {"digest": DIGEST, "size": 1}, "layers": ["x"]}, "layers[0] is not an object"),
])
def test_an_image_manifests_flaw_is_named_by_where_it_is(data, flaw):
    assert shape_flaw(DOCKER_MANIFEST, data) == flaw


def test_a_well_formed_image_or_index_has_no_flaw():
    assert shape_flaw(OCI_MANIFEST, GOOD) is None
    assert shape_flaw(OCI_INDEX, {"manifests": [{"digest": DIGEST, "size": 5}]}) is None
    assert shape_flaw(DOCKER_LIST, {"manifests": {}}) == "its manifests are not a list"
    assert shape_flaw(OCI_INDEX, {"manifests": [{"digest": DIGEST, "size": 5}, {"size": 5}]}) == "manifests[1] has no sha256 digest"


def test_an_index_has_no_config_and_no_layers_an_image_lists_its_layers_in_order():
    assert RemoteManifest(DIGEST, OCI_INDEX, {"config": {"digest": DIGEST}, "layers": [{"digest": DIGEST, "size": 1}]}).config_digest is None
    image = RemoteManifest(DIGEST, DOCKER_MANIFEST, {"config": {"digest": DIGEST}, "layers": [{"digest": "b", "size": "7"}, {"digest": "c", "size": 2}]})
    assert image.config_digest == DIGEST and image.layers == [("b", 7), ("c", 2)]
    assert RemoteManifest(DIGEST, DOCKER_MANIFEST, {}).layers == [] and RemoteManifest(DIGEST, DOCKER_MANIFEST, {}).config_digest is None


def body_of(data: dict) -> bytes:
    return json.dumps(data).encode()


def test_a_manifest_is_parsed_when_digest_media_type_and_shape_agree():
    body = body_of({**GOOD, "mediaType": DOCKER_MANIFEST})
    found = parse_manifest(body, sha256_digest(body), f"{DOCKER_MANIFEST}; charset=utf-8", sha256_digest(body))
    assert (found.digest, found.media_type, found.raw) == (sha256_digest(body), DOCKER_MANIFEST, body)
    assert parse_manifest(body, None, DOCKER_MANIFEST.upper(), "v1").media_type == DOCKER_MANIFEST


@pytest.mark.parametrize(("body", "header", "served", "reference", "named", "fix"), [
    (body_of(GOOD), "sha256:" + "0" * 64, DOCKER_MANIFEST, None, "the registry says the manifest is sha256:000", "altered"),
    (body_of(GOOD), None, DOCKER_MANIFEST, "sha256:" + "0" * 64, "answered the manifest sha256:000", "proxy"),
    (b"{not json", None, DOCKER_MANIFEST, None, "is not JSON", "check the registry"),
    (b"[1]", None, DOCKER_MANIFEST, None, "is not a JSON object", "check the registry"),
    (body_of(GOOD), None, "text/html", None, "served the manifest", "Docker schema 2 or OCI"),
    (body_of(GOOD), None, "", None, "as no Content-Type", "Docker schema 2 or OCI"),
    (body_of({**GOOD, "mediaType": OCI_MANIFEST}), None, DOCKER_MANIFEST, None, f"its body says {OCI_MANIFEST}", "proxy"),
    (body_of({"layers": []}), None, DOCKER_MANIFEST, None, "is malformed: config is not an object", "push again"),
])
def test_each_bad_reply_names_what_is_wrong_and_what_to_check(body, header, served, reference, named, fix):
    with pytest.raises(RegistryError) as failure:
        parse_manifest(body, header, served, reference)
    assert named in failure.value.message and fix in failure.value.fix
