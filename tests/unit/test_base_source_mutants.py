"""What lock's base read tells and refuses: repositories, logins, fallbacks, refusals naming the base, and the engine's store."""

from __future__ import annotations

import base64
import logging
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from message_words import says
from test_base_source import (CONFIG, CONFIG_DIGEST, LAYERS, REGISTRY, WANTED, Engine, Registry, image_manifest, inspect_of,
                              private_cache, read_with_no_save, save_instead, serve)  # noqa: F401 - private_cache: the autouse fixture by name

from kvbake.bake.adapters import base_source
from kvbake.digests import canonical_json, sha256_digest
from kvbake.engines.adapters import client, manifestcache
from kvbake.engines.core.savefile import DirMeta
from kvbake.errors import BaseImageError
from kvbake.registry.adapters.credentials import RegistryAuth
from kvbake.registry.adapters.registry_api import RegistryClient
from kvbake.registry.core.remote_manifest import OCI_INDEX, OCI_MANIFEST

LOGIN = RegistryAuth("lock-user", "lock-secret")
DOWN = canonical_json({"errors": [{"code": "UNAVAILABLE", "message": "stand-in storage is down"}]})


class RepositoryRegistry(Registry):
    """The in-memory registry holding its documents in one repository only; any other repository has nothing."""

    def __init__(self, repository: str, *documents: bytes) -> None:
        super().__init__(*documents)
        self.repository = repository

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path != "/v2/" and request.url.path.removeprefix("/v2/").rsplit("/", 2)[0] != self.repository:
            self.requests.append(f"{request.method} {request.url.path}")
            return httpx.Response(404)
        return super().__call__(request)


class LoginRegistry(Registry):
    """The in-memory registry that answers only requests carrying LOGIN (Basic auth)."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        basic = "Basic " + base64.b64encode(f"{LOGIN.username}:{LOGIN.secret}".encode()).decode()
        if request.url.path != "/v2/" and request.headers.get("Authorization") != basic:
            self.requests.append(f"refused {request.url.path}")
            return httpx.Response(401, headers={"WWW-Authenticate": 'Basic realm="stand-in"'})
        return super().__call__(request)


class DownRegistry(Registry):
    """The in-memory registry whose storage fails: every read is a 500 with a distribution error body."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v2/":
            return httpx.Response(200)
        return httpx.Response(500, content=DOWN, headers={"Content-Type": "application/json"})


class ContainerEngine(Engine):
    """The recorded engine whose directory reads answer only inside the container it created."""

    def dir_meta(self, container: str, path: str) -> DirMeta | None:
        self.calls.append(f"stat {container}:{path}")
        return DirMeta(0o755, 0, 0, 7) if container == "c1" else None


class StoreEngine(Engine):
    """A containerd-store engine whose identity of an image is the real client's: the store manifest from the
    cache, else from one save of the image (here a stream that is not a docker save)."""

    label = "unix:///standin.sock"
    config_digest_of = client.Engine.config_digest_of
    store_manifest = client.Engine.store_manifest

    def __init__(self) -> None:
        super().__init__(containerd=True)

    def save_stream(self, image_id: str):
        self.calls.append(f"save-stream {image_id}")
        return iter([b"not a docker save"])


def save_storing(monkeypatch: pytest.MonkeyPatch, engine: Engine, store_manifest: bytes) -> None:
    """The save as the containerd store gives it: the config, and the store's manifest put into the manifest cache."""
    def capture(engine_, reference, diff_ids, wanted):
        engine_.calls.append(f"save {reference}")
        engine_.remember_manifest(store_manifest)
        return type("Saved", (), {"config_bytes": CONFIG, "config_digest": CONFIG_DIGEST, "dirs": {}})()

    monkeypatch.setattr(base_source, "capture_base", capture)


def serve_with_login(monkeypatch: pytest.MonkeyPatch, registry: Registry) -> None:
    """The registry client on the in-memory registry; the login store holds LOGIN for REGISTRY only."""
    monkeypatch.setattr(base_source, "RegistryClient",
                        lambda address, auth: RegistryClient(address, auth, transport=httpx.MockTransport(registry)))
    monkeypatch.setattr(base_source, "credentials_for", lambda address: LOGIN if address == REGISTRY else None)


