"""lock reads a base with no registry copy from the engine's own store: one blob per step, each held to its digest,
through a container that never runs with the store's folder mounted read-only; where no folder holds it, the save."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator

import pytest

from kvbake.bake.adapters import base_source
from kvbake.bake.adapters.store_blobs import MOUNTED_AT, BlobReader, StoredConfig, read_config, stored_config
from kvbake.digests import canonical_json, sha256_digest
from kvbake.engines.adapters import manifestcache
from kvbake.engines.core.blob_folders import blob_folders, blob_name
from kvbake.errors import EngineError
from test_base_source import CONFIG, CONFIG_DIGEST, WANTED, image_manifest, inspect_of, save_instead

ROOT = "/var/lib/docker"
OTHER = canonical_json({"rootfs": {"type": "layers", "diff_ids": ["sha256:" + "3" * 64]}})


def test_the_store_s_folders_are_the_imagedb_or_containerd_s_content_the_engine_s_own_first():
    assert blob_folders(ROOT + "/", "overlay2", False) == (f"{ROOT}/image/overlay2/imagedb/content/sha256",)
    assert blob_folders(ROOT, "overlayfs", True) == (f"{ROOT}/containerd/daemon/io.containerd.content.v1.content/blobs/sha256",
                                                     "/var/lib/containerd/io.containerd.content.v1.content/blobs/sha256")
    assert blob_name(CONFIG_DIGEST) == CONFIG_DIGEST.split(":")[1]
    for bad in ("sha512:" + "a" * 64, "sha256:" + "A" * 64, "sha256:../../etc/passwd", "sha256:" + "a" * 63):
        with pytest.raises(ValueError):
            blob_name(bad)


class Blobs:
    """A store folder's blobs by digest (as the digest-checking reader hands them back)."""

    def __init__(self, *documents: bytes) -> None:
        self.by_digest = {sha256_digest(d): d for d in documents}
        self.asked: list[str] = []

    def read(self, digest: str) -> bytes | None:
        self.asked.append(digest)
        return self.by_digest.get(digest)


def index_of(manifest: bytes, platform: tuple[str, str] = ("linux", "amd64")) -> bytes:
    return canonical_json({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": sha256_digest(manifest), "size": len(manifest),
         "platform": {"os": platform[0], "architecture": platform[1]}}]})


def test_the_classic_store_s_config_is_the_blob_the_image_id_names():
    assert read_config(Blobs(CONFIG), CONFIG_DIGEST, False, "linux/amd64") == StoredConfig(CONFIG, CONFIG_DIGEST)
    assert read_config(Blobs(), CONFIG_DIGEST, False, "linux/amd64") is None


def test_the_containerd_store_follows_the_manifest_the_id_names_to_its_config_and_keeps_that_manifest():
    manifest = image_manifest()
    found = read_config(Blobs(manifest, CONFIG), sha256_digest(manifest), True, "linux/amd64")
    assert found == StoredConfig(CONFIG, CONFIG_DIGEST, manifest)


def test_an_index_is_followed_to_the_platform_s_manifest_and_another_platform_s_is_none():
    manifest = image_manifest()
    index = index_of(manifest)
    blobs = Blobs(index, manifest, CONFIG)
    assert read_config(blobs, sha256_digest(index), True, "linux/amd64") == StoredConfig(CONFIG, CONFIG_DIGEST, None)
    assert read_config(blobs, sha256_digest(index), True, "linux/arm64") is None
    assert read_config(Blobs(manifest), sha256_digest(manifest), True, "linux/amd64") is None, "its config is missing"
    assert read_config(Blobs(b"not json"), sha256_digest(b"not json"), True, "linux/amd64") is None


class CopyingEngine:
    """docker cp out of a never-started container: the mounted folder's files, by their path in the container."""

    def __init__(self, files: dict[str, bytes], folders: dict[str, dict[str, bytes]] | None = None, refuse: tuple[str, ...] = ()) -> None:
        self.files, self.folders, self.refuse = files, folders or {}, refuse
        self.created: list[tuple[str, tuple[str, str] | None]] = []
        self.mounted: dict[str, bytes] = files

    def copy_out(self, container: str, path: str, destination: Path) -> bool:
        if path not in self.mounted:
            return False
        destination.write_bytes(self.mounted[path])
        return True

    def store_root(self) -> tuple[str, str]:
        return ROOT, "overlay2"

    def profile(self) -> Any:
        store = type("Store", (), {"keeps_manifests": False})()
        return type("Profile", (), {"image_store": store, "name": "classic"})()

    @contextlib.contextmanager
    def created_container(self, image: str, read_only_folder: tuple[str, str] | None = None) -> Iterator[str]:
        self.created.append((image, read_only_folder))
        if read_only_folder and read_only_folder[0] in self.refuse:
            raise EngineError(f"mount of {read_only_folder[0]} refused", "check the engine")
        if read_only_folder:
            self.mounted = {f"{MOUNTED_AT}/{name}": data for name, data in self.folders.get(read_only_folder[0], {}).items()}
        yield "never-runs"


