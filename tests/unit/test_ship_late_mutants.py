"""Late ship survivors: a push's registry host, the adopted serve released or given its policy back, status's marks, base sync's plan."""

from __future__ import annotations

import pytest

from fake_engine import FakeEngine
from fake_fleet import CONTROL, PACKING, World, deploy, interrupted_deploy, make_world
from kvbake.errors import BaseImageError, RegistryError
from kvbake.ship.adapters import adopted_serve
from kvbake.ship.adapters.basesync import plan_nodes, pull_onto
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.adapters.pusher import target_for
from kvbake.ship.adapters.status import status
from kvbake.ship.core.create_spec import create_spec
from kvbake.ship.core.journal import read_journal
from kvbake.ship.core.release import Release
from message_words import says
from test_basesync_registry import LOCK, NAME, REPOSITORY

LAUNCHER = "vllm_node"


def node_with(state: dict | None, host_config: dict | None = None) -> FakeEngine:
    engine = FakeEngine("a")
    if state is not None:
        engine.containers[LAUNCHER] = {"Id": "a-1", "Name": LAUNCHER, "Config": {"Env": []}, "State": state,
                                       "HostConfig": dict(host_config or {})}
    return engine


def adopted_release(engine: FakeEngine) -> Release:
    """An adopted serve recorded without a name of its own (the launcher's) and known only by its create spec."""
    spec = create_spec(engine.containers[LAUNCHER]) if LAUNCHER in engine.containers else {"Image": "x"}
    return Release(image="base:1", config_digest="sha256:c", layers=(), labels={}, preset="p", switches={},
                   max_model_len=1024, launcher_args=(), deployed_by="t", deployed_at="now", reason="adopt",
                   override=None, adopted={"kept_as": "kept_serve", "spec": spec})


def test_a_registry_given_as_an_https_url_with_a_trailing_slash_is_its_host_and_port():
    assert target_for("127.0.0.1:5000/tiny:t", "https://boX:5000/").registry == "boX:5000"


def test_a_registry_given_as_an_http_url_is_its_host_and_port():
    assert target_for("127.0.0.1:5000/tiny:t", "http://regX").registry == "regX"


def test_a_registry_with_a_path_after_the_url_scheme_is_still_refused():
    with pytest.raises(RegistryError):
        target_for("127.0.0.1:5000/tiny:t", "https://host:5000/extra/")


def test_a_stopped_adopted_serve_under_the_launchers_name_is_released_and_removed():
    engine = node_with({"Running": False})
    assert adopted_serve.release_kept(engine, adopted_release(engine), LAUNCHER) is True
    assert LAUNCHER not in engine.containers


def test_a_running_adopted_serve_is_not_released():
    engine = node_with({"Running": True})
    assert adopted_serve.release_kept(engine, adopted_release(engine), LAUNCHER) is False
    assert LAUNCHER in engine.containers


def test_no_adopted_serve_on_the_node_releases_nothing():
    engine = node_with(None)
    assert adopted_serve.release_kept(engine, adopted_release(engine), LAUNCHER) is False


def test_a_rm_container_gets_no_restart_policy_back():
    engine = node_with({"Running": False}, {"AutoRemove": True})
    adopted_serve.restore_restart_policy(engine, engine.containers[LAUNCHER], {"restart": "always"})
    assert "RestartPolicy" not in engine.containers[LAUNCHER]["HostConfig"]


def test_a_kept_container_without_a_recorded_policy_gets_no():
    engine = node_with({"Running": False})
    adopted_serve.restore_restart_policy(engine, engine.containers[LAUNCHER], {})
    assert engine.containers[LAUNCHER]["HostConfig"]["RestartPolicy"]["Name"] == "no"


@pytest.fixture()
def world(tmp_path, monkeypatch) -> World:
    return make_world(tmp_path, monkeypatch)


def note_on(world: World, node: str, **fields: object) -> None:
    NodeState(node, world.engines[node]).update("base:1", "test: note", **fields)