def multi_platform_index() -> bytes:
    manifest = image_manifest(media_type=OCI_MANIFEST)
    return canonical_json({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {"mediaType": OCI_MANIFEST, "digest": sha256_digest(manifest), "size": len(manifest),
         "platform": {"os": "linux", "architecture": "amd64"}}]})


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == base_source.__name__]


# --- the copy's own repository and the login store ---------------------------------------------------------------------

def test_the_config_is_read_from_the_copy_s_own_repository(monkeypatch) -> None:
    manifest = image_manifest()
    serve(monkeypatch, RepositoryRegistry("team/base", manifest, CONFIG))
    read = base_source.read_base(Engine(), "base:1", inspect_of(CONFIG_DIGEST, [f"{REGISTRY}/team/base@{sha256_digest(manifest)}"]),
                                 "linux/amd64", WANTED)
    assert read.source == f"registry {REGISTRY}/team/base@{sha256_digest(manifest)}"


def test_an_index_s_platform_manifest_is_read_from_the_copy_s_own_repository(monkeypatch) -> None:
    index = multi_platform_index()
    serve(monkeypatch, RepositoryRegistry("team/base", index, image_manifest(media_type=OCI_MANIFEST), CONFIG))
    read = base_source.read_base(Engine(), "base:1", inspect_of(CONFIG_DIGEST, [f"{REGISTRY}/team/base@{sha256_digest(index)}"]),
                                 "linux/amd64", WANTED)
    assert read.config_bytes == CONFIG and read.source.startswith("registry ")


def test_the_containerd_store_s_manifest_is_fetched_from_the_copy_s_own_repository(monkeypatch) -> None:
    manifest = image_manifest(media_type=OCI_MANIFEST)
    serve(monkeypatch, RepositoryRegistry("team/base", manifest, CONFIG))
    engine = Engine(containerd=True)
    read = read_with_no_save(monkeypatch, engine, sha256_digest(manifest), [f"{REGISTRY}/team/base@{sha256_digest(manifest)}"])
    assert read.config_digest == CONFIG_DIGEST and engine.remembered == [manifest]
    assert not any(call.startswith("save") for call in engine.calls)


def test_a_registry_that_asks_for_a_login_is_read_with_the_login_store_s_credentials(monkeypatch) -> None:
    manifest = image_manifest()
    registry = LoginRegistry(manifest, CONFIG)
    serve_with_login(monkeypatch, registry)
    engine = Engine()
    read = read_with_no_save(monkeypatch, engine, CONFIG_DIGEST, [f"{REGISTRY}/base@{sha256_digest(manifest)}"])
    assert read.source.startswith("registry ")
    assert f"GET /v2/base/blobs/{CONFIG_DIGEST}" in registry.requests


# --- copies that cannot give the config: the fallback and what the log says ---------------------------------------------

def test_a_failing_registry_is_logged_with_the_copy_and_the_registry_s_reason(monkeypatch, caplog) -> None:
    serve(monkeypatch, DownRegistry())
    engine = Engine()
    save_instead(monkeypatch, engine, {})
    copy = f"{REGISTRY}/base@sha256:{'9' * 64}"
    with caplog.at_level(logging.INFO, logger=base_source.__name__):
        read = base_source.read_base(engine, "base:1", inspect_of(CONFIG_DIGEST, [copy]), "linux/amd64", WANTED)
    assert read.source == "docker save"
    assert any(says(text, copy) and says(text, "stand-in storage is down") for text in messages(caplog))


