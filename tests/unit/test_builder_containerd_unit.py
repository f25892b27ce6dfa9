"""On the containerd store: the base's manifest is read and kept, and the load unit is an OCI layout predicting its ID."""

from __future__ import annotations

import io
import json
import tarfile

import pytest

from kvbake.bake.adapters.basecapture import capture_base
from kvbake.bake.adapters.builder import BaseOnEngine, check_base, load_unit
from kvbake.bake.adapters.pinning import create_lock
from kvbake.bake.core.derived_image import archive_members, oci_layout_members
from kvbake.bake.core.plan import make_plan, read_overlay
from kvbake.digests import canonical_json, sha256_digest
from kvbake.engines.adapters import manifestcache
from kvbake.engines.core.containerd import StoreManifest, derived_store_manifest, thin_blob
from kvbake.engines.core.detection import EngineProfile
from kvbake.lock import read_lock
from tests.unit.bake_engine import BakeEngine, layer_tar
from tests.unit.bake_project import BASE_IMAGE, engine_with_base, project

OCI = "application/vnd.oci.image.manifest.v1+json"


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(manifestcache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")


def base_manifest(diff_ids: list[str]) -> StoreManifest:
    return StoreManifest(json.dumps({"schemaVersion": 2, "mediaType": OCI,
                                     "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "sha256:" + "c" * 64},
                                     "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": "sha256:" + "9" * 64,
                                                 "size": 10}]}).encode())


def test_the_containerd_load_unit_is_an_oci_layout_whose_manifest_digest_is_the_predicted_id(tmp_path):
    manifest = project(tmp_path)
    engine = engine_with_base()
    create_lock(engine, manifest)
    lock = read_lock(manifest)
    plan = make_plan(manifest, lock, read_overlay(manifest, lock))
    profile = EngineProfile("26.1.5", "containerd", "overlayfs")
    store = base_manifest(list(lock.base.diff_ids))
    unit = load_unit(plan, BaseOnEngine(profile, store, store.digest))
    blob = thin_blob(plan.layer.data)
    expected_manifest = derived_store_manifest(store, plan.config_bytes, blob)
    assert unit.members == oci_layout_members(plan.config_bytes, blob, expected_manifest)
    assert unit.expected.store_id == sha256_digest(expected_manifest) and unit.expected.config_digest == plan.image_id
    assert unit.expected.profile == profile and manifestcache.get(unit.expected.store_id) == expected_manifest
    classic = load_unit(plan, BaseOnEngine(EngineProfile("26.1.5", "classic", "overlay2"), None, lock.base.config_digest))
    assert classic.members == archive_members(plan.config_bytes, list(lock.base.diff_ids), plan.layer.data)


def test_the_containerd_base_check_reads_the_bases_store_manifest(tmp_path):
    manifest = project(tmp_path)
    engine = engine_with_base()
    create_lock(engine, manifest)
    lock = read_lock(manifest)
    asked = []
    engine._profile = EngineProfile("26.1.5", "containerd", "overlayfs")
    base_id = engine.image_id_of(BASE_IMAGE)
    engine.configs[base_id] = base_id
    store = base_manifest(list(lock.base.diff_ids))

    def store_manifest(image_id, reference):
        asked.append((image_id, reference))
        return store

    engine.store_manifest = store_manifest
    base = check_base(engine, manifest, lock)
    assert base.store_manifest == store and base.image_id == base_id and asked == [(base_id, BASE_IMAGE)]
    assert base.profile.store == "containerd"


def oci_save_members(config_bytes: bytes, layer: bytes) -> list[tuple[str, bytes]]:
    """What an engine's save of a one-layer image holds in the OCI layout: Docker's manifest.json, the config and the
    layer blobs, the OCI manifest blob, oci-layout and index.json."""
    manifest = canonical_json({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                               "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha256_digest(config_bytes),
                                          "size": len(config_bytes)},
                               "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": sha256_digest(layer),
                                           "size": len(layer)}]})
    index = canonical_json({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                                                               "digest": sha256_digest(manifest), "size": len(manifest)}]})
    return sorted([*archive_members(config_bytes, [], layer), (f"blobs/sha256/{sha256_digest(manifest).split(':')[1]}", manifest),
                   ("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", index)])


class OciSaver(BakeEngine):
    """An engine whose save is an OCI layout of a one-layer image, as the containerd store writes it."""

    def __init__(self) -> None:
        super().__init__(store="containerd")
        self.layer = layer_tar([("usr", None, 0o755), ("usr/lib", None, 0o700)])
        self.config_bytes = json.dumps({"architecture": "amd64", "os": "linux",
                                        "rootfs": {"type": "layers", "diff_ids": [sha256_digest(self.layer)]}}).encode()

    def save_stream(self, reference):
        members = oci_save_members(self.config_bytes, self.layer)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for name, data in members:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return iter([buffer.getvalue()])


def test_a_save_that_carries_the_stores_manifest_puts_it_in_the_manifest_cache():
    engine = OciSaver()
    saved = capture_base(engine, "img:1", (sha256_digest(engine.layer),), frozenset({"usr/lib"}))
    assert saved.store_manifest is not None and json.loads(saved.store_manifest)["mediaType"] == OCI
    assert [c for c in engine.calls if c[0] == "remember_manifest"] == [("remember_manifest", saved.store_manifest)]
    assert saved.dirs["usr/lib"].mode == 0o700 and saved.config_digest == sha256_digest(engine.config_bytes)


def test_on_the_containerd_store_the_saved_config_must_be_the_one_the_stores_manifest_names():
    from kvbake.bake.adapters.base_source import read_base
    from kvbake.errors import BaseImageError

    engine = OciSaver()
    layers = [sha256_digest(engine.layer)]
    saved_config = sha256_digest(engine.config_bytes)
    inspect = {"Id": "sha256:" + "d" * 64, "RepoDigests": [], "RootFS": {"Layers": layers}}
    engine.configs[inspect["Id"]] = saved_config
    read = read_base(engine, "img:1", inspect, "linux/amd64", frozenset())
    assert (read.source, read.config_digest) == ("docker save", saved_config)
    engine.configs[inspect["Id"]] = "sha256:" + "7" * 64  # the store's manifest names another config than the save holds
    with pytest.raises(BaseImageError) as caught:
        read_base(engine, "img:1", inspect, "linux/amd64", frozenset())
    assert "sha256:777777777777" in caught.value.message and "docker-26.1-containerd" in caught.value.message
