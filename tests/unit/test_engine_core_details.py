"""The engine core's details: containerd manifests and thin blob, profile JSON and store, procfs probe answers."""

from __future__ import annotations

import json

import pytest

from kvbake.digests import canonical_json, sha256_digest
from kvbake.engines.core.containerd import (CONFIG_TYPE, DOCKER_MANIFEST, GZIP_LAYER, OCI_MANIFEST, STORE, StoreManifest,
                                            derived_store_manifest, parse_store_manifest, thin_blob)
from kvbake.engines.core.detection import EngineProfile, profile_from_info, store_of
from kvbake.engines.core.procfs import ImportOrigin, merged_processes, parse_origins, parse_processes, unread_users
from kvbake.errors import BaseImageError, EngineError

from message_words import says

SNAPSHOTTER = ["driver-type", "io.containerd.snapshotter.v1"]


def refused(data: bytes) -> BaseImageError:
    with pytest.raises(BaseImageError) as caught:
        parse_store_manifest(data, "base:1")
    assert caught.value.exit_code == 6 and "of base:1" in caught.value.message
    return caught.value


def test_a_manifest_that_is_not_json_points_at_the_cache_entry():
    error = refused(b"{half")
    assert "is not JSON" in error.message and error.fix.startswith("remove the manifest cache entry")


@pytest.mark.parametrize(("document", "named"), [
    ([1, 2], "(?)"),
    ({"mediaType": "application/vnd.oci.image.index.v1+json", "config": {"digest": "sha256:1"}}, "(application/vnd.oci.image.index.v1+json)"),
    ({"mediaType": OCI_MANIFEST, "config": {}}, f"({OCI_MANIFEST})"),
    ({"mediaType": DOCKER_MANIFEST}, f"({DOCKER_MANIFEST})"),
])
def test_only_a_single_platform_image_manifest_with_a_config_is_a_store_manifest(document, named):
    error = refused(json.dumps(document).encode())
    assert "is not a single-platform image manifest" in error.message and named in error.message
    assert says(error.fix, "use a single-platform base image")


def test_a_manifest_without_a_media_type_is_read_as_oci():
    found = parse_store_manifest(canonical_json({"config": {"digest": "sha256:" + "c" * 64}}), "base:1")
    assert (found.media_type, found.config_digest, found.layers) == (OCI_MANIFEST, "sha256:" + "c" * 64, [])


def test_the_thin_blob_is_gzip_at_level_six_with_no_time_and_no_name():
    blob = thin_blob(b"layer " * 4000)
    assert blob[:3] == b"\x1f\x8b\x08" and blob[3] == 0, "no name field"
    assert blob[4:8] == b"\x00\x00\x00\x00", "modification time zero"
    assert blob[8] == 0, "XFL 0: neither the fastest nor the best level, the default six"


@pytest.mark.parametrize("family", [OCI_MANIFEST, DOCKER_MANIFEST])
def test_the_derived_manifest_is_exactly_the_base_layers_then_the_thin_layer(family):
    layer = {"mediaType": "application/vnd.oci.image.layer.v1.tar+zstd", "digest": "sha256:" + "2" * 64, "size": 99}
    base = StoreManifest(canonical_json({"schemaVersion": 2, "mediaType": family, "config": {"digest": "sha256:" + "b" * 64}, "layers": [layer]}))
    config, blob = b'{"config": {}}', thin_blob(b"thin")
    assert json.loads(derived_store_manifest(base, config, blob)) == {
        "schemaVersion": 2, "mediaType": family,
        "config": {"mediaType": CONFIG_TYPE[family], "digest": sha256_digest(config), "size": len(config)},
        "layers": [layer, {"mediaType": GZIP_LAYER[family], "digest": sha256_digest(blob), "size": len(blob)}]}


def test_the_containerd_store_cannot_predict_an_id_without_the_manifest():
    with pytest.raises(ValueError) as caught:
        STORE.derived_id(b"{}", None)
    assert says(str(caught.value), "the containerd store needs the derived manifest")
    assert STORE.pulled_id("sha256:c", "reg/x@sha256:" + "d" * 64) == "sha256:" + "d" * 64


def test_the_profile_json_names_every_fact():
    assert EngineProfile("26.1.5", "containerd", "overlayfs").to_json() == {
        "name": "docker-26.1-containerd", "server_version": "26.1.5", "store": "containerd", "driver": "overlayfs",
        "id_meaning": "manifest digest"}


@pytest.mark.parametrize(("status", "store"), [
    ([SNAPSHOTTER], "containerd"), ([["Backing Filesystem", "extfs"], SNAPSHOTTER], "containerd"),
    ([["driver-type", "io.containerd.other"]], "classic"), ([["other", "io.containerd.snapshotter.v1"]], "classic"),
    ([["driver-type"]], "classic"), (None, "classic"), ([], "classic"),
])
def test_only_the_snapshotter_driver_type_makes_the_containerd_store(status, store):
    assert store_of(status) == store


