"""`base sync`: the base's own repository is read, names a node's base on the containerd store, and a failed pull names its node."""

from __future__ import annotations

import functools
from pathlib import Path

import httpx

from kvbake.engines.core.detection import EngineProfile
from kvbake.errors import BaseImageError
from kvbake.ship.adapters import basesync
from kvbake.registry.adapters.registry_api import RegistryClient
from message_words import says
from test_basesync_registry import CONFIG_DIGEST, NAME, PINNED, REPOSITORY, TAG, base_sync, logged_in, setup  # noqa: F401  (fixture: stand-in project, nodes, host, registry)


def only_the_base_repository(handle):
    """The registry answering for the base's repository only: a request naming another repository finds nothing."""
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path != "/v2/" and not request.url.path.startswith(f"/v2/{NAME}/"):
            return httpx.Response(404, json={"errors": [{"code": "NAME_UNKNOWN", "message": "repository name not known"}]})
        return handle(request)
    return handler


def test_a_base_its_own_repository_holds_is_read_back_there_and_not_pushed(setup, monkeypatch, capsys):
    world, registry, host, argv = setup
    monkeypatch.setattr(basesync, "RegistryClient", functools.partial(
        RegistryClient, certs_root=Path("/nonexistent"), transport=httpx.MockTransport(only_the_base_repository(logged_in(registry)))))
    registry.put_base(TAG)
    host.images.clear()
    host.tags.clear()
    code, data, err = base_sync(capsys, argv)
    assert code == 0, err
    assert host.pushed == [] and data["pinned"] == PINNED


def on_the_containerd_store(world) -> None:
    for engine in world.engines.values():
        engine._profile = EngineProfile("26.1.5", "containerd", "overlay2")


def test_on_the_containerd_store_a_node_is_identified_by_the_bases_repository_when_pulled_and_when_held(setup, capsys):
    world, registry, host, argv = setup
    on_the_containerd_store(world)
    assert base_sync(capsys, argv)[0] == 0
    assert base_sync(capsys, argv)[0] == 0
    by_digest = f"{REPOSITORY}@{PINNED.partition('@')[2]}"
    for node in ("a", "b"):
        engine = world.engines[node]
        assert engine.pulled == [PINNED]  # the second sync finds the base held and pulls nothing
        assert engine.identified == [by_digest, by_digest]  # after the pull, then as the held base


def test_a_node_whose_pull_brings_no_layers_is_named_in_the_refusal(setup, capsys):
    world, registry, host, argv = setup
    world.engines["b"].registry[PINNED] = {"Id": CONFIG_DIGEST, "RootFS": {"Layers": []}, "Config": {"Labels": {}}}
    code, _, err = base_sync(capsys, argv)
    assert code == BaseImageError.exit_code
    assert says(err, f"node b: {PINNED} pulled as config {CONFIG_DIGEST[:19]} with 0 layers")
