"""A node's identity of an image on the containerd store: the manifest its Id names is read from the release's own
repository in the registry, with the login in that node's engine client config; a registry that refuses is logged
(which manifest, which repository, why) and answers nothing, so the caller reads the engine instead."""

from __future__ import annotations

import base64
import functools
import json
import logging
from pathlib import Path

import httpx
import pytest

from kvbake.digests import sha256_digest
from kvbake.ship.adapters import node_identity
from kvbake.registry.adapters.registry_api import DOCKER_MANIFEST, RegistryClient

from fake_engine import FakeEngine
from test_pushing import MemoryRegistry

REPOSITORY = "127.0.0.1:5000/kvbake/x"
LOGIN = "puller:s3cret"
MANIFEST = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST,
                       "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": "sha256:" + "c" * 64, "size": 2},
                       "layers": []}).encode()
DIGEST = sha256_digest(MANIFEST)


class Node(FakeEngine):
    """A containerd-store node whose engine client config folder holds the registry login; it keeps what `fetch` gave."""

    def __init__(self, folder: Path) -> None:
        super().__init__("a", "containerd")
        self.folder, self.fetched = folder, []

    def config_dir(self) -> str:
        return str(self.folder)

    def config_digest_of(self, inspect, reference, fetch=None):
        self.fetched.append(fetch(inspect["Id"]) if fetch else None)
        return super().config_digest_of(inspect, reference, fetch)


@pytest.fixture()
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Node:
    registry = MemoryRegistry()
    registry.store("t", MANIFEST)

    def logged_in(request: httpx.Request) -> httpx.Response:
        if request.headers.get("Authorization") != "Basic " + base64.b64encode(LOGIN.encode()).decode():
            return httpx.Response(401, headers={"WWW-Authenticate": 'Basic realm="r"'})
        if not request.url.path.startswith("/v2/kvbake/x/") and request.url.path != "/v2/":
            return httpx.Response(404, json={"errors": [{"code": "NAME_UNKNOWN", "message": "no such repository"}]})
        return registry.handle(request)

    monkeypatch.setattr(node_identity, "RegistryClient", functools.partial(RegistryClient, certs_root=Path("/nonexistent"),
                                                                            transport=httpx.MockTransport(logged_in)))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "not-this-one"))
    (tmp_path / "config.json").write_text(json.dumps({"auths": {"127.0.0.1:5000": {"auth": base64.b64encode(LOGIN.encode()).decode()}}}))
    engine = Node(tmp_path)
    engine.images[DIGEST] = {"Id": DIGEST, "RootFS": {"Layers": []}, "Config": {"Labels": {}}}
    engine.configs[DIGEST] = "sha256:" + "c" * 64
    return engine


def test_the_manifest_is_read_from_the_releases_repository_with_the_nodes_login(node):
    assert node_identity.registry_manifests(node, REPOSITORY)(DIGEST) == MANIFEST
    assert node_identity.registry_manifests(node, REPOSITORY)("sha256:" + "0" * 64) is None


def test_config_digest_on_hands_the_engine_that_source(node):
    assert node_identity.config_digest_on(node, node.images[DIGEST], REPOSITORY) == "sha256:" + "c" * 64
    assert node.fetched == [MANIFEST] and node.identified == [f"{REPOSITORY}@{DIGEST}"]


def test_a_registry_that_refuses_is_logged_by_manifest_and_repository_and_answers_nothing(node, caplog):
    (node.folder / "config.json").write_text("{}")
    with caplog.at_level(logging.INFO, logger=node_identity.__name__):
        assert node_identity.registry_manifests(node, REPOSITORY)(DIGEST) is None
    logged = [r.getMessage() for r in caplog.records if r.name == node_identity.__name__]
    assert len(logged) == 1 and logged[0].startswith(f"the registry cannot give the manifest {DIGEST[:19]} of {REPOSITORY} (")
    assert "401" in logged[0] or "login" in logged[0] or "auth" in logged[0].lower()