def test_a_copy_naming_another_config_is_not_used_even_when_the_registry_holds_the_wanted_config(monkeypatch, caplog) -> None:
    other_config = canonical_json({"rootfs": {"diff_ids": LAYERS}, "other": 1})
    other = image_manifest(other_config)
    registry = Registry(other, other_config, CONFIG)
    serve(monkeypatch, registry)
    engine = Engine()
    save_instead(monkeypatch, engine, {})
    copy = f"{REGISTRY}/base@{sha256_digest(other)}"
    with caplog.at_level(logging.INFO, logger=base_source.__name__):
        read = base_source.read_base(engine, "base:1", inspect_of(CONFIG_DIGEST, [copy]), "linux/amd64", WANTED)
    assert read.source == "docker save" and engine.calls == ["save base:1"]
    assert f"GET /v2/base/blobs/{CONFIG_DIGEST}" not in registry.requests
    assert any(says(text, copy) and says(text, CONFIG_DIGEST[:19]) for text in messages(caplog))


def test_a_copy_serving_some_config_says_why_lock_still_saves(monkeypatch, caplog) -> None:
    serve(monkeypatch, Registry())
    engine = Engine()
    save_instead(monkeypatch, engine, {})
    with caplog.at_level(logging.WARNING, logger=base_source.__name__):
        base_source.read_base(engine, "base:1", inspect_of(CONFIG_DIGEST, [f"{REGISTRY}/base@sha256:{'9' * 64}"]), "linux/amd64", WANTED)
    assert any(says(text, "no registry named in its RepoDigests serves it") for text in messages(caplog))


def test_an_image_naming_no_registry_says_so_when_lock_saves(monkeypatch, caplog) -> None:
    engine = Engine()
    save_instead(monkeypatch, engine, {})
    with caplog.at_level(logging.WARNING, logger=base_source.__name__):
        base_source.read_base(engine, "base:1", inspect_of(CONFIG_DIGEST, ["base@sha256:" + "9" * 64]), "linux/amd64", WANTED)
    assert any(says(text, "the image names no registry copy") for text in messages(caplog))


@pytest.mark.parametrize("registry", [Registry(status=500), Registry()], ids=["registry-error", "absent"])
def test_a_containerd_image_whose_store_manifest_no_copy_holds_is_saved(monkeypatch, registry) -> None:
    manifest = image_manifest(media_type=OCI_MANIFEST)
    serve(monkeypatch, registry)
    engine = Engine(containerd=True)
    save_storing(monkeypatch, engine, manifest)
    read = base_source.read_base(engine, "base:1", inspect_of(sha256_digest(manifest), [f"{REGISTRY}/base@{sha256_digest(manifest)}"]),
                                 "linux/amd64", WANTED)
    assert (read.source, read.config_digest) == ("docker save", CONFIG_DIGEST)
    assert engine.calls == ["save base:1"]


def test_a_copy_without_the_store_s_manifest_is_not_read_for_a_config(monkeypatch) -> None:
    store_manifest = image_manifest(media_type=OCI_MANIFEST)
    copied = image_manifest()
    registry = Registry(copied, CONFIG)
    serve(monkeypatch, registry)
    engine = Engine(containerd=True)
    save_storing(monkeypatch, engine, store_manifest)
    read = base_source.read_base(engine, "base:1", inspect_of(sha256_digest(store_manifest), [f"{REGISTRY}/base@{sha256_digest(copied)}"]),
                                 "linux/amd64", WANTED)
    assert read.source == "docker save"
    assert f"GET /v2/base/manifests/{sha256_digest(copied)}" not in registry.requests


# --- refusals name the base, the digests and the fix -------------------------------------------------------------------

def test_a_registry_config_without_diff_ids_is_refused_naming_the_base_and_the_config(monkeypatch) -> None:
    config = canonical_json({"architecture": "amd64", "os": "linux"})
    manifest = image_manifest(config)
    serve(monkeypatch, Registry(manifest, config))
    with pytest.raises(BaseImageError) as caught:
        base_source.read_base(Engine(), "base:1", inspect_of(sha256_digest(config), [f"{REGISTRY}/base@{sha256_digest(manifest)}"]),
                              "linux/amd64", WANTED)
    assert caught.value.exit_code == 6
    assert says(caught.value.message, "base:1") and says(caught.value.message, sha256_digest(config)[:19])
    assert says(caught.value.fix, "docker save")


