"""The push over a registry that keeps repositories apart: what it reads back, counts, refuses, logs and tells."""

from __future__ import annotations

import json
import logging

import httpx
import pytest

from kvbake.digests import sha256_digest
from kvbake.errors import RegistryError
from kvbake.ship.adapters import pusher
from kvbake.ship.adapters.pusher import account, present_blobs, read_back, readback_failures, ship
from kvbake.registry.adapters.registry_api import DOCKER_MANIFEST, RemoteManifest
from message_words import says
from test_pushing import (BASE_BYTES, EXPECTED, LABELS, THIN_BYTES, TARGET, FakeEngine, MemoryRegistry, config, image_config,
                          image_manifest, manifest, pushed_expectation)

STORE_ID = "sha256:" + "1" * 64


class OneRepositoryRegistry(MemoryRegistry):
    """The in-memory registry holding TARGET's repository only (a request for another name finds nothing); tags in
    `vanished` are listed but their manifests are gone."""

    def __init__(self) -> None:
        super().__init__()
        self.vanished: set[str] = set()

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path != "/v2/" and not path.startswith(f"/v2/{TARGET.name}/"):
            return httpx.Response(404, json={"errors": [{"code": "NAME_UNKNOWN", "message": "repository name not known"}]})
        if path.endswith("/tags/list") and self.vanished:
            listed = [t for t in self.manifests if not t.startswith("sha256:")]
            return httpx.Response(200, json={"name": TARGET.name, "tags": [*listed, *sorted(self.vanished)]})
        if path.rsplit("/", 1)[1] in self.vanished:
            return httpx.Response(404, json={"errors": [{"code": "MANIFEST_UNKNOWN", "message": "gone"}]})
        return super().handle(request)


def holding_the_image(config_bytes: bytes) -> OneRepositoryRegistry:
    registry = OneRepositoryRegistry()
    registry.store(TARGET.tag, image_manifest(config_bytes), config_bytes, BASE_BYTES, THIN_BYTES)
    return registry


def test_a_tag_of_its_own_repository_holding_the_image_is_read_back_and_not_pushed_again():
    config_bytes = image_config()
    registry = holding_the_image(config_bytes)
    engine = FakeEngine(registry, config_bytes)
    with registry.client() as client:
        result = ship(engine, client, TARGET, pushed_expectation(config_bytes), STORE_ID)
    assert result.already_present is True and result.image_id == STORE_ID
    assert result.manifest.digest == sha256_digest(image_manifest(config_bytes)) and engine.repo_digests == []


def test_a_fresh_push_is_read_back_from_its_own_repository_and_is_not_already_present():
    config_bytes = image_config()
    registry = OneRepositoryRegistry()
    with registry.client() as client:
        result = ship(FakeEngine(registry, config_bytes), client, TARGET, pushed_expectation(config_bytes), STORE_ID)
    assert result.already_present is False and result.image_id == STORE_ID
    assert result.pinned == f"{TARGET.repository}@{sha256_digest(image_manifest(config_bytes))}"


def test_layers_another_tag_of_the_repository_holds_count_as_present():
    config_bytes = image_config()
    registry = OneRepositoryRegistry()
    older = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST, "config": {"digest": sha256_digest(b"old config"), "size": 10},
                        "layers": [{"digest": sha256_digest(BASE_BYTES), "size": len(BASE_BYTES)}]}).encode()
    registry.store("0-kvpack-old", older, b"old config", BASE_BYTES)
    with registry.client() as client:
        assert present_blobs(client, TARGET, sha256_digest(config_bytes)) == {sha256_digest(BASE_BYTES)}
        result = ship(FakeEngine(registry, config_bytes), client, TARGET, pushed_expectation(config_bytes), STORE_ID)
    assert result.upload.new_layers == ((sha256_digest(THIN_BYTES), len(THIN_BYTES)),)
    assert result.upload.present_layers == ((sha256_digest(BASE_BYTES), len(BASE_BYTES)),)


def test_a_listed_tag_whose_manifest_is_gone_adds_no_present_blob():
    registry = OneRepositoryRegistry()
    registry.vanished.add("0-kvpack-gone")
    registry.blobs[sha256_digest(b"our config")] = b"our config"
    with registry.client() as client:
        assert present_blobs(client, TARGET, sha256_digest(b"our config")) == {sha256_digest(b"our config")}


def test_a_config_without_a_size_counts_no_config_bytes():
    data = {"schemaVersion": 2, "config": {"digest": "sha256:" + "c" * 64}, "layers": [{"digest": "sha256:" + "a" * 64, "size": 7}]}
    upload = account(RemoteManifest("sha256:" + "9" * 64, DOCKER_MANIFEST, data), set())
    assert upload.config_bytes == 0 and upload.config_new and upload.uploaded_bytes == 7