def test_the_profile_keeps_the_driver_and_states_an_unset_one_as_empty():
    assert profile_from_info({"server_version": "26.1.5", "driver": "overlay2", "driver_status": [SNAPSHOTTER]}, "e").driver == "overlay2"
    assert profile_from_info({"server_version": "26.1.5", "driver": None}, "e").driver == ""


def test_an_engine_without_a_version_or_too_old_is_refused_with_the_upgrade():
    with pytest.raises(EngineError) as caught:
        profile_from_info({"driver": "overlay2"}, "e")
    assert "unreadable server version ''" in caught.value.message
    with pytest.raises(EngineError) as caught:
        profile_from_info({"server_version": "20.9.1", "driver": "overlay2"}, "spark-a")
    assert "spark-a runs Docker 20.9.1" in caught.value.message and caught.value.fix.startswith("upgrade the engine to Docker 20.10 or later")
    assert profile_from_info({"server_version": "20.10.0"}, "e").version == (20, 10)


def test_a_process_without_a_uid_is_roots_and_a_non_list_answer_is_refused():
    (process,) = parse_processes(repr([{"pid": 7, "ppid": 1, "argv": ["x"], "env": ["A=1"], "cwd": "/", "exe": "/x"}]))
    assert process.uid == 0 and process.env == {"A": "1"} and process.stdout == process.stdin == "", "an older probe's answer"
    (process,) = parse_processes(repr([{"pid": 7, "ppid": 0, "argv": ["x"], "env": [], "cwd": "/", "exe": "/x", "stdout": "pipe:[41]",
                                        "stdin": "/dev/pts/0"}]))
    assert process.stdout == "pipe:[41]" and process.stdin == "/dev/pts/0"
    with pytest.raises(ValueError) as caught:
        parse_processes("{'pid': 1}")
    assert says(str(caught.value), "the process probe did not answer a list")


def test_a_process_the_probe_could_not_read_is_left_out_and_its_user_named_to_read_it_as():
    answer = repr([{"pid": 1, "ppid": 0, "argv": ["sleep"], "env": [], "cwd": "/", "exe": "/bin/sleep"},
                   {"pid": 8, "uid": 65534, "unread": True}, {"pid": 9, "uid": 1000, "unread": True}, {"pid": 12, "uid": 1000, "unread": True}])
    assert [p.pid for p in parse_processes(answer)] == [1] and unread_users(answer) == (1000, 65534)
    as_nobody = parse_processes(repr([{"pid": 8, "ppid": 0, "uid": 65534, "argv": ["vllm"], "env": [], "cwd": "/srv", "exe": "/x"}]))
    merged = merged_processes(parse_processes(answer), as_nobody, as_nobody)
    assert [(p.pid, p.uid, p.cwd) for p in merged] == [(1, 0, "/"), (8, 65534, "/srv")]
    with pytest.raises(ValueError):
        unread_users("['not an object']")


def test_an_answer_that_is_no_literal_names_why_and_an_origins_count_must_match():
    with pytest.raises(ValueError, match=r"not a literal \(SyntaxError\)"):
        parse_processes("[{")
    for answer, count in (("[{'origin': None, 'path': []}]", 2), ("{'origin': None}", 1)):
        with pytest.raises(ValueError) as caught:
            parse_origins(answer, count)
        assert says(str(caught.value), "the import probe did not answer one entry per process")
    with pytest.raises(ValueError) as caught:
        parse_origins("['x']", 1)
    assert says(str(caught.value), "an import probe entry is not an object")


def test_an_origins_error_is_its_lines_joined_or_unknown():
    assert parse_origins("[{'error': ['OSError:', 'no such file']}, {'error': []}, {'origin': '/v/__init__.py', 'path': ['/v', '']}]", 3) == (
        ImportOrigin(None, (), "OSError: no such file"), ImportOrigin(None, (), "unknown"), ImportOrigin("/v/__init__.py", ("/v", "")))


def test_an_origins_answer_carries_its_start_up_hooks_sorted_and_a_malformed_list_is_refused():
    answer = "[{'origin': None, 'path': [], 'hooks': {'/z/b.pth': 'bb', '/a/sitecustomize.py': 'aa'}}]"
    assert parse_origins(answer, 1)[0].hooks == (("/a/sitecustomize.py", "aa"), ("/z/b.pth", "bb"))
    with pytest.raises(ValueError, match="start-up hooks are not a mapping"):
        parse_origins("[{'origin': None, 'path': [], 'hooks': ['/a.pth']}]", 1)
