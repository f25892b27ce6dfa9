"""A --rm adopted serve is recreatable only with a recorded create spec, and a running one is then recreated from it."""

from __future__ import annotations

import pytest

from fake_engine import FakeEngine
from kvbake.ship.adapters import adopted_serve
from kvbake.ship.core.create_spec import create_spec
from kvbake.ship.core.release import Release

NAME = "serve"
KEPT = "serve-kvbake-adopted"
SPEC = {"image": "sha256:base", "name": NAME, "config": {"Cmd": ["vllm", "serve"]}, "host": {"AutoRemove": True}}


@pytest.mark.parametrize("host", [{"AutoRemove": True}, {"AutoRemove": True, "RestartPolicy": {"Name": "no"}}])
def test_a_rm_serve_with_a_recorded_spec_is_recreatable(host):
    assert adopted_serve.recreatable({"HostConfig": host}, {"spec": SPEC, "container_id": "x"}) is True


@pytest.mark.parametrize("info", [{}, {"spec": None}, {"spec": {}}])
def test_a_rm_serve_without_a_recorded_spec_is_not_recreatable(info):
    assert adopted_serve.recreatable({"HostConfig": {"AutoRemove": True}}, info) is False


def test_a_serve_that_is_not_rm_is_recreatable_with_or_without_a_spec():
    assert adopted_serve.recreatable({"HostConfig": {}}, {}) is True
    assert adopted_serve.recreatable({}, {"spec": SPEC}) is True


def running_rm_serve() -> tuple[FakeEngine, Release]:
    """A node whose --rm adopted serve still runs under its own name (its node was never set aside), its spec recorded."""
    engine = FakeEngine("a")
    engine.tags["base:1"] = "sha256:base"
    engine.run_serving(NAME, "base:1", ["S=3"], host={"AutoRemove": True})
    container = engine.containers[NAME]
    adopted = Release(image="base:1", config_digest="sha256:c", layers=(), labels={}, preset="adopted", switches={"S": "3"},
                      max_model_len=4096, launcher_args=(), deployed_by="t", deployed_at="now", reason="adopt", override=None,
                      adopted={"container_id": container["Id"], "kept_as": KEPT, "name": NAME, "spec": create_spec(container)})
    return engine, adopted


def test_a_running_rm_serve_with_a_recorded_spec_restarts_with_its_gang_recreated_from_the_spec():
    engine, adopted = running_rm_serve()
    first_id = engine.containers[NAME]["Id"]
    adopted_serve.bring_back(engine, "a", adopted, NAME, NAME)
    now = engine.containers[NAME]
    assert now["Id"] != first_id, "stopped (and so gone) then recreated"
    assert now["State"]["Running"] is True and now["HostConfig"] == {"AutoRemove": True}
    assert now["Config"]["Cmd"] == adopted.adopted["spec"]["config"]["Cmd"]
