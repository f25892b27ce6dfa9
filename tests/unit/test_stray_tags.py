"""Tags that disagree with their node's settled records, on fake nodes: a late `tag(..., current)` of a host whose lock
was broken is named by status and verify-running, refuses deploy and rollback before anything changes, and
`deploy --reset-tags` puts it back under the locks (a second run changes nothing); a node mid-change is left alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbake import cli
from kvbake.errors import IntegrityError, LockLost, RolloutError
from kvbake.ship.adapters import rollout, tag_reset
from kvbake.ship.adapters.adoption import adopt, rollback_to_adopted
from kvbake.ship.adapters.node_locks import NodeLock
from kvbake.ship.adapters.nodestate import NodeState, node_audit
from kvbake.ship.adapters.status import status, status_table, verify_running
from kvbake.ship.adapters.tag_reset import reset_tags

from fake_fleet import CONTROL, OTHER, PACKING, REPO, World, deploy, interrupted_deploy, make_world, start_serves
from test_ship_records import PINNED, offered, project, run  # noqa: F401  (the stand-in project over two fake nodes)

RESET = "python build.py deploy --reset-tags"


@pytest.fixture(params=["classic", "containerd"])
def world(request, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch, request.param)


def late_current_tag(world: World, node: str = "a") -> str:
    """What a host paused inside its `tag(OTHER, current)` leaves once its call lands after the others settled: the
    node's `current` tag on OTHER's image. Returns that image's ID."""
    engine = world.engines[node]
    engine.pull(OTHER.image)
    stray = engine.image_id_of(OTHER.image)
    engine.tag(stray, f"{REPO}:current")
    return stray


def settled_packing(world: World) -> None:
    deploy(world, CONTROL)
    deploy(world, PACKING)


def test_a_settled_deploy_has_no_stray_tag(world):
    settled_packing(world)
    assert status(world.fleet)["stray_tags"] == []
    verify_running(world.fleet, None)
    assert reset_tags(world.fleet, False) == []


def test_status_and_verify_running_name_a_late_current_tag(world):
    settled_packing(world)
    stray = late_current_tag(world)
    data = status(world.fleet)
    rows = {row["node"]: row for row in data["nodes"]}
    line = f"node a: tag current points at {stray[:19]}, but its current record names {PACKING.config_digest[:19]}"
    assert rows["a"]["stray_tags"] == [line] and rows["b"]["stray_tags"] == [] and data["stray_tags"] == [line]
    assert f"STRAY TAG: {line}; reset it from the records: {RESET}" in status_table(data).splitlines()
    with pytest.raises(IntegrityError) as caught:
        verify_running(world.fleet, None)
    assert line in caught.value.message


@pytest.mark.parametrize("command", ["deploy", "rollback", "rollback --to adopted"])
def test_deploy_and_rollback_are_refused_before_any_change_naming_the_stray_tag_and_the_reset(world, command):
    if command.endswith("adopted"):
        start_serves(world)
        adopt(world.fleet, "seed serve", False)
    settled_packing(world)
    stray = late_current_tag(world)
    before = world.snapshot()
    transitions = {"deploy": lambda: deploy(world, OTHER), "rollback": lambda: rollback_of(world),
                   "rollback --to adopted": lambda: rollback_to_adopted(world.fleet, False)}
    with pytest.raises(RolloutError) as caught:
        transitions[command]()
    assert caught.value.exit_code == 12
    assert f"node a: tag current points at {stray[:19]}, but its current record names {PACKING.config_digest[:19]}" in caught.value.message
    assert RESET in caught.value.fix
    assert world.snapshot() == before


def rollback_of(world: World) -> None:
    rollout.rollback(world.fleet, False)


def test_the_reset_puts_the_tag_back_once_and_the_next_deploy_and_rollback_work(world):
    settled_packing(world)
    late_current_tag(world)
    packing_id = world.engines["b"].image_id_of(f"{REPO}:current")
    resets = reset_tags(world.fleet, False)
    assert [(r.stray.node, r.stray.kind, r.target) for r in resets] == [("a", "current", packing_id)]
    assert world.engines["a"].image_id_of(f"{REPO}:current") == packing_id
    assert "deploy --reset-tags: node a: tag current back at" in NodeState("a", world.engines["a"]).read().audit
    before = world.snapshot()
    assert reset_tags(world.fleet, False) == []
    assert world.snapshot() == before
    deploy(world, OTHER)
    rollback_of(world)
    assert {name: NodeState(name, e).read().current.id for name, e in world.engines.items()} == {"a": PACKING.id, "b": PACKING.id}


def test_a_previous_tag_no_record_names_is_named_and_removed(world):
    deploy(world, CONTROL)
    world.engines["b"].pull(PACKING.image)
    world.engines["b"].tag(world.engines["b"].image_id_of(PACKING.image), f"{REPO}:previous")
    assert status(world.fleet)["stray_tags"][0].endswith("but its records name no previous release")
    [reset] = reset_tags(world.fleet, False)
    assert (reset.stray.node, reset.stray.kind, reset.target) == ("b", "previous", None)
    assert world.engines["b"].image_id_of(f"{REPO}:previous") is None
    assert status(world.fleet)["stray_tags"] == []