def test_a_mark_only_the_first_node_keeps_makes_the_deployment_marked_diverged(world):
    deploy(world, CONTROL)
    mark = {"by": "ops@h1", "repair": "python build.py deploy --revert"}
    note_on(world, "a", diverged=mark)
    assert status(world.fleet)["marked_diverged"] == mark


def test_a_transition_only_the_first_node_keeps_is_the_pending_journal(world):
    deploy(world, CONTROL)
    note_on(world, "a", transition={"id": "t-a"})
    assert status(world.fleet)["pending_journal"] == "t-a"


def test_of_transitions_every_node_keeps_the_first_nodes_is_the_pending_journal(world):
    deploy(world, CONTROL)
    note_on(world, "a", transition={"id": "t-a"})
    note_on(world, "b", transition={"id": "t-b"})
    assert status(world.fleet)["pending_journal"] == "t-a"


def test_the_journal_this_host_keeps_comes_before_the_nodes_transitions(world):
    deploy(world, CONTROL)
    interrupted_deploy(world, PACKING)
    note_on(world, "a", transition={"id": "t-a"})
    note_on(world, "b", transition={"id": "t-b"})
    journal = read_journal(world.fleet.deployment.state_dir)
    assert journal is not None
    assert status(world.fleet)["pending_journal"] == journal.id


OTHER_CONFIG = "sha256:" + "0123456789abcdef" * 4


def node_holding(label: str, config_digest: str) -> FakeEngine:
    """A classic-store node whose base tag names the image of `config_digest` (its Id there)."""
    engine = FakeEngine(label)
    engine.images[config_digest] = {"Id": config_digest, "RootFS": {"Layers": []}}
    engine.tags[NAME] = config_digest
    return engine


def test_a_node_holding_the_locked_base_keeps_it_and_its_plan_names_what_it_holds():
    engine = node_holding("a", LOCK.base.config_digest)
    (plan,) = plan_nodes({"a": engine}, NAME, LOCK, False, REPOSITORY)
    assert (plan.action, plan.held) == ("present", LOCK.base.config_digest)


def test_tags_naming_another_image_are_refused_per_node_with_short_digests_and_the_force_fix():
    engines = {node: node_holding(node, OTHER_CONFIG) for node in ("a", "b")}
    with pytest.raises(BaseImageError) as failure:
        plan_nodes(engines, NAME, LOCK, False, REPOSITORY)
    message = failure.value.message
    assert says(message, f"(config {OTHER_CONFIG[:19]})")
    assert says(message, f"not the locked base ({LOCK.base.config_digest[:19]}); node b")
    assert says(failure.value.fix, "pass --force to move the tag")


PINNED_ELSEWHERE = f"{REPOSITORY}@sha256:" + "f" * 64


def pulled(image: dict) -> tuple[FakeEngine, BaseImageError | None]:
    """Node a pulls the pinned base, which the registry holds as `image`; the refusal, if any."""
    engine = FakeEngine("a")
    engine.registry[PINNED_ELSEWHERE] = image
    try:
        pull_onto(engine, "a", PINNED_ELSEWHERE, NAME, LOCK)
    except BaseImageError as error:
        return engine, error
    return engine, None


def test_a_pulled_base_with_the_locked_config_and_layers_gets_the_base_name():
    engine, refusal = pulled({"Id": LOCK.base.config_digest, "RootFS": {"Layers": list(LOCK.base.diff_ids)}})
    assert refusal is None and engine.tags[NAME] == LOCK.base.config_digest


def test_a_pulled_base_with_the_locked_config_but_no_layers_is_refused_naming_node_reference_config_and_count():
    engine, refusal = pulled({"Id": LOCK.base.config_digest, "RootFS": {}})
    assert refusal is not None and NAME not in engine.tags
    assert says(refusal.message, f"node a: {PINNED_ELSEWHERE} pulled as config {LOCK.base.config_digest[:19]} with 0 layers")
    assert says(refusal.fix, "check the registry")


def test_a_pulled_image_without_a_root_filesystem_is_refused_as_not_the_locked_base():
    _, refusal = pulled({"Id": LOCK.base.config_digest})
    assert refusal is not None and says(refusal.message, "0 layers, not the locked base")
