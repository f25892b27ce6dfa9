"""Setting the adopted serve aside: found by its spec under the launcher's name or by its ID under any name, done once (a
second call, or Docker's slash-prefixed kept name, changes nothing), refused naming the node when its kept name is taken;
and a lock holder that is alive on this machine left untouched."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from kvbake.errors import RolloutError
from kvbake.ship.adapters import adopted_serve, transitions
from kvbake.ship.adapters.adoption import adopt
from kvbake.ship.adapters.node_locks import holder_gone, process_start, this_host
from kvbake.ship.core.lock_claims import LockClaim

from fake_fleet import CONTAINER, World, make_world, nameless_adopted_record, start_serves


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


def test_a_serve_recreated_from_a_nameless_record_under_the_launchers_name_is_set_aside(world):
    start_serves(world)
    engine = world.engines["a"]
    recorded = nameless_adopted_record(engine)
    adopted_serve.set_aside(engine, "a", recorded, CONTAINER)
    assert CONTAINER not in engine.containers and not engine.containers["kept_serve"]["State"]["Running"]


def test_a_nameless_record_is_set_aside_through_the_fleet_under_the_launchers_name(world):
    start_serves(world)
    engine = world.engines["a"]
    transitions.set_adopted_aside(world.fleet, "a", nameless_adopted_record(engine))
    assert CONTAINER not in engine.containers and not engine.containers["kept_serve"]["State"]["Running"]


def test_a_serve_renamed_by_hand_is_found_by_its_id_and_set_aside(world):
    ids = start_serves(world)
    adopted = adopt(world.fleet, "seed serve", False)["a"]
    engine = world.engines["a"]
    assert engine.rename_container(CONTAINER, "renamed-by-hand")
    adopted_serve.set_aside(engine, "a", adopted, CONTAINER)
    kept = engine.containers[adopted.kept_as]
    assert (kept["Id"], kept["State"]["Running"]) == (ids["a"], False) and "renamed-by-hand" not in engine.containers


def test_a_kept_name_another_container_holds_is_refused_naming_the_node_and_that_name(world):
    start_serves(world)
    adopted = adopt(world.fleet, "seed serve", False)["b"]
    engine = world.engines["b"]
    engine.run_serving(adopted.kept_as, "base:1", ["LANG=C"])
    squatter = dict(engine.containers[adopted.kept_as])
    with pytest.raises(RolloutError) as refused:
        transitions.set_adopted_aside(world.fleet, "b", adopted)
    assert "node b" in refused.value.message and adopted.kept_as in refused.value.message and adopted.kept_as in refused.value.fix
    assert engine.containers[adopted.kept_as] == squatter
    assert not engine.containers[CONTAINER]["State"]["Running"]  # stopped, under its own name still


@pytest.mark.parametrize("shown_as", ["plain", "docker's leading slash"])
@pytest.mark.parametrize("kept_as", ["recorded", "beginning with a letter the slash strip must keep"])
def test_setting_aside_a_serve_already_set_aside_changes_nothing(world, shown_as, kept_as):
    start_serves(world)
    adopted = adopt(world.fleet, "seed serve", False)["a"]
    if kept_as != "recorded":
        adopted = replace(adopted, adopted={**adopted.adopted, "kept_as": "Xserve-kept"})
    engine = world.engines["a"]
    adopted_serve.set_aside(engine, "a", adopted, CONTAINER)
    kept = engine.containers[adopted.kept_as]
    if shown_as != "plain":
        kept["Name"] = "/" + adopted.kept_as
    before = {name: dict(c) for name, c in engine.containers.items()}
    adopted_serve.set_aside(engine, "a", adopted, CONTAINER)
    assert {name: dict(c) for name, c in engine.containers.items()} == before


def test_a_lock_holder_alive_on_this_machine_is_not_gone_and_is_sent_no_signal():
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        here = this_host()
        claim = LockClaim("t", f"ops@h1:{sleeper.pid}", here.machine, "deploy-1", 0.0, here.boot, here.host, process_start(sleeper.pid) or "",
                          here.pid_namespace)
        assert claim.pid == sleeper.pid != os.getpid()
        assert holder_gone(claim) is False
        with pytest.raises(subprocess.TimeoutExpired):  # the holder still runs a second later
            sleeper.wait(timeout=1)
    finally:
        sleeper.kill()
        sleeper.wait()
