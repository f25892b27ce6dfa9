"""Push decisions on recorded registry manifests, and the push itself on an in-memory registry and a fake engine."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from kvbake.digests import sha256_digest

from kvbake.errors import RegistryError
from kvbake.ship.adapters.pusher import (
    Expected,
    Target,
    account,
    human_bytes,
    overwrite_refusal,
    readback_failures,
    ship,
    target_for,
    upload_summary,
)
from kvbake.registry.adapters.registry_api import DOCKER_MANIFEST, OCI_INDEX, RegistryClient, RemoteManifest

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
    with pytest.raises(RegistryError) as caught:
        target_for("127.0.0.1:5000/tiny:t", "127.0.0.1:5000/extra")
    assert caught.value.exit_code == 11
    assert all(field in caught.value.message for field in ("--registry", "'127.0.0.1:5000/extra'", "HOST[:PORT]"))
    assert "HOST:PORT" in caught.value.fix


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


# --- the push itself, on an in-memory registry and a fake engine (no docker) ---

REGISTRY = "127.0.0.1:5000"
TARGET = Target(REGISTRY, "tiny", "1-kvpack-abc")
BASE_BYTES, THIN_BYTES = b"base layer bytes", b"thin layer bytes"


def image_config(labels=LABELS) -> bytes:
    return json.dumps({"rootfs": {"type": "layers", "diff_ids": [BASE, THIN]}, "config": {"Labels": dict(labels)}}).encode()


def image_manifest(config: bytes) -> bytes:
    return json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST,
                       "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": sha256_digest(config), "size": len(config)},
                       "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "digest": sha256_digest(b), "size": len(b)}
                                  for b in (BASE_BYTES, THIN_BYTES)]}).encode()


class MemoryRegistry:
    """Just enough of the distribution API for a push and its read-back; `lost` blobs answer 404."""

    def __init__(self) -> None:
        self.manifests: dict[str, bytes] = {}
        self.blobs: dict[str, bytes] = {}
        self.lost: set[str] = set()

    def store(self, tag: str, manifest: bytes, *blobs: bytes) -> str:
        self.blobs.update({sha256_digest(b): b for b in blobs})
        self.manifests[tag] = self.manifests[sha256_digest(manifest)] = manifest
        return sha256_digest(manifest)

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/v2/":
            return httpx.Response(200)
        if path.endswith("/tags/list"):
            return httpx.Response(200, json={"name": "tiny", "tags": [t for t in self.manifests if not t.startswith("sha256:")]})
        reference = path.rsplit("/", 1)[1]
        if "/manifests/" in path and reference in self.manifests:
            body = self.manifests[reference]
            return httpx.Response(200, content=body, headers={"Content-Type": DOCKER_MANIFEST, "Docker-Content-Digest": sha256_digest(body)})
        if "/blobs/" in path and reference in self.blobs and reference not in self.lost:
            body = self.blobs[reference]
            return httpx.Response(200, content=body if request.method == "GET" else b"", headers={"Content-Length": str(len(body))})
        return httpx.Response(404, json={"errors": [{"code": "UNKNOWN", "message": "not found"}]})

    def client(self) -> RegistryClient:
        return RegistryClient(REGISTRY, None, certs_root=Path("/nonexistent"), transport=httpx.MockTransport(self.handle))


class FakeEngine:
    """Pushes the local image into a MemoryRegistry and records a RepoDigest, as the engine does."""

    def __init__(self, registry: MemoryRegistry, config: bytes, recorded: str | None = "pushed") -> None:
        self.registry, self.config, self.recorded = registry, config, recorded
        self.tags: set[str] = set()
        self.repo_digests: list[str] = []
        self.remembered: list[bytes] = []

    def inspect_image(self, reference: str) -> dict:
        return {"RepoTags": sorted(self.tags)}

    def tag(self, image_id: str, reference: str) -> None:
        self.tags.add(reference)

    def untag(self, reference: str) -> None:
        self.tags.discard(reference)

    def push(self, reference: str) -> None:
        assert reference in self.tags
        digest = self.registry.store(reference.rsplit(":", 1)[1], image_manifest(self.config), self.config, BASE_BYTES, THIN_BYTES)
        if self.recorded == "pushed":
            self.repo_digests = [f"{TARGET.repository}@{digest}"]
        elif self.recorded == "other":
            self.repo_digests = [f"{TARGET.repository}@sha256:{'7' * 64}", f"elsewhere:5000/tiny@{digest}"]

    def require_image(self, reference: str) -> dict:
        return {"RepoDigests": list(self.repo_digests)}

    def remember_manifest(self, data: bytes) -> str:
        self.remembered.append(data)
        return sha256_digest(data)


def pushed_expectation(config: bytes) -> Expected:
    return Expected(sha256_digest(config), (BASE, THIN), LABELS)


def test_a_clean_push_reads_back_counts_and_leaves_no_tag():
    registry, config = MemoryRegistry(), image_config()
    engine = FakeEngine(registry, config)
    with registry.client() as client:
        result = ship(engine, client, TARGET, pushed_expectation(config), IMAGE_ID)
    assert result.pinned == f"{TARGET.repository}@{sha256_digest(image_manifest(config))}" and not result.already_present
    assert result.upload.uploaded_bytes == len(BASE_BYTES) + len(THIN_BYTES) + len(config)
    assert engine.tags == set() and engine.remembered == [image_manifest(config)]


@pytest.mark.parametrize(("recorded", "named"), [("other", f"sha256:{'7' * 64}"), (None, "none recorded")])
def test_a_repo_digest_the_engine_did_not_record_fails_the_push(recorded, named):
    registry, config = MemoryRegistry(), image_config()
    engine = FakeEngine(registry, config, recorded)
    with registry.client() as client, pytest.raises(RegistryError) as failure:
        ship(engine, client, TARGET, pushed_expectation(config), IMAGE_ID)
    line = failure.value.one_line()
    assert failure.value.exit_code == 11 and "does not read back as pushed: the engine pushed another manifest" in line
    assert named in line and "layer" not in line.split("read back as pushed:")[1].split("; fix:")[0]
    assert engine.tags == set() and engine.remembered == []


def test_a_layer_missing_from_the_registry_after_the_push_fails_it():
    registry, config = MemoryRegistry(), image_config()
    registry.lost.add(sha256_digest(THIN_BYTES))
    with registry.client() as client, pytest.raises(RegistryError) as failure:
        ship(FakeEngine(registry, config), client, TARGET, pushed_expectation(config), IMAGE_ID)
    reason = failure.value.one_line().split("read back as pushed: ")[1].split("; fix:")[0]
    assert failure.value.exit_code == 11 and reason == f"layer {sha256_digest(THIN_BYTES)} is missing from the registry"


def test_an_already_present_tag_with_a_missing_layer_is_not_reported_as_present():
    registry, config = MemoryRegistry(), image_config()
    registry.store(TARGET.tag, image_manifest(config), config, BASE_BYTES, THIN_BYTES)
    registry.lost.add(sha256_digest(BASE_BYTES))
    engine = FakeEngine(registry, config)
    with registry.client() as client, pytest.raises(RegistryError, match=f"layer {sha256_digest(BASE_BYTES)} is missing"):
        ship(engine, client, TARGET, pushed_expectation(config), IMAGE_ID)
    registry.lost.clear()
    with registry.client() as client:
        assert ship(engine, client, TARGET, pushed_expectation(config), IMAGE_ID).already_present


def test_a_config_blob_that_is_not_json_is_one_line():
    registry, config = MemoryRegistry(), b"\x1f\x8b not json"
    engine = FakeEngine(registry, config)
    with registry.client() as client, pytest.raises(RegistryError) as failure:
        ship(engine, client, TARGET, pushed_expectation(config), IMAGE_ID)
    assert failure.value.exit_code == 11
    assert f"the config blob {sha256_digest(config)} of {TARGET.reference} is not a JSON object" in failure.value.one_line()
    assert engine.tags == set()
