"""Where lock reads the base: a registry copy's config (and store manifest) by digest, else one `docker save`."""

from __future__ import annotations

import contextlib
import json
import logging
from typing import Any, Iterator

import httpx
import pytest

from kvbake.bake.adapters import base_source
from kvbake.digests import canonical_json, sha256_digest
from kvbake.engines.adapters import manifestcache
from kvbake.engines.core.savefile import DirMeta
from kvbake.errors import BaseImageError
from kvbake.registry.adapters.registry_api import RegistryClient
from kvbake.registry.core.remote_manifest import DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST
from message_words import says

LAYERS = ["sha256:" + "1" * 64, "sha256:" + "2" * 64]
CONFIG = canonical_json({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": LAYERS}})
CONFIG_DIGEST = sha256_digest(CONFIG)
WANTED = frozenset({"usr", "usr/lib", "usr/lib/py"})
REGISTRY = "127.0.0.1:5000"


def image_manifest(config: bytes = CONFIG, media_type: str = DOCKER_MANIFEST) -> bytes:
    return canonical_json({"schemaVersion": 2, "mediaType": media_type,
                           "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": sha256_digest(config),
                                      "size": len(config)},
                           "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "digest": d, "size": 1} for d in LAYERS]})


class Registry:
    """A distribution registry in memory: manifests and blobs by digest, every request recorded."""

    def __init__(self, *documents: bytes, status: int | None = None) -> None:
        self.objects = {sha256_digest(d): d for d in documents}
        self.status = status
        self.requests: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(f"{request.method} {request.url.path}")
        if self.status is not None:
            return httpx.Response(self.status)
        if request.url.path == "/v2/":
            return httpx.Response(200)
        kind, digest = request.url.path.split("/")[-2:]
        body = self.objects.get(digest)
        if body is None:
            return httpx.Response(404)
        if kind == "manifests":
            media_type = json.loads(body)["mediaType"]
            return httpx.Response(200, content=body, headers={"Content-Type": media_type, "Docker-Content-Digest": digest})
        return httpx.Response(200, content=body)


class Engine:
    """The engine calls base_source makes, recorded; `containerd` switches the store."""

    def __init__(self, containerd: bool = False, saved: bytes = CONFIG) -> None:
        self.containerd = containerd
        self.saved = saved
        self.calls: list[str] = []
        self.remembered: list[bytes] = []

    def profile(self) -> Any:
        store = type("Store", (), {"keeps_manifests": self.containerd})()
        return type("Profile", (), {"image_store": store, "name": "containerd" if self.containerd else "classic"})()

    def config_digest_of(self, inspect: dict, reference: str, fetch=None) -> str:
        if not self.containerd:
            return inspect["Id"]
        data = manifestcache.get(inspect["Id"])
        assert data is not None, "the store manifest must be known before the identity is asked for"
        return json.loads(data)["config"]["digest"]

    def remember_manifest(self, data: bytes) -> str:
        self.remembered.append(data)
        return manifestcache.put(data)

    def store_root(self) -> tuple[str, str]:
        return "", ""  # no store to mount: the save route

    @contextlib.contextmanager
    def created_container(self, image: str) -> Iterator[str]:
        self.calls.append(f"create {image}")
        yield "c1"

    def dir_meta(self, container: str, path: str) -> DirMeta | None:
        self.calls.append(f"stat {path}")
        return None if path == "/usr/lib/py" else DirMeta(0o755, 0, 0, 7)


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(manifestcache.CACHE_ENV, str(tmp_path / "cache"))


def serve(monkeypatch: pytest.MonkeyPatch, registry: Registry) -> None:
    monkeypatch.setattr(base_source, "RegistryClient",
                        lambda address, auth: RegistryClient(address, auth, transport=httpx.MockTransport(registry)))
    monkeypatch.setattr(base_source, "credentials_for", lambda address: None)


def save_instead(monkeypatch: pytest.MonkeyPatch, engine: Engine, dirs: dict[str, DirMeta]) -> None:
    def capture(engine_, reference, diff_ids, wanted):
        engine_.calls.append(f"save {reference}")
        return type("Saved", (), {"config_bytes": engine.saved, "config_digest": sha256_digest(engine.saved), "dirs": dirs})()

    monkeypatch.setattr(base_source, "capture_base", capture)


def read_with_no_save(monkeypatch: pytest.MonkeyPatch, engine: Engine, image_id: str, repo_digests: list[str]):
    """read_base of base:1 for linux/amd64, with a save stand-in that hands back the engine's saved config and no folders."""
    save_instead(monkeypatch, engine, {})
    return base_source.read_base(engine, "base:1", inspect_of(image_id, repo_digests), "linux/amd64", WANTED)


def inspect_of(image_id: str, repo_digests: list[str]) -> dict:
    return {"Id": image_id, "RepoDigests": repo_digests, "RootFS": {"Layers": list(LAYERS)}}


def test_a_registry_copy_gives_the_config_and_the_engine_the_directories_without_a_save(monkeypatch) -> None:
    manifest = image_manifest()
    registry = Registry(manifest, CONFIG)
    serve(monkeypatch, registry)
    engine = Engine()
    read = read_with_no_save(monkeypatch, engine, CONFIG_DIGEST, [f"{REGISTRY}/team/base@{sha256_digest(manifest)}"])
    assert (read.config_bytes, read.config_digest) == (CONFIG, CONFIG_DIGEST)
    assert read.source == f"registry {REGISTRY}/team/base@{sha256_digest(manifest)}"
    assert read.dirs == {"usr": DirMeta(0o755, 0, 0, 7), "usr/lib": DirMeta(0o755, 0, 0, 7)}
    assert not any(call.startswith("save") for call in engine.calls)
    assert sorted(engine.calls) == ["create base:1", "stat /usr", "stat /usr/lib", "stat /usr/lib/py"]
    assert f"GET /v2/team/base/blobs/{CONFIG_DIGEST}" in registry.requests


def test_an_index_copy_is_followed_to_the_platform_s_manifest(monkeypatch) -> None:
    manifest = image_manifest(media_type=OCI_MANIFEST)
    other = image_manifest(canonical_json({"rootfs": {"diff_ids": []}}), OCI_MANIFEST)
    index = canonical_json({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {"mediaType": OCI_MANIFEST, "digest": sha256_digest(other), "size": len(other), "platform": {"os": "linux", "architecture": "arm64"}},
        {"mediaType": OCI_MANIFEST, "digest": sha256_digest(manifest), "size": len(manifest), "platform": {"os": "linux", "architecture": "amd64"}},
    ]})
    registry = Registry(index, manifest, other, CONFIG)
    serve(monkeypatch, registry)
    read = base_source.read_base(Engine(), "base:1", inspect_of(CONFIG_DIGEST, [f"{REGISTRY}/base@{sha256_digest(index)}"]),
                                 "linux/amd64", WANTED)
    assert read.config_bytes == CONFIG and read.source.startswith("registry ")
    assert f"GET /v2/base/manifests/{sha256_digest(other)}" not in registry.requests


def test_the_containerd_store_s_manifest_comes_from_the_copy_too(monkeypatch) -> None:
    manifest = image_manifest(media_type=OCI_MANIFEST)
    serve(monkeypatch, Registry(manifest, CONFIG))
    engine = Engine(containerd=True)
    read = read_with_no_save(monkeypatch, engine, sha256_digest(manifest), [f"{REGISTRY}/base@{sha256_digest(manifest)}"])
    assert read.config_digest == CONFIG_DIGEST and engine.remembered == [manifest]
    assert not any(call.startswith("save") for call in engine.calls)


@pytest.mark.parametrize("registry", [
    Registry(image_manifest(canonical_json({"rootfs": {"diff_ids": LAYERS}, "other": 1})), canonical_json({"rootfs": {"diff_ids": LAYERS}, "other": 1})),
    Registry(status=500),
    Registry(),
], ids=["another-config", "registry-error", "absent"])
def test_a_copy_that_cannot_give_this_config_falls_back_to_one_save_and_says_so(monkeypatch, caplog, registry) -> None:
    serve(monkeypatch, registry)
    engine = Engine()
    saved_dirs = {"usr": DirMeta(0o700, 1, 2, 3)}
    save_instead(monkeypatch, engine, saved_dirs)
    with caplog.at_level(logging.WARNING, logger=base_source.__name__):
        read = base_source.read_base(engine, "base:1", inspect_of(CONFIG_DIGEST, [f"{REGISTRY}/base@sha256:{'9' * 64}"]),
                                     "linux/amd64", WANTED)
    assert (read.source, read.config_bytes, read.dirs) == ("docker save", CONFIG, saved_dirs)
    assert engine.calls == ["save base:1"]
    assert any("docker save" in r.getMessage() and "base:1" in r.getMessage() for r in caplog.records)


def test_an_image_without_a_registry_copy_is_saved_and_a_changed_save_is_refused(monkeypatch) -> None:
    serve(monkeypatch, Registry(status=500))
    engine = Engine(saved=b'{"changed": true}')
    save_instead(monkeypatch, engine, {})
    with pytest.raises(BaseImageError) as caught:
        base_source.read_base(engine, "base:1", inspect_of(CONFIG_DIGEST, ["base@sha256:" + "9" * 64]), "linux/amd64", WANTED)
    assert caught.value.exit_code == 6 and CONFIG_DIGEST[:19] in caught.value.message
    assert engine.calls == ["save base:1"]


def test_a_registry_config_naming_other_layers_is_refused(monkeypatch) -> None:
    manifest = image_manifest()
    serve(monkeypatch, Registry(manifest, CONFIG))
    inspect = inspect_of(CONFIG_DIGEST, [f"{REGISTRY}/base@{sha256_digest(manifest)}"])
    inspect["RootFS"]["Layers"] = LAYERS[:1]
    with pytest.raises(BaseImageError) as caught:
        base_source.read_base(Engine(), "base:1", inspect, "linux/amd64", WANTED)
    assert caught.value.exit_code == 6 and "other layers" in caught.value.message
    assert says(caught.value.message, "base:1") and says(caught.value.fix, "run lock again")


def test_the_config_digest_of_a_containerd_image_comes_from_its_copy_or_else_from_the_engine(monkeypatch) -> None:
    manifest = image_manifest(media_type=OCI_MANIFEST)
    serve(monkeypatch, Registry(manifest, CONFIG))
    engine = Engine(containerd=True)
    copied = inspect_of(sha256_digest(manifest), [f"{REGISTRY}/base@{sha256_digest(manifest)}"])
    assert base_source.config_digest(engine, "base:1", copied) == CONFIG_DIGEST and engine.remembered == [manifest]
    assert base_source.config_digest(Engine(), "base:1", inspect_of("sha256:classic-id", [])) == "sha256:classic-id"
