"""`base sync` end to end over stand-in engines and an in-memory registry: the locked base pushed from this host once
(tagged by its config digest), read back, then pulled by digest and named on every node that lacks it."""

from __future__ import annotations

import base64
import functools
import json
import shutil
from pathlib import Path

import httpx
import pytest

from fake_engine import FakeEngine
from fake_fleet import make_world
from kvbake import cli
from kvbake.digests import sha256_digest
from kvbake.errors import BaseImageError, RegistryError
from kvbake.lock import read_lock
from message_words import says
from kvbake.manifest import load_manifest
from kvbake.ship import commands
from kvbake.ship.adapters import basesync, fleet as fleet_module
from kvbake.registry.adapters.registry_api import DOCKER_MANIFEST, RegistryClient
from test_pushing import MemoryRegistry

STANDIN = Path(__file__).resolve().parents[2] / "examples" / "standin" / "manifest.yaml"
MANIFEST = load_manifest(STANDIN)
LOCK = read_lock(MANIFEST)
CONFIG = json.dumps(LOCK.base.config).encode()
CONFIG_DIGEST = sha256_digest(CONFIG)  # the copied project's lock names the base by this config digest
LAYER_BLOBS = (b"os layer, compressed", b"python layer, compressed")
TAG = "base-" + CONFIG_DIGEST[7:19]
REPOSITORY = MANIFEST.output.repository  # 127.0.0.1:5000/kvbake/standin-kvpack
NAME = REPOSITORY.split("/", 1)[1]


def base_manifest(config_digest: str = CONFIG_DIGEST, blobs: tuple[bytes, ...] = LAYER_BLOBS) -> bytes:
    return json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST,
                       "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": config_digest, "size": len(CONFIG)},
                       "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "digest": sha256_digest(b), "size": len(b)}
                                  for b in blobs]}).encode()


PINNED = f"{REPOSITORY}@{sha256_digest(base_manifest())}"
HOST = "unix:///this-host.sock"
LOGIN = "pusher:s3cret"


class Registry(MemoryRegistry):
    """The in-memory registry, holding blobs under the digests the manifest names (the lock's config digest too)."""

    def put_base(self, tag: str, manifest: bytes = base_manifest(), config_digest: str = CONFIG_DIGEST) -> None:
        self.store(tag, manifest, *LAYER_BLOBS)
        self.blobs[config_digest] = CONFIG


class HostEngine(FakeEngine):
    """This host's engine: it may hold the locked base, and its push lands in the registry under the pushed tag."""

    def __init__(self, registry: Registry, config_dir: Path, holds_base: bool = True) -> None:
        super().__init__("host")
        self.registry_stand_in, self.folder = registry, config_dir
        self.pushed: list[str] = []
        self.remembered: list[bytes] = []
        if holds_base:
            self.images[CONFIG_DIGEST] = {"Id": CONFIG_DIGEST, "RootFS": {"Layers": list(LOCK.base.diff_ids)},
                                                    "Os": "linux", "Architecture": "amd64", "RepoTags": [MANIFEST.base.image],
                                                    "Config": {"Labels": {}}}
            self.tags[MANIFEST.base.image] = CONFIG_DIGEST

    def config_dir(self) -> str:
        return str(self.folder)

    def push(self, reference: str) -> None:
        self.pushed.append(reference)
        self.registry_stand_in.put_base(reference.rsplit(":", 1)[1])
        image = self.images[self.tags[reference]]
        image["RepoDigests"] = [f"{reference.rsplit(':', 1)[0]}@{sha256_digest(base_manifest())}"]

    def remember_manifest(self, data: bytes) -> str:
        self.remembered.append(data)
        return sha256_digest(data)