def test_a_manifest_without_layers_has_no_thin_layer_bytes():
    upload = account(manifest(layers=()), set())
    assert upload.thin_layer_compressed_bytes == 0 and upload.new_layers == ()


def test_the_thin_layer_is_the_last_of_three():
    layers = (("sha256:" + "a" * 64, 10), ("sha256:" + "b" * 64, 20), ("sha256:" + "c" * 64, 30))
    assert account(manifest(layers=layers), set()).thin_layer_compressed_bytes == 30


def test_a_tag_absent_right_after_the_push_names_the_reference_and_the_fix():
    with OneRepositoryRegistry().client() as client, pytest.raises(RegistryError) as failure:
        read_back(client, TARGET, EXPECTED, None)
    assert failure.value.exit_code == RegistryError.exit_code
    assert says(failure.value.message, TARGET.reference) and says(failure.value.message, "absent from the registry")
    assert says(failure.value.fix, "push again")


def test_every_repo_digest_the_engine_recorded_is_listed_comma_separated():
    config_bytes = image_config()
    recorded = [f"{TARGET.repository}@sha256:{'7' * 64}", f"{TARGET.repository}@sha256:{'8' * 64}"]
    with holding_the_image(config_bytes).client() as client, pytest.raises(RegistryError) as failure:
        read_back(client, TARGET, pushed_expectation(config_bytes), recorded)
    assert says(failure.value.message, f"another manifest ({recorded[0]}, {recorded[1]})")
    assert says(failure.value.fix, "push under a new tag")


def test_no_recorded_repo_digest_is_told_as_none_recorded():
    registry, config_bytes = OneRepositoryRegistry(), image_config()
    with registry.client() as client, pytest.raises(RegistryError) as failure:
        ship(FakeEngine(registry, config_bytes, None), client, TARGET, pushed_expectation(config_bytes), STORE_ID)
    assert says(failure.value.message, "(none recorded)")


def test_every_read_back_failure_is_listed_semicolon_separated():
    registry, config_bytes = OneRepositoryRegistry(), image_config()
    registry.lost.update({sha256_digest(BASE_BYTES), sha256_digest(THIN_BYTES)})
    with registry.client() as client, pytest.raises(RegistryError) as failure:
        ship(FakeEngine(registry, config_bytes), client, TARGET, pushed_expectation(config_bytes), STORE_ID)
    assert says(failure.value.message, f"{sha256_digest(BASE_BYTES)} is missing from the registry; layer {sha256_digest(THIN_BYTES)}")


def test_every_changed_label_is_named_comma_separated():
    changed = {key: "other" for key in LABELS}
    failures = readback_failures(manifest(), config(labels=changed), EXPECTED)
    assert failures and says(failures[-1], f"labels differ ({', '.join(sorted(LABELS))})")


def test_a_config_blob_that_is_not_json_tells_to_push_under_a_new_tag():
    registry, config_bytes = OneRepositoryRegistry(), b"\x1f\x8b not json"
    with registry.client() as client, pytest.raises(RegistryError) as failure:
        ship(FakeEngine(registry, config_bytes), client, TARGET, pushed_expectation(config_bytes), STORE_ID)
    assert says(failure.value.message, "is not a JSON object") and says(failure.value.fix, "push under a new tag")


def test_a_tag_holding_another_image_is_refused_before_any_push():
    config_bytes, other = image_config(), image_config(labels={"org.kvbake.format": "0"})
    registry = holding_the_image(other)
    engine = FakeEngine(registry, config_bytes)
    with registry.client() as client, pytest.raises(RegistryError) as refused:
        ship(engine, client, TARGET, pushed_expectation(config_bytes), STORE_ID)
    assert says(refused.value.message, "already holds other content") and says(refused.value.fix, "set another output.tag")
    assert engine.repo_digests == []


def test_an_already_present_tag_is_logged_with_its_reference_and_digest(caplog):
    config_bytes = image_config()
    registry = holding_the_image(config_bytes)
    caplog.set_level(logging.INFO, logger=pusher.__name__)
    with registry.client() as client:
        ship(FakeEngine(registry, config_bytes), client, TARGET, pushed_expectation(config_bytes), STORE_ID)
    said = [record.getMessage() for record in caplog.records if record.name == pusher.__name__]
    digest = sha256_digest(image_manifest(config_bytes))
    assert any(says(line, TARGET.reference) and says(line, digest) and says(line, "nothing to push") for line in said)