def test_a_node_keeping_a_transition_is_not_judged_by_its_tags(world):
    """Mid-change the tags move by design: resume or revert settles them, not the reset."""
    deploy(world, CONTROL)
    interrupted_deploy(world)
    world.advance(10_000)
    late_current_tag(world)
    assert status(world.fleet)["stray_tags"] == []
    with pytest.raises(RolloutError, match="interrupted deploy"):
        reset_tags(world.fleet, True)


def test_the_reset_refuses_a_record_whose_image_the_node_lost_and_moves_nothing(world):
    settled_packing(world)
    late_current_tag(world, "b")
    for name, engine in world.engines.items():
        gone = engine.image_id_of(f"{REPO}:current") if name == "a" else engine.image_id_of(PACKING.image)
        engine.images.pop(gone)
        engine.tags = {ref: image for ref, image in engine.tags.items() if image != gone}
    before = world.snapshot()
    with pytest.raises(RolloutError, match="node b no longer holds the image its current record names") as caught:
        reset_tags(world.fleet, False)
    assert "--reseat b" in caught.value.fix
    assert world.snapshot() == before


def test_the_command_line_resets_the_tags_then_says_nothing_changed(project, capsys):
    offered(project, PINNED)
    assert run(capsys, "deploy", "--preset", "control", *project.argv)[0] == 0
    late_current_tag(project.world)
    code, _, err = run(capsys, "status", *project.argv)
    assert code == 0
    code, _, err = run(capsys, "deploy", "--preset", "control", *project.argv)
    assert code == 12 and "node a: tag current points at" in err and RESET in err
    code, answer, err = run(capsys, "deploy", "--reset-tags", *project.argv)
    assert code == 0, err
    assert [line.split(" back at")[0] for line in answer["reset"]] == ["node a: tag current"]
    assert cli.main(["deploy", "--reset-tags", *project.argv]) == 0
    assert "nothing changed" in capsys.readouterr().out
    assert run(capsys, "deploy", "--preset", "control", *project.argv)[0] == 0


def another_hosts_lock(world: World, node: str, break_lock: bool) -> NodeLock:
    lock = NodeLock(node, world.engines[node], world.fleet.deployment.lock_stale_after_s, node_audit(node))
    lock.acquire("base:1", "deploy-elsewhere", break_lock, lambda claim: "")
    return lock


def test_the_reset_waits_for_a_live_lock_and_moves_nothing(world):
    settled_packing(world)
    late_current_tag(world)
    another_hosts_lock(world, "b", False)
    before = world.snapshot()
    with pytest.raises(RolloutError, match="node b is locked by"):
        reset_tags(world.fleet, False)
    assert world.snapshot() == before


def test_a_reset_whose_lock_was_broken_meanwhile_writes_nothing(world, monkeypatch):
    """The reset's writes go through the node's fence: once another host broke its lock, no tag moves."""
    settled_packing(world)
    stray = late_current_tag(world)
    found = tag_reset.reset_target

    def then_another_host_breaks_the_lock(fleet, stray_tag, release):
        world.advance(world.fleet.deployment.lock_stale_after_s + 1)
        another_hosts_lock(world, stray_tag.node, True)
        return found(fleet, stray_tag, release)

    monkeypatch.setattr(tag_reset, "reset_target", then_another_host_breaks_the_lock)
    with pytest.raises(LockLost):
        reset_tags(world.fleet, False)
    assert world.engines["a"].image_id_of(f"{REPO}:current") == stray


@pytest.mark.parametrize("extra", [("--preset", "control"), ("--reseat", "a"), ("--dry-run",)])
def test_the_reset_takes_no_release_option(project, capsys, extra):
    offered(project, PINNED)
    assert run(capsys, "deploy", "--preset", "control", *project.argv)[0] == 0
    late_current_tag(project.world)
    before = project.world.snapshot()
    code, _, err = run(capsys, "deploy", "--reset-tags", *extra, *project.argv)
    assert code == 2 and "deploy --reset-tags takes no --preset, --image, --reseat or --dry-run" in err, err
    assert project.world.snapshot() == before


def test_under_an_adopted_record_the_tag_is_held_to_the_adopted_image_id(world):
    """After adopt and a deploy, `previous` names the adopted serve's image (compared by ID); a late tag there is named
    and put back on that very image."""
    start_serves(world)
    releases = adopt(world.fleet, "seed serve", False)
    for name, engine in world.engines.items():  # on the containerd store an image's ID is not its config digest
        engine.configs[str(releases[name].adopted["image_id"])] = "sha256:" + "c" * 64
    adopted = releases["b"]
    deploy(world, CONTROL)
    assert status(world.fleet)["stray_tags"] == []
    world.engines["b"].pull(OTHER.image)
    world.engines["b"].tag(world.engines["b"].image_id_of(OTHER.image), f"{REPO}:previous")
    [line] = status(world.fleet)["stray_tags"]
    assert line.endswith(f"but its previous record names {str(adopted.adopted['image_id'])[:19]}")
    [reset] = reset_tags(world.fleet, False)
    assert reset.target == adopted.adopted["image_id"] == world.engines["b"].image_id_of(f"{REPO}:previous")
    rollback_of(world)
    assert status(world.fleet)["stray_tags"] == []