@pytest.fixture
def setup(tmp_path, monkeypatch):
    """The stand-in project, its lock naming the base by CONFIG_DIGEST; two nodes (a, b) that reach the registry's copy
    by its pull reference, this host's engine, and the registry."""
    project = tmp_path / "standin"
    shutil.copytree(STANDIN.parent, project, ignore=shutil.ignore_patterns("overlay", ".kvbake"))
    lock = json.loads((project / "manifest.lock.json").read_text())
    lock["base"]["config_digest"] = CONFIG_DIGEST
    (project / "manifest.lock.json").write_text(json.dumps(lock))
    world = make_world(tmp_path, monkeypatch)
    registry = Registry()
    host = HostEngine(registry, tmp_path)
    for engine in world.engines.values():
        engine.registry[PINNED] = {"Id": CONFIG_DIGEST, "RootFS": {"Layers": list(LOCK.base.diff_ids)}, "Config": {"Labels": {}}}
    by_host = {node.host: world.engines[node.name] for node in world.fleet.deployment.nodes}
    monkeypatch.setattr(fleet_module, "Engine", lambda address: by_host[address])
    monkeypatch.setattr(commands, "Engine", lambda address: host if address == HOST else pytest.fail(f"engine {address} opened"))
    login = {"auth": base64.b64encode(LOGIN.encode()).decode()}
    (tmp_path / "config.json").write_text(json.dumps({"auths": {"127.0.0.1:5000": login, "127.0.0.1:41234": login}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-login-here"))
    monkeypatch.setattr(basesync, "RegistryClient", functools.partial(RegistryClient, certs_root=Path("/nonexistent"),
                                                                      transport=httpx.MockTransport(logged_in(registry))))
    argv = [*world.command_line(monkeypatch, manifest=project / "manifest.yaml"), "--host", HOST]
    return world, registry, host, argv


def logged_in(registry: Registry):
    """The registry behind Basic auth: only the login stored in this host's engine client config folder gets in."""
    def handle(request: httpx.Request) -> httpx.Response:
        if request.headers.get("Authorization") != "Basic " + base64.b64encode(LOGIN.encode()).decode():
            return httpx.Response(401, headers={"WWW-Authenticate": 'Basic realm="r"'})
        return registry.handle(request)
    return handle


def base_sync(capsys, argv, *extra) -> tuple[int, dict | None, str]:
    code = cli.main(["base", "sync", *argv, *extra, "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out) if code == 0 else None, err


def node_base(world, name: str) -> str | None:
    return world.engines[name].image_id_of(MANIFEST.base.node_name)


def test_a_base_the_registry_lacks_is_pushed_once_then_pulled_and_named_on_every_node(setup, capsys):
    world, registry, host, argv = setup
    code, data, err = base_sync(capsys, argv)
    assert code == 0, err
    assert data == {"pinned": PINNED, "pushed": True, "node_name": MANIFEST.base.node_name,
                    "nodes": [{"node": "a", "action": "pull", "held_before": None}, {"node": "b", "action": "pull", "held_before": None}]}
    assert host.pushed == [f"{REPOSITORY}:{TAG}"] and registry.manifests[TAG] == base_manifest()
    assert f"{REPOSITORY}:{TAG}" not in host.tags and host.remembered == [base_manifest()]
    assert node_base(world, "a") == node_base(world, "b") == CONFIG_DIGEST


def test_a_second_sync_pushes_nothing_and_nodes_that_hold_it_keep_it(setup, capsys):
    world, registry, host, argv = setup
    assert base_sync(capsys, argv)[0] == 0
    code = cli.main(["base", "sync", *argv])
    out = capsys.readouterr().out.splitlines()
    assert code == 0 and host.pushed == [f"{REPOSITORY}:{TAG}"]
    assert out[0] == f"base:      {MANIFEST.base.image} (config {CONFIG_DIGEST[:19]}…)"
    assert out[1] == f"registry:  {PINNED}   (already there: nothing pushed)"
    assert out[2:] == [f"a: already held it as {MANIFEST.base.node_name}", f"b: already held it as {MANIFEST.base.node_name}"]


def test_a_base_already_in_the_registry_is_read_back_and_not_pushed_even_without_a_local_copy(setup, capsys):
    world, registry, host, argv = setup
    registry.put_base(TAG)
    host.images.clear()
    host.tags.clear()
    code, data, err = base_sync(capsys, argv)
    assert code == 0 and data["pushed"] is False and data["pinned"] == PINNED and host.pushed == [], err
    assert node_base(world, "a") == CONFIG_DIGEST


def test_the_first_sync_text_says_what_was_pushed_and_pulled(setup, capsys):
    world, registry, host, argv = setup
    assert cli.main(["base", "sync", *argv]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == f"registry:  {PINNED}   (pushed now)"
    assert out[2] == f"a: pulled it as {MANIFEST.base.node_name}"


def test_a_registry_given_replaces_the_repositorys_host(setup, capsys):
    world, registry, host, argv = setup
    moved = "127.0.0.1:41234"
    for engine in world.engines.values():
        engine.registry[f"{moved}/{NAME}@{sha256_digest(base_manifest())}"] = engine.registry[PINNED]
    code, data, err = base_sync(capsys, argv, "--registry", moved)
    assert code == 0, err
    assert data["pinned"] == f"{moved}/{NAME}@{sha256_digest(base_manifest())}" and host.pushed == [f"{moved}/{NAME}:{TAG}"]


def test_a_tag_holding_another_image_is_refused_and_nothing_is_pushed(setup, capsys):
    world, registry, host, argv = setup
    other = "sha256:" + "7" * 64
    registry.put_base(TAG, base_manifest(config_digest=other), config_digest=other)
    code, _, err = base_sync(capsys, argv)
    assert code == RegistryError.exit_code and f"{REPOSITORY}:{TAG} already holds other content" in err
    assert host.pushed == [] and node_base(world, "a") is None


def test_a_registry_copy_missing_a_layer_is_refused(setup, capsys):
    world, registry, host, argv = setup
    registry.put_base(TAG)
    registry.lost.add(sha256_digest(LAYER_BLOBS[0]))
    code, _, err = base_sync(capsys, argv)
    assert code == RegistryError.exit_code and "does not read back as pushed" in err
    assert f"layer {sha256_digest(LAYER_BLOBS[0])} is missing" in err and host.pushed == []
    assert node_base(world, "a") is None


def test_the_base_labels_are_what_the_registry_copy_must_carry():
    expected = basesync.expected_base(LOCK)
    assert expected.config_digest == LOCK.base.config_digest and expected.diff_ids == LOCK.base.diff_ids
    assert dict(expected.labels) == LOCK.base.config["config"]["Labels"] and expected.labels


def test_a_base_neither_in_the_registry_nor_on_this_host_is_refused_by_name(setup, capsys):
    world, registry, host, argv = setup
    host.images.clear()
    host.tags.clear()
    code, _, err = base_sync(capsys, argv)
    assert code == BaseImageError.exit_code
    assert f"the locked base is not in the registry ({REPOSITORY}:{TAG})" in err and f"{MANIFEST.base.image} is not present on host" in err
    assert says(err, "fix: pull or load the locked base on this host") and says(err, "then run base sync again")
    assert host.pushed == [] and node_base(world, "a") is None


def test_a_node_tag_naming_another_image_moves_only_with_force(setup, capsys):
    world, registry, host, argv = setup
    engine = world.engines["b"]
    engine.images["sha256:" + "5" * 64] = {"Id": "sha256:" + "5" * 64, "RootFS": {"Layers": []}}
    engine.tags[MANIFEST.base.node_name] = "sha256:" + "5" * 64
    code, _, err = base_sync(capsys, argv)
    assert code == BaseImageError.exit_code and "node b:" in err and host.pushed == []
    code, data, err = base_sync(capsys, argv, "--force")
    assert code == 0, err
    assert data["nodes"][1] == {"node": "b", "action": "move", "held_before": "sha256:" + "5" * 64}
    assert node_base(world, "b") == CONFIG_DIGEST
    assert cli.main(["base", "sync", *argv]) == 0
    assert "b: already held it" in capsys.readouterr().out
    engine.tags[MANIFEST.base.node_name] = "sha256:" + "5" * 64
    assert cli.main(["base", "sync", *argv, "--force"]) == 0
    assert "b: moved its tag to it (--force)" in capsys.readouterr().out
