"""hand-back on fake nodes: after rollback --to adopted, every node gets its serve's own restart policy back and loses
kvbake's tags, kept copies and state (its audit log copied to this host first); the serve is never touched; a second run
changes nothing; adopt works again; a node that serves a kvbake release, or whose adopted serve is down, is refused
with nothing changed; a kill between any two writes is finished by running it again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbake.errors import RolloutError
from kvbake.ship.adapters import hand_back as hand_back_module
from kvbake.ship.adapters.adoption import adopt, rollback_to_adopted
from kvbake.ship.adapters.hand_back import HOME_DIR, hand_back
from kvbake.ship.adapters.nodestate import STATE_NAME, NodeState
from kvbake.ship.core.fencing import generation_of

from fake_fleet import CONTAINER, CONTROL, PACKING, REPO, World, deploy, make_world, start_serves
from message_words import says

KEPT = f"{CONTAINER}-kvbake-adopted"


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


def node_state(world: World) -> dict:
    """Every node: its containers (running, restart policy) but the fence, the release tags, kvbake's records."""
    state = {}
    for node, engine in world.engines.items():
        containers = {name: (c["State"]["Running"], ((c.get("HostConfig") or {}).get("RestartPolicy") or {}).get("Name"))
                      for name, c in engine.containers.items() if generation_of(name) is None}
        tags = {kind: engine.image_id_of(f"{REPO}:{kind}") for kind in ("current", "previous", "staged")}
        records = NodeState(node, engine).read()
        state[node] = {"containers": containers, "tags": tags, "records": (records.current, records.previous, records.adopted)}
    return state


def back_on_the_adopted(world: World, shape: str = "main", auto_remove: bool = False) -> dict:
    """The nodes served by hand, adopted, replaced by kvbake twice, and back on the adopted serve; what they ran first."""
    start_serves(world, shape, auto_remove)
    before = node_state(world)
    adopt(world.fleet, "the operator's serve", False)
    deploy(world, CONTROL)
    deploy(world, PACKING)
    rollback_to_adopted(world.fleet, False)
    return before


@pytest.mark.parametrize("shape", ["main", "exec"])
@pytest.mark.parametrize("auto_remove", [False, True], ids=["kept", "--rm"])
def test_the_nodes_go_back_exactly_as_they_were_before_adopt_and_the_audit_logs_stay_here(world, shape, auto_remove):
    before = back_on_the_adopted(world, shape, auto_remove)
    audits = {node: NodeState(node, engine).read().audit for node, engine in world.engines.items()}
    handed = hand_back(world.fleet, False)
    assert [h.node for h in handed] == ["a", "b"] and {h.serve for h in handed} == {CONTAINER}
    after = node_state(world)
    for node in world.engines:
        if auto_remove:  # recreated from its spec under its own name: no restart policy to give back
            assert after[node]["containers"] == {CONTAINER: (True, None)}
        else:
            assert after[node]["containers"] == before[node]["containers"], "its own restart policy, nothing of kvbake's"
        assert after[node]["tags"] == {"current": None, "previous": None, "staged": None}
        assert after[node]["records"] == (None, None, None) and STATE_NAME not in world.engines[node].containers
    saved = {h.node: h.audit for h in handed}
    root = world.fleet.deployment.path.parent
    assert saved == {node: root / HOME_DIR / f"{node}.audit.log" for node in world.engines}
    assert {node: path.read_text() for node, path in saved.items()} == audits
    assert all(says(audit, "rollback") for audit in audits.values())


def test_a_second_run_changes_nothing_and_adopt_works_again(world):
    back_on_the_adopted(world)
    hand_back(world.fleet, False)
    settled = node_state(world)
    fences = {node: sorted(n for n in engine.containers if generation_of(n) is not None) for node, engine in world.engines.items()}
    assert hand_back(world.fleet, False) == []
    assert node_state(world) == settled
    assert {node: sorted(n for n in e.containers if generation_of(n) is not None) for node, e in world.engines.items()} == fences, \
        "nothing to hand back: no lock taken, the fence not moved"
    releases = adopt(world.fleet, "the serve again", False)
    assert {r.adopted["name"] for r in releases.values()} == {CONTAINER}


