"""The release record adopt writes for a serve kvbake did not deploy: the image reference the container was created
from (its image ID when none is named), the image's identity on either store and its runtime config, who adopted it
and when (UTC, whatever the local zone), the serve's command line, its --max-model-len (0 when absent or not a number)
and its restart policy."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from kvbake.ship.adapters.adoption import adopt
from kvbake.ship.adapters.rollout import who_deploys
from kvbake.ship.core.release import runtime_config

from fake_fleet import CONTAINER, SWITCH, World, make_world, start_serves
from test_release_mutants import far_east_local_time  # noqa: F401  (a fixture)


def world_on(store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    w = make_world(tmp_path, monkeypatch, store)
    start_serves(w)
    for engine in w.engines.values():
        image = engine.images[engine.containers[CONTAINER]["Image"]]
        image["Config"].update(WorkingDir="/srv", Cmd=["vllm", "serve"])
    return w


@pytest.mark.parametrize("store", ["classic", "containerd"])
def test_the_record_names_the_reference_the_identity_the_runtime_config_and_who_adopted_it_when(
        store, tmp_path, monkeypatch, far_east_local_time):
    world = world_on(store, tmp_path, monkeypatch)
    for engine in world.engines.values():
        engine.containers[CONTAINER]["Config"]["Image"] = "base:1"
    asked = datetime.now(timezone.utc).replace(microsecond=0)
    adopted = adopt(world.fleet, "their serve", False)
    for node, release in adopted.items():
        engine = world.engines[node]
        image_id = engine.containers[CONTAINER]["Image"]
        image = engine.images[image_id]
        assert (release.image, release.config_digest) == ("base:1", engine.config_digest_of(image, image_id))
        assert release.image_config == runtime_config(image["Config"]) and release.image_config["WorkingDir"] == "/srv"
        assert release.deployed_by == who_deploys()
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", release.deployed_at)
        stamped = datetime.strptime(release.deployed_at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
        assert asked <= stamped <= asked + timedelta(seconds=30)
        assert (release.max_model_len, release.adopted["restart"], release.switches) == (4096, "unless-stopped", {SWITCH: "3"})
        assert release.adopted["serve_argv"] == list(engine.containers[CONTAINER]["Processes"][0].argv)
        assert "serve" in release.adopted["serve_argv"]


def test_a_container_that_names_no_image_reference_is_recorded_by_its_image_id(tmp_path, monkeypatch):
    world = world_on("classic", tmp_path, monkeypatch)
    adopted = adopt(world.fleet, "their serve", False)
    assert {node: r.image for node, r in adopted.items()} == {n: e.containers[CONTAINER]["Image"] for n, e in world.engines.items()}


@pytest.mark.parametrize("args, length", [(("--max-model-len", "32k"), 0), (("--served-model-name", "m"), 0)])
def test_a_length_that_is_absent_or_not_a_number_is_recorded_as_0(tmp_path, monkeypatch, args, length):
    world = make_world(tmp_path, monkeypatch)
    for engine in world.engines.values():
        engine.run_serving(CONTAINER, "base:1", [f"{SWITCH}=3"], args)
    assert {r.max_model_len for r in adopt(world.fleet, "their serve", False).values()} == {length}


def test_a_serve_without_a_restart_policy_is_recorded_as_restarting_no(tmp_path, monkeypatch):
    world = make_world(tmp_path, monkeypatch)
    for engine in world.engines.values():
        engine.run_serving(CONTAINER, "base:1", [f"{SWITCH}=3"])
    assert {r.adopted["restart"] for r in adopt(world.fleet, "their serve", False).values()} == {"no"}
