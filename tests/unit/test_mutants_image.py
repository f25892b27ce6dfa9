"""Exact-value tests of derived_image.py (was image.py) that the mutation run showed were missing: whole documents and archive members, byte for byte."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time

import pytest

from kvbake.bake.core.derived_image import (DROPPED_KEYS, archive_members, derived_config, image_id, oci_layout_members, rfc3339,
                                             write_archive)

CONFIG = b'{"config":{}}'
THIN = b"thin"
BLOB = b"compressed thin"
BASE_IDS = ["sha256:" + "a" * 64, "sha256:" + "b" * 64]


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def hex_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_the_dropped_keys_are_fixed() -> None:
    assert DROPPED_KEYS == ("container", "container_config", "docker_version", "id", "parent")


@pytest.mark.parametrize(("epoch", "text"), [(0, "1970-01-01T00:00:00Z"), (1_700_000_000, "2023-11-14T22:13:20Z"),
                                             (951_782_400, "2000-02-29T00:00:00Z")])
def test_rfc3339(epoch: int, text: str) -> None:
    assert rfc3339(epoch) == text


def test_derived_config_is_exactly_the_base_plus_labels_layer_and_history() -> None:
    base = {"architecture": "arm64", "os": "linux", "created": "old", "container": "c", "container_config": {}, "docker_version": "20",
            "id": "i", "parent": "p", "config": {"Env": ["A=1"], "Labels": {"keep": "1", "org.kvbake.format": "0"}},
            "history": [{"created_by": "ADD"}], "rootfs": {"type": "layers", "diff_ids": ["sha256:base"]}}
    data = derived_config(base, "sha256:thin", {"org.kvbake.format": "1"}, "2023-11-14T22:13:20Z", "kvbake bake x: chain 0001")
    assert json.loads(data) == {
        "architecture": "arm64", "os": "linux", "created": "2023-11-14T22:13:20Z",
        "config": {"Env": ["A=1"], "Labels": {"keep": "1", "org.kvbake.format": "1"}},
        "history": [{"created_by": "ADD"}, {"created": "2023-11-14T22:13:20Z", "created_by": "kvbake bake x: chain 0001",
                                            "comment": "kvbake thin layer"}],
        "rootfs": {"type": "layers", "diff_ids": ["sha256:base", "sha256:thin"]}}
    assert data == json.dumps(json.loads(data), sort_keys=True, separators=(",", ":")).encode()
    assert base["config"]["Labels"] == {"keep": "1", "org.kvbake.format": "0"}
    assert base["history"] == [{"created_by": "ADD"}]


def test_derived_config_of_a_bare_base_has_a_runtime_section_and_one_history_entry() -> None:
    data = derived_config({"rootfs": {"diff_ids": []}}, "sha256:t", {"l": "v"}, "c", "b")
    assert json.loads(data) == {"config": {"Labels": {"l": "v"}}, "created": "c",
                                "history": [{"created": "c", "created_by": "b", "comment": "kvbake thin layer"}],
                                "rootfs": {"type": "layers", "diff_ids": ["sha256:t"]}}
    assert json.loads(derived_config({"config": None, "history": None, "rootfs": {"diff_ids": []}}, "sha256:t", {}, "c", "b")) == {
        "config": {"Labels": {}}, "created": "c", "history": [{"created": "c", "created_by": "b", "comment": "kvbake thin layer"}],
        "rootfs": {"type": "layers", "diff_ids": ["sha256:t"]}}


def test_image_id_is_the_config_digest() -> None:
    assert image_id(CONFIG) == digest(CONFIG)


def test_a_classic_archive_holds_exactly_the_config_the_thin_layer_and_a_compact_manifest() -> None:
    manifest = ('[{"Config":"blobs/sha256/' + hex_of(CONFIG) + '","RepoTags":null,"Layers":["blobs/sha256/' + "a" * 64
                + '","blobs/sha256/' + "b" * 64 + '","blobs/sha256/' + hex_of(THIN) + '"]}]').encode()
    expected = sorted([(f"blobs/sha256/{hex_of(CONFIG)}", CONFIG), (f"blobs/sha256/{hex_of(THIN)}", THIN), ("manifest.json", manifest)])
    assert archive_members(CONFIG, BASE_IDS, THIN) == expected


def test_an_oci_layout_for_the_containerd_store_carries_the_three_blobs_and_an_index() -> None:
    manifest = b'{"mediaType":"application/vnd.oci.image.manifest.v1+json","schemaVersion":2}'
    index = (b'{"manifests":[{"digest":"' + digest(manifest).encode() + b'","mediaType":"application/vnd.oci.image.manifest.v1+json",'
             b'"size":' + str(len(manifest)).encode() + b'}],"mediaType":"application/vnd.oci.image.index.v1+json","schemaVersion":2}')
    assert oci_layout_members(CONFIG, BLOB, manifest) == sorted([
        (f"blobs/sha256/{hex_of(CONFIG)}", CONFIG), (f"blobs/sha256/{hex_of(BLOB)}", BLOB), (f"blobs/sha256/{hex_of(manifest)}", manifest),
        ("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", index)])


def test_the_oci_layout_index_names_the_manifests_own_media_type() -> None:
    docker_type = "application/vnd.docker.distribution.manifest.v2+json"
    manifest = json.dumps({"mediaType": docker_type}).encode()
    members = dict(oci_layout_members(CONFIG, BLOB, manifest))
    assert json.loads(members["index.json"])["manifests"] == [{"mediaType": docker_type, "digest": digest(manifest), "size": len(manifest)}]


def test_write_archive_writes_plain_files_with_fixed_metadata_in_the_given_order() -> None:
    out = io.BytesIO()
    write_archive(out, [("z", b"1"), ("a/b", b"")], 1_700_000_000)
    with tarfile.open(fileobj=io.BytesIO(out.getvalue()), mode="r:") as tar:
        rows = [(m.name, m.type, m.mode, m.mtime, m.size, m.uid, m.gid, tar.extractfile(m).read()) for m in tar.getmembers()]
    assert rows == [("z", tarfile.REGTYPE, 0o644, 1_700_000_000, 1, 0, 0, b"1"), ("a/b", tarfile.REGTYPE, 0o644, 1_700_000_000, 0, 0, 0, b"")]


def test_rfc3339_is_utc_whatever_the_local_time_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        assert rfc3339(1_700_000_000) == "2023-11-14T22:13:20Z"
    finally:
        monkeypatch.undo()
        time.tzset()
