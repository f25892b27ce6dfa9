"""`base sync` over a registry that keeps repositories apart: the base's own repository is read."""

from __future__ import annotations

import functools
from pathlib import Path

import httpx

from kvbake.ship.adapters import basesync
from kvbake.ship.adapters.registry_api import RegistryClient
from test_basesync_registry import NAME, PINNED, TAG, base_sync, logged_in, setup  # noqa: F401  (fixture: stand-in project, nodes, host, registry)


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
