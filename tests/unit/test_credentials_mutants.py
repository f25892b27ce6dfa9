"""A login store key is reduced to its host at the first scheme separator and the first slash after it."""

from __future__ import annotations

import base64

from kvbake.registry.adapters.credentials import RegistryAuth, lookup

REGISTRY = "127.0.0.1:5000"


def test_a_key_whose_path_holds_another_url_still_names_its_own_host() -> None:
    key = f"https://{REGISTRY}/v1/?next=https://elsewhere.example/"
    config = {"auths": {key: {"auth": base64.b64encode(b"pusher:pw").decode()}}}
    assert lookup(config, REGISTRY) == RegistryAuth("pusher", "pw")
    assert lookup(config, "elsewhere.example") is None
