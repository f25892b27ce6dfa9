"""Tests of engine profiles and the identity model: config digest everywhere, each store's ID predicted."""

from __future__ import annotations

import gzip
import json

import pytest

from kvbake.digests import canonical_json, sha256_digest
from kvbake.errors import BaseImageError, EngineError
from kvbake.engines.core.containerd import DOCKER_MANIFEST, OCI_MANIFEST, derived_store_manifest, parse_store_manifest, thin_blob
from kvbake.engines.core.detection import EngineProfile, profile_from_info
from kvbake.engines.core.identity import expected_id

CLASSIC_INFO = {"server_version": "20.10.24+dfsg1", "driver": "overlay2", "driver_status": [["Backing Filesystem", "extfs"]]}
CONTAINERD_INFO = {"server_version": "26.1.5+dfsg1", "driver": "overlayfs", "driver_status": [["driver-type", "io.containerd.snapshotter.v1"]]}
CONFIG = canonical_json({"rootfs": {"type": "layers", "diff_ids": ["sha256:" + "1" * 64]}})


def base_manifest(family: str) -> bytes:
    layer_type = "application/vnd.docker.image.rootfs.diff.tar.gzip" if family == DOCKER_MANIFEST else "application/vnd.oci.image.layer.v1.tar+zstd"
    return canonical_json({"schemaVersion": 2, "mediaType": family, "config": {"mediaType": "x", "digest": "sha256:" + "b" * 64, "size": 3},
                           "layers": [{"mediaType": layer_type, "digest": "sha256:" + "2" * 64, "size": 99}]})


@pytest.mark.parametrize(("info", "name", "store", "meaning"), [
    (CLASSIC_INFO, "docker-20.10-classic", "classic", "config digest"),
    ({**CLASSIC_INFO, "server_version": "26.1.5"}, "docker-26.1-classic", "classic", "config digest"),
    (CONTAINERD_INFO, "docker-26.1-containerd", "containerd", "manifest digest"),
])
def test_profiles_are_detected_from_docker_info(info, name, store, meaning) -> None:
    profile = profile_from_info(info, "engine")
    assert (profile.name, profile.store, profile.id_meaning) == (name, store, meaning)


@pytest.mark.parametrize("version", ["19.03.15", "1.13.1"])
def test_engines_older_than_20_10_are_refused(version: str) -> None:
    with pytest.raises(EngineError, match=rf"runs Docker {version}, older than the oldest supported engine 20.10"):
        profile_from_info({**CLASSIC_INFO, "server_version": version}, "engine")


def test_an_unreadable_version_is_refused() -> None:
    with pytest.raises(EngineError, match="unreadable server version"):
        profile_from_info({**CLASSIC_INFO, "server_version": "dev"}, "engine")


@pytest.mark.parametrize("family", [DOCKER_MANIFEST, OCI_MANIFEST])
def test_the_derived_manifest_keeps_the_base_descriptors_and_adds_the_gzip_thin_layer(family: str) -> None:
    base = parse_store_manifest(base_manifest(family), "base")
    blob = thin_blob(b"layer bytes" * 100)
    derived = json.loads(derived_store_manifest(base, CONFIG, blob))
    assert derived["mediaType"] == family
    assert derived["layers"][:-1] == base.layers
    assert derived["layers"][-1]["digest"] == sha256_digest(blob) and derived["layers"][-1]["mediaType"].endswith("gzip")
    assert derived["config"]["digest"] == sha256_digest(CONFIG)
    assert gzip.decompress(blob) == b"layer bytes" * 100


def test_the_thin_blob_and_the_predicted_ids_repeat() -> None:
    assert thin_blob(b"x" * 5000) == thin_blob(b"x" * 5000)
    base = parse_store_manifest(base_manifest(OCI_MANIFEST), "base")
    manifest = derived_store_manifest(base, CONFIG, thin_blob(b"x"))
    containerd = expected_id(profile_from_info(CONTAINERD_INFO, "e"), CONFIG, manifest)
    classic = expected_id(profile_from_info(CLASSIC_INFO, "e"), CONFIG, None)
    assert containerd.config_digest == classic.config_digest == classic.store_id == sha256_digest(CONFIG)
    assert containerd.store_id == sha256_digest(manifest) != classic.store_id
    assert "manifest digest" in containerd.describe()


def test_an_index_is_not_a_store_manifest() -> None:
    with pytest.raises(BaseImageError, match="is not a single-platform image manifest"):
        parse_store_manifest(canonical_json({"mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []}), "base")


def test_profile_json_names_the_meaning_of_the_id() -> None:
    assert EngineProfile("26.1.5", "containerd", "overlayfs").to_json()["id_meaning"] == "manifest digest"
