"""Setting the adopted serve aside: found by its spec under the launcher's name, done once (a second call, or Docker's
slash-prefixed kept name, changes nothing), and a lock holder that is alive on this machine left untouched."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvbake.ship.adapters import adopted_serve
from kvbake.ship.adapters.adoption import adopt
from kvbake.ship.adapters.node_locks import holder_gone, machine_id
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


@pytest.mark.parametrize("shown_as", ["plain", "docker's leading slash"])
def test_setting_aside_a_serve_already_set_aside_changes_nothing(world, shown_as):
    start_serves(world)
    adopted = adopt(world.fleet, "seed serve", False)["a"]
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
        claim = LockClaim("t", f"ops@h1:{sleeper.pid}", machine_id(), "deploy-1", 0.0)
        assert claim.pid == sleeper.pid != os.getpid()
        assert holder_gone(claim) is False
        with pytest.raises(subprocess.TimeoutExpired):  # the holder still runs a second later
            sleeper.wait(timeout=1)
    finally:
        sleeper.kill()
        sleeper.wait()