def test_a_changed_save_is_refused_naming_both_config_digests(monkeypatch) -> None:
    changed = b'{"changed": true}'
    engine = Engine(saved=changed)
    save_instead(monkeypatch, engine, {})
    with pytest.raises(BaseImageError) as caught:
        base_source.read_base(engine, "base:1", inspect_of(CONFIG_DIGEST, []), "linux/amd64", WANTED)
    assert says(caught.value.message, sha256_digest(changed)[:19]) and says(caught.value.message, CONFIG_DIGEST[:19])


# --- the engine's own identity of a containerd image is asked about the base by name ----------------------------------

def test_a_multi_platform_store_manifest_from_a_copy_is_refused_naming_the_base(monkeypatch) -> None:
    index = multi_platform_index()
    serve(monkeypatch, Registry(index))
    with pytest.raises(BaseImageError) as caught:
        base_source.read_base(StoreEngine(), "base:1", inspect_of(sha256_digest(index), [f"{REGISTRY}/base@{sha256_digest(index)}"]),
                              "linux/amd64", WANTED)
    assert caught.value.exit_code == 6 and says(caught.value.message, "base:1")


def test_the_config_digest_of_a_multi_platform_store_manifest_from_a_copy_is_refused_naming_the_base(monkeypatch) -> None:
    index = multi_platform_index()
    serve(monkeypatch, Registry(index))
    with pytest.raises(BaseImageError) as caught:
        base_source.config_digest(StoreEngine(), "base:1", inspect_of(sha256_digest(index), [f"{REGISTRY}/base@{sha256_digest(index)}"]))
    assert caught.value.exit_code == 6 and says(caught.value.message, "base:1")


def test_the_config_digest_of_an_image_naming_no_registry_is_the_engine_s_for_the_base(monkeypatch) -> None:
    engine = StoreEngine()
    with pytest.raises(BaseImageError) as caught:
        base_source.config_digest(engine, "base:1", inspect_of("sha256:" + "5" * 64, []))
    assert says(caught.value.message, "base:1") and engine.calls == ["save-stream sha256:" + "5" * 64]


def test_a_cached_multi_platform_store_manifest_is_refused_naming_the_base_after_the_announced_save(monkeypatch, caplog) -> None:
    index = multi_platform_index()
    manifestcache.put(index)
    engine = StoreEngine()
    save_instead(monkeypatch, engine, {})
    with caplog.at_level(logging.WARNING, logger=base_source.__name__), pytest.raises(BaseImageError) as caught:
        base_source.read_base(engine, "base:1", inspect_of(sha256_digest(index), []), "linux/amd64", WANTED)
    assert says(caught.value.message, "base:1") and engine.calls == ["save base:1"]
    assert any(says(text, "the image names no registry copy") for text in messages(caplog))


# --- the base's directories ------------------------------------------------------------------------------------------

def test_every_directory_is_read_in_the_container_created_from_the_base(monkeypatch) -> None:
    manifest = image_manifest()
    serve(monkeypatch, Registry(manifest, CONFIG))
    engine = ContainerEngine()
    read = base_source.read_base(engine, "base:1", inspect_of(CONFIG_DIGEST, [f"{REGISTRY}/base@{sha256_digest(manifest)}"]),
                                 "linux/amd64", WANTED)
    assert sorted(read.dirs) == sorted(WANTED)
    assert sorted(engine.calls) == ["create base:1", "stat c1:/usr", "stat c1:/usr/lib", "stat c1:/usr/lib/py"]


def test_at_most_stat_workers_directories_are_read_at_once(monkeypatch) -> None:
    pools: list[int] = []

    class CountedPool(ThreadPoolExecutor):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            pools.append(self._max_workers)

    monkeypatch.setattr(base_source, "ThreadPoolExecutor", CountedPool)
    dirs = base_source.engine_dirs(Engine(), "base:1", WANTED)
    assert set(dirs) == {"usr", "usr/lib"} and pools == [base_source.STAT_WORKERS]
