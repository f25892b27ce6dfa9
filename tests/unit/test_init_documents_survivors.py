"""The launcher's Ray variables: a Ray serve gets RAY_START_ARGS only when its Ray nodes were started with options of
their own, and a serve that is no Ray cluster never gets them."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from kvbake.ship.core.init_documents import launcher_env
from test_init_documents import ROOT, SOLO


@pytest.mark.parametrize(("shape", "ray_start", "given"), [
    ("ray", (), None),
    ("ray", ("--num-cpus=8", "--node-ip-address={node_address}"), ["--num-cpus=8", "--node-ip-address={node_address}"]),
    ("exec", (), None),
    ("main", (), None),
])
def test_ray_start_options_reach_the_launcher_only_when_a_ray_cluster_was_started_with_some(shape, ray_start, given):
    env = launcher_env(replace(SOLO, shape=shape, ray_port="6380", ray_start=ray_start), ROOT)
    assert (json.loads(env["RAY_START_ARGS"]) if "RAY_START_ARGS" in env else None) == given
    assert env.get("RAY_PORT") == ("6380" if shape == "ray" else None)