def test_the_fence_stays_so_a_host_paused_before_hand_back_never_writes_again(world):
    back_on_the_adopted(world)
    newest = {node: max(generation_of(n) for n in engine.containers if generation_of(n) is not None) for node, engine in world.engines.items()}
    hand_back(world.fleet, False)
    adopt(world.fleet, "the serve again", False)
    for node, engine in world.engines.items():
        generations = [generation_of(n) for n in engine.containers if generation_of(n) is not None]
        assert generations and min(generations) > newest[node], "the fence goes on from where it was, never from 1 again"


def test_a_node_that_serves_a_kvbake_release_is_refused_with_nothing_changed(world):
    start_serves(world)
    adopt(world.fleet, "the operator's serve", False)
    deploy(world, CONTROL)
    before = node_state(world)
    with pytest.raises(RolloutError) as refused:
        hand_back(world.fleet, False)
    assert says(refused.value.message, "serve a kvbake release") and says(refused.value.fix, "rollback --to adopted first")
    assert node_state(world) == before and not (world.fleet.deployment.path.parent / HOME_DIR).exists()


def test_an_adopted_serve_that_is_down_is_refused_with_nothing_changed(world):
    back_on_the_adopted(world)
    world.engines["b"].containers[CONTAINER]["State"]["Running"] = False
    before = node_state(world)
    with pytest.raises(RolloutError) as refused:
        hand_back(world.fleet, False)
    assert says(refused.value.message, "the adopted serve does not run on b") and says(refused.value.fix, "rollback --to adopted")
    assert node_state(world) == before


def test_nodes_kvbake_never_touched_are_left_alone(world):
    start_serves(world)
    before = {node: dict(engine.containers) for node, engine in world.engines.items()}
    assert hand_back(world.fleet, False) == []
    assert {node: dict(engine.containers) for node, engine in world.engines.items()} == before, "no lock, no fence, nothing"


class Killed(Exception):
    pass


@pytest.mark.parametrize("after", range(1, 9))
def test_a_kill_after_any_write_is_finished_by_running_it_again(world, monkeypatch, after):
    """hand-back writes in an order a second run completes: stopped after its Nth node write, run again, the nodes end
    as one uninterrupted run leaves them."""
    back_on_the_adopted(world)
    writes = {"n": 0}
    real = hand_back_module.hand_back_node

    def counting(fleet, v, serve, folder):
        for name, engine in fleet.engines.items():
            for method in ("untag", "remove_container", "set_restart_policy"):
                original = getattr(engine, method)

                def wrapped(*args, _original=original, **kwargs):
                    writes["n"] += 1
                    if writes["n"] == after:
                        raise Killed()
                    return _original(*args, **kwargs)
                monkeypatch.setattr(engine, method, wrapped, raising=False)
        return real(fleet, v, serve, folder)

    monkeypatch.setattr(hand_back_module, "hand_back_node", counting)
    with pytest.raises(Killed):
        hand_back(world.fleet, False)
    monkeypatch.setattr(hand_back_module, "hand_back_node", real)
    for engine in world.engines.values():
        engine.containers.pop("kvbake-lock", None)  # the killed run's lock: stale, as a kill leaves it
    hand_back(world.fleet, True)
    assert all(state["records"] == (None, None, None) and state["tags"] == {"current": None, "previous": None, "staged": None}
               and state["containers"] == {CONTAINER: (True, "unless-stopped")} for state in node_state(world).values())


def test_the_command_says_per_node_what_runs_on_what_went_and_where_the_audit_log_is(world, monkeypatch, capsys):
    from kvbake.cli import main

    back_on_the_adopted(world)
    options = world.command_line(monkeypatch)
    assert main(["hand-back", *options]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"a: {CONTAINER} runs on, under its own restart policy; removed {REPO}:current, {REPO}:previous")
    assert lines[0].endswith(f"{STATE_NAME}; its audit log is in {HOME_DIR / 'a.audit.log'}")
    assert says(lines[-1], "your launcher's again") and says(lines[-1], "adopt works again")
    assert main(["hand-back", *options, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"nodes": {}}
    assert main(["hand-back", *options]) == 0
    assert says(capsys.readouterr().out, "nothing of kvbake's is left on any node")
