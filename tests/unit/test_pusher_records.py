"""What `push` records and counts, over the in-memory registry: the push record's fields, which blobs count as already
present (other tags' layers, the config), the record file, and the upload summary's counts and units."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from kvbake import __version__
from kvbake.digests import sha256_digest
from kvbake.ship.adapters import pusher
from kvbake.ship.adapters.pusher import (KNOWN_TAGS_LIMIT, Upload, human_bytes, present_blobs, push_record, ship, upload_summary,
                                         write_push_record)
from kvbake.ship.core.push_record import PUSHES_DIR
from test_pushing import BASE_BYTES, THIN_BYTES, TARGET, FakeEngine, MemoryRegistry, image_config, image_manifest, pushed_expectation


def pushed(registry: MemoryRegistry, config: bytes):
    with registry.client() as client:
        return ship(FakeEngine(registry, config), client, TARGET, pushed_expectation(config), "sha256:" + "1" * 64)


def test_a_fresh_push_records_every_layer_as_new_and_the_bytes_it_cost():
    config = image_config()
    result = pushed(MemoryRegistry(), config)
    record = push_record(result)
    manifest_digest = sha256_digest(image_manifest(config))
    assert record["kvbake"] == __version__ and record["status"] == "pushed"
    assert (record["reference"], record["registry"], record["pinned"]) == (TARGET.reference, TARGET.registry, f"{TARGET.repository}@{manifest_digest}")
    assert record["manifest_digest"] == manifest_digest and record["config_digest"] == sha256_digest(config)
    assert record["media_type"] == "application/vnd.docker.distribution.manifest.v2+json" and record["image_id"] == "sha256:" + "1" * 64
    assert record["layers"] == [{"digest": sha256_digest(BASE_BYTES), "size": len(BASE_BYTES), "new": True},
                                {"digest": sha256_digest(THIN_BYTES), "size": len(THIN_BYTES), "new": True}]
    assert record["uploaded_bytes"] == len(BASE_BYTES) + len(THIN_BYTES) + len(config)
    assert record["thin_layer_compressed_bytes"] == len(THIN_BYTES)
    assert (record["new_layers"], record["present_layers"]) == (2, 0)


def test_a_tag_already_holding_the_image_is_recorded_as_already_present_with_nothing_uploaded():
    registry, config = MemoryRegistry(), image_config()
    registry.store(TARGET.tag, image_manifest(config), config, BASE_BYTES, THIN_BYTES)
    result = pushed(registry, config)
    record = push_record(result)
    assert result.already_present and record["status"] == "already present"
    assert record["uploaded_bytes"] == 0 and (record["new_layers"], record["present_layers"]) == (0, 2)
    assert [layer["new"] for layer in record["layers"]] == [False, False]


def test_layers_another_tag_holds_count_as_present_and_only_the_thin_layer_is_uploaded():
    registry, config = MemoryRegistry(), image_config()
    older = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                        "config": {"digest": sha256_digest(b"old config"), "size": 10},
                        "layers": [{"digest": sha256_digest(BASE_BYTES), "size": len(BASE_BYTES)}]}).encode()
    registry.store("0-kvpack-old", older, b"old config", BASE_BYTES)
    record = push_record(pushed(registry, config))
    assert [layer["new"] for layer in record["layers"]] == [False, True]
    assert record["uploaded_bytes"] == len(THIN_BYTES) + len(config) and (record["new_layers"], record["present_layers"]) == (1, 1)


def test_present_blobs_are_the_known_tags_layers_and_the_config_the_registry_holds():
    registry, config = MemoryRegistry(), image_config()
    registry.store("t1", image_manifest(config), config, BASE_BYTES, THIN_BYTES)
    registry.lost.add(sha256_digest(THIN_BYTES))
    with registry.client() as client:
        assert present_blobs(client, TARGET, sha256_digest(config)) == {sha256_digest(config), sha256_digest(BASE_BYTES)}
        assert present_blobs(client, TARGET, "sha256:" + "0" * 64) == {sha256_digest(BASE_BYTES)}


def test_only_the_newest_known_tags_are_read_for_present_layers():
    registry = MemoryRegistry()
    blobs = [f"layer {i}".encode() for i in range(KNOWN_TAGS_LIMIT + 1)]
    for i, blob in enumerate(blobs):
        body = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                           "config": {"digest": sha256_digest(b"c"), "size": 1}, "layers": [{"digest": sha256_digest(blob), "size": 1}]}).encode()
        registry.store(f"t{i:03d}", body, blob)
    with registry.client() as client:
        found = present_blobs(client, TARGET, sha256_digest(b"c"))
    assert sha256_digest(blobs[0]) not in found and sha256_digest(blobs[1]) in found and sha256_digest(blobs[-1]) in found


def test_the_record_is_written_under_the_tag_beside_the_manifest(tmp_path):
    record = push_record(pushed(MemoryRegistry(), image_config()))
    path = write_push_record(tmp_path, record)
    assert path == tmp_path / PUSHES_DIR / f"{TARGET.tag}.json"
    assert json.loads(path.read_text()) == record


@pytest.mark.parametrize(("upload", "named"), [
    (Upload((("a", 2048), ("b", 2048)), (), 10, False, 2048), ("pushed 2 new layers, 4.0 KB;", "0 base layers already present")),
    (Upload((), (("a", 1), ("b", 1), ("c", 1)), 10, False, 1), ("pushed 0 new layers, 0 B;", "3 base layers already present")),
    (Upload((("a", 5),), (("b", 1),), 1024, True, 5), ("pushed 1 new layer, 5 B (+ config 1.0 KB)", "1 base layer already present")),
])
def test_the_upload_summary_counts_layers_in_the_singular_and_plural(upload, named):
    summary = upload_summary(upload)
    assert all(part in summary for part in named)
    assert ("config" in summary) == upload.config_new


@pytest.mark.parametrize(("size", "text"), [(1024, "1.0 KB"), (1024 ** 2, "1.0 MB"), (3 * 1024 ** 3, "3.0 GB"),
                                            (5 * 1024 ** 4, "5.0 TB"), (2048 * 1024 ** 4, "2048.0 TB")])
def test_human_bytes_moves_up_a_unit_at_each_1024_and_stops_at_terabytes(size, text):
    assert human_bytes(size) == text


class NodeClock(datetime):
    """This host's clock at 2026-01-02 03:04:05 UTC, on a host whose local time zone is nine hours ahead."""

    @classmethod
    def now(cls, tz=None):
        moment = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
        return moment.astimezone(tz) if tz is not None else (moment + timedelta(hours=9)).replace(tzinfo=None)


def test_the_push_time_is_recorded_in_utc_whatever_the_hosts_time_zone(monkeypatch):
    monkeypatch.setattr(pusher, "datetime", NodeClock)
    assert push_record(pushed(MemoryRegistry(), image_config()))["pushed_at"] == "2026-01-02T03:04:05Z"