def test_a_blob_is_used_only_when_its_bytes_hash_to_its_digest():
    name = CONFIG_DIGEST.split(":")[1]
    assert BlobReader(CopyingEngine({f"{MOUNTED_AT}/{name}": CONFIG}), "c").read(CONFIG_DIGEST) == CONFIG
    assert BlobReader(CopyingEngine({f"{MOUNTED_AT}/{name}": OTHER}), "c").read(CONFIG_DIGEST) is None, "other bytes"
    assert BlobReader(CopyingEngine({}), "c").read(CONFIG_DIGEST) is None, "absent"
    assert BlobReader(CopyingEngine({}), "c").read("sha256:../x") is None, "never a path of its own"


IMAGEDB = f"{ROOT}/image/overlay2/imagedb/content/sha256"


def test_the_base_is_read_through_a_never_started_container_with_the_store_mounted_read_only():
    engine = CopyingEngine({}, {IMAGEDB: {CONFIG_DIGEST.split(":")[1]: CONFIG}})
    assert stored_config(engine, "base:1", {"Id": CONFIG_DIGEST}, "linux/amd64") == StoredConfig(CONFIG, CONFIG_DIGEST)
    assert engine.created == [("base:1", (IMAGEDB, MOUNTED_AT))]


def test_a_folder_the_engine_refuses_to_mount_or_that_lacks_the_blob_is_not_a_source():
    assert stored_config(CopyingEngine({}, refuse=(IMAGEDB,)), "base:1", {"Id": CONFIG_DIGEST}, "linux/amd64") is None
    assert stored_config(CopyingEngine({}, {IMAGEDB: {}}), "base:1", {"Id": CONFIG_DIGEST}, "linux/amd64") is None
    nowhere = CopyingEngine({})
    nowhere.store_root = lambda: ("", "")  # an engine that names no root
    assert stored_config(nowhere, "base:1", {"Id": CONFIG_DIGEST}, "linux/amd64") is None and nowhere.created == []


def test_read_base_takes_the_store_s_config_without_a_save_and_falls_back_to_the_save_without_it(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv(manifestcache.CACHE_ENV, str(tmp_path / "cache"))
    from test_base_source import Engine

    engine = Engine()
    monkeypatch.setattr(base_source, "stored_config", lambda *args: StoredConfig(CONFIG, CONFIG_DIGEST))
    save_instead(monkeypatch, engine, {})
    read = base_source.read_base(engine, "base:1", inspect_of(CONFIG_DIGEST, []), "linux/amd64", WANTED)
    assert (read.config_bytes, read.config_digest, read.source) == (CONFIG, CONFIG_DIGEST, "the engine's own store")
    assert not any(call.startswith("save") for call in engine.calls) and engine.remembered == []
    manifest = image_manifest()
    monkeypatch.setattr(base_source, "stored_config", lambda *args: StoredConfig(CONFIG, CONFIG_DIGEST, manifest))
    base_source.read_base(engine, "base:1", inspect_of(sha256_digest(manifest), []), "linux/amd64", WANTED)
    assert engine.remembered == [manifest], "the containerd store's manifest is kept, as a save would have kept it"

    monkeypatch.setattr(base_source, "stored_config", lambda *args: StoredConfig(OTHER, sha256_digest(OTHER)))
    with pytest.raises(Exception, match="the engine store's config of base:1 names other layers"):
        base_source.read_base(engine, "base:1", inspect_of(CONFIG_DIGEST, []), "linux/amd64", WANTED)

    monkeypatch.setattr(base_source, "stored_config", lambda *args: None)
    read = base_source.read_base(engine, "base:1", inspect_of(CONFIG_DIGEST, []), "linux/amd64", WANTED)
    assert read.source == "docker save" and engine.calls.count("save base:1") == 1
    assert any("cannot be read through a container" in r.getMessage() for r in caplog.records)
