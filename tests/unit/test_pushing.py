"""Push decisions on recorded registry manifests: target, overwrite rule, read-back comparison, byte accounting."""

from __future__ import annotations

import pytest

from kvbake.errors import RegistryError
from kvbake.pushing import (
    Expected,
    Target,
    account,
    human_bytes,
    overwrite_refusal,
    readback_failures,
    target_for,
    upload_summary,
)
from kvbake.registry_api import DOCKER_MANIFEST, OCI_INDEX, RemoteManifest

IMAGE_ID = "sha256:" + "1" * 64
BASE, THIN = "sha256:" + "b" * 64, "sha256:" + "d" * 64
BASE_BLOB, THIN_BLOB = "sha256:" + "e" * 64, "sha256:" + "f" * 64
LABELS = {"org.kvbake.format": "1", "org.opencontainers.image.title": "tiny"}
EXPECTED = Expected(IMAGE_ID, (BASE, THIN), LABELS)


def manifest(config_digest: str = IMAGE_ID, layers: tuple[tuple[str, int], ...] = ((BASE_BLOB, 4096), (THIN_BLOB, 900))) -> RemoteManifest:
    data = {"schemaVersion": 2, "mediaType": DOCKER_MANIFEST, "config": {"digest": config_digest, "size": 1500},
            "layers": [{"digest": d, "size": s, "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip"} for d, s in layers]}
    return RemoteManifest("sha256:" + "9" * 64, DOCKER_MANIFEST, data)


def config(diff_ids=(BASE, THIN), labels=None) -> dict:
    return {"rootfs": {"type": "layers", "diff_ids": list(diff_ids)}, "config": {"Labels": dict(LABELS if labels is None else labels)}}


def test_target_keeps_or_replaces_the_registry_host():
    assert target_for("127.0.0.1:5000/tiny:1-kvpack-abc") == Target("127.0.0.1:5000", "tiny", "1-kvpack-abc")
    moved = target_for("127.0.0.1:5000/team/tiny:1-kvpack-abc", "127.0.0.1:41234")
    assert moved.reference == "127.0.0.1:41234/team/tiny:1-kvpack-abc" and moved.repository == "127.0.0.1:41234/team/tiny"
    assert target_for("dsv41-kvpack:v5-kvpack-abc", "registry.example:5000").reference == "registry.example:5000/library/dsv41-kvpack:v5-kvpack-abc"
    with pytest.raises(RegistryError, match="HOST:PORT"):
        target_for("127.0.0.1:5000/tiny:t", "127.0.0.1:5000/extra")


def test_the_same_content_reads_back_clean():
    assert readback_failures(manifest(), config(), EXPECTED) == []


def test_every_difference_is_named():
    other = manifest(config_digest="sha256:" + "2" * 64, layers=((BASE_BLOB, 4096),))
    failures = readback_failures(other, config(diff_ids=(BASE,), labels={**LABELS, "org.kvbake.format": "2"}), EXPECTED)
    assert len(failures) == 4
    assert "is not the local image's" in failures[0] and "diff_ids" in failures[1]
    assert "lists 1 layers, the image has 2" in failures[2] and "org.kvbake.format" in failures[3]


def test_an_existing_tag_with_the_same_config_is_not_a_refusal():
    target = Target("127.0.0.1:5000", "tiny", "t")
    assert overwrite_refusal(manifest(), IMAGE_ID, target) is None
    refusal = overwrite_refusal(manifest(config_digest="sha256:" + "2" * 64), IMAGE_ID, target)
    assert refusal is not None and refusal.exit_code == 11
    assert "sha256:" + "2" * 64 in refusal.one_line() and IMAGE_ID in refusal.one_line() and "fix: bump the manifest" in refusal.one_line()
    index = RemoteManifest("sha256:" + "3" * 64, OCI_INDEX, {"manifests": []})
    assert "a application/vnd.oci.image.index.v1+json" in overwrite_refusal(index, IMAGE_ID, target).one_line()


def test_only_blobs_absent_before_the_push_count_as_uploaded():
    upload = account(manifest(), {BASE_BLOB})
    assert upload.new_layers == ((THIN_BLOB, 900),) and upload.present_layers == ((BASE_BLOB, 4096),)
    assert upload.uploaded_bytes == 900 + 1500 and upload.thin_layer_compressed_bytes == 900
    assert upload_summary(upload) == "pushed 1 new layer, 900 B (+ config 1.5 KB); 1 base layer already present"
    everything = account(manifest(), set())
    assert everything.uploaded_bytes == 4096 + 900 + 1500
    assert account(manifest(), {BASE_BLOB, THIN_BLOB, IMAGE_ID}).uploaded_bytes == 0


@pytest.mark.parametrize(("size", "text"), [(0, "0 B"), (1023, "1023 B"), (2150, "2.1 KB"), (209_715_200, "200.0 MB")])
def test_human_bytes(size, text):
    assert human_bytes(size) == text
