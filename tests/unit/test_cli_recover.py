"""`deploy --resume/--revert` and `adopt --resume/--revert` on the command line, over fake nodes: the real recovery
finishes or undoes the interrupted transition from its journal, and every node's records, tags and serve, and the
journal, say so; only --revert works on a deployment marked diverged (it is the repair). A bad recovery input is one
line, its documented exit code, and changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kvbake.ship.adapters.transitions as transitions
from kvbake import cli
from kvbake.errors import DivergedError, RolloutError, UsageError
from kvbake.lock import read_lock
from kvbake.manifest import load_manifest
from kvbake.serve.core.presets import choose_preset
from kvbake.ship.adapters.node_locks import LOCK_NAME
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.core.push_record import pushed_image
from kvbake.ship.core.release import Release, make_release

from fake_fleet import (CONTAINER, CONTROL, PACKING, REPO, STANDIN, SWITCH, World, deploy, diverged_deploy, interrupted_deploy,
                        killed_adopt, make_world, start_serves)

IMAGE = "127.0.0.1:5000/kvbake/standin-kvpack@sha256:" + "ab" * 32


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


@pytest.fixture()
def options(world: World, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """--manifest and --deploy of this host, whose fleet is the world's nodes."""
    return world.command_line(monkeypatch)


def run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, dict | None, str]:
    """Exit code, the --json answer (None on failure) and stderr of one command."""
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, json.loads(out) if code == 0 else None, err


def refused(err: str) -> str:
    """The cause of the one error line a refusal prints."""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error (") and "; fix: " in lines[0], err
    return lines[0].split("): ", 1)[1]


def serves(world: World) -> dict[str, tuple]:
    """What each node serves: the image its serving container runs, whether it runs, and the switch its serve sees."""
    found = {}
    for name, engine in world.engines.items():
        container = engine.containers.get(CONTAINER)
        found[name] = None if container is None else (container["Image"], container["State"]["Running"],
                                                       tuple(p.env.get(SWITCH) for p in container.get("Processes", ())))
    return found


def settled(world: World) -> bool:
    """No journal here or on any node, and no lock left."""
    state = world.snapshot()
    return state["journal"] is None and all(n["transition"] is None and not n["lock"] for n in state["nodes"].values())


def node_state(world: World) -> dict:
    """Each node's tags, records, journal, diverged mark and serve, less its lock (a recovery takes and gives it back)."""
    return {name: {key: value for key, value in node.items() if key != "lock"} for name, node in world.snapshot()["nodes"].items()}


# -- deploy --resume and deploy --revert --------------------------------------------------------------------------

def test_deploy_resume_finishes_the_interrupted_deploy_on_every_node(world, options, capsys):
    deploy(world, CONTROL)
    interrupted_deploy(world, PACKING)
    journal = world.snapshot()["journal"]
    world.advance(world.fleet.deployment.lock_stale_after_s)
    code, answer, err = run(capsys, "deploy", "--resume", "--break-lock", "--json", *options)
    assert code == 0, err
    assert answer == {"journal": journal.id, "action": "resumed"}
    for name, node in world.snapshot()["nodes"].items():
        assert node["records"] == (PACKING.id, CONTROL.id) and node["current"] == world.fleet.expected_id(name, PACKING)[0]
    assert serves(world) == {name: (world.fleet.expected_id(name, PACKING)[0], True, ("3",)) for name in world.engines}
    assert settled(world)


def test_deploy_revert_walks_every_node_back_to_before_the_deploy(world, options, capsys):
    deploy(world, CONTROL)
    before, serving = world.snapshot(), serves(world)
    interrupted_deploy(world, PACKING)
    journal = world.snapshot()["journal"]
    world.advance(world.fleet.deployment.lock_stale_after_s)
    code, answer, err = run(capsys, "deploy", "--revert", "--break-lock", "--json", *options)
    assert code == 0, err
    assert answer == {"journal": journal.id, "action": "reverted"}
    assert world.snapshot() == before and serves(world) == serving


def test_any_host_finishes_the_deploy_the_nodes_keep(world, monkeypatch, tmp_path, capsys):
    """Another operator host has no journal of its own: it resumes from the copy every node keeps."""
    deploy(world, CONTROL)
    interrupted_deploy(world, PACKING)
    world.advance(world.fleet.deployment.lock_stale_after_s)
    other = world.command_line(monkeypatch, tmp_path / "host2")
    code, answer, err = run(capsys, "deploy", "--resume", "--break-lock", "--json", *other)
    assert code == 0 and answer["action"] == "resumed", err
    assert {node["records"] for node in world.snapshot()["nodes"].values()} == {(PACKING.id, CONTROL.id)}
    assert all(node["transition"] is None for node in world.snapshot()["nodes"].values())


def standin_release(preset: str) -> tuple[Release, str, tuple[str, ...]]:
    """The stand-in's release of `preset` pushed as IMAGE, and the base it needs on every node (its name and layers)."""
    manifest = load_manifest(STANDIN)
    lock = read_lock(manifest)
    release = make_release(pushed_image(manifest, lock, IMAGE), choose_preset(manifest, preset), manifest, "", "ops@host")
    return release, manifest.base.node_name, lock.base.diff_ids


def test_deploy_resume_with_the_preset_finishes_only_the_release_the_journal_names(world, options, capsys):
    release, base, layers = standin_release("control")
    world.hold_base(base, layers)
    world.offer(release)
    interrupted_deploy(world, release, base, layers)
    world.advance(world.fleet.deployment.lock_stale_after_s)
    before = node_state(world)
    code, _, err = run(capsys, "deploy", "--resume", "--preset", "packing-327680", "--image", IMAGE, "--break-lock", *options)
    assert code == RolloutError.exit_code and "not " + standin_release("packing-327680")[0].id in refused(err)
    assert node_state(world) == before and world.snapshot()["journal"] is not None
    code, answer, err = run(capsys, "deploy", "--resume", "--preset", "control", "--image", IMAGE, "--break-lock", "--json", *options)
    assert code == 0 and answer["action"] == "resumed", err
    assert {node["records"] for node in world.snapshot()["nodes"].values()} == {(release.id, None)} and settled(world)


def test_a_deploy_that_never_began_is_dropped_by_revert_and_never_resumed(world, options, capsys):
    """Killed after this host's journal, before any node kept it: nothing ran, so a revert drops it and a resume refuses."""
    deploy(world, CONTROL)
    before = world.snapshot()
    killed_before_any_node(world)
    code, _, err = run(capsys, "deploy", "--resume", "--break-lock", *options)
    assert code == RolloutError.exit_code and "never began" in refused(err)
    assert world.snapshot() == before, "the stale journal is removed, nothing else changes"
    killed_before_any_node(world)
    code, answer, err = run(capsys, "deploy", "--revert", "--break-lock", "--json", *options)
    assert code == 0 and answer["action"] == "dropped", err
    assert world.snapshot() == before


def killed_before_any_node(world: World) -> None:
    """A deploy of PACKING killed right after this host wrote its journal, before any node took it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transitions, "publish", lambda *args: (_ for _ in ()).throw(KeyboardInterrupt))
        with pytest.raises(KeyboardInterrupt):
            deploy(world, PACKING)


# -- adopt --resume and adopt --revert ------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["resume", "revert"])
def test_adopt_resume_and_revert_finish_or_undo_the_interrupted_adopt(world, options, capsys, mode):
    ids = start_serves(world)
    before, serving = world.snapshot(), serves(world)
    killed_adopt(world, 2)  # this host's journal and a's records were written
    journal = world.snapshot()["journal"]
    world.advance(world.fleet.deployment.lock_stale_after_s)
    code, answer, err = run(capsys, "adopt", f"--{mode}", "--break-lock", "--json", *options)
    assert code == 0, err
    assert answer == {"journal": journal.id, "action": "resumed" if mode == "resume" else "reverted"}
    assert serves(world) == serving and {n: e.containers[CONTAINER]["Id"] for n, e in world.engines.items()} == ids
    assert settled(world)
    if mode == "revert":
        assert world.snapshot() == before
        return
    for name, engine in world.engines.items():
        records = NodeState(name, engine).read()
        assert records.current.preset == "adopted" and records.current.adopted["container_id"] == ids[name]


def test_deploy_recovery_of_an_interrupted_adopt_is_refused_and_changes_nothing(world, options, capsys):
    start_serves(world)
    killed_adopt(world, 2)
    world.advance(world.fleet.deployment.lock_stale_after_s)
    before = node_state(world)
    for mode in ("--resume", "--revert"):
        code, _, err = run(capsys, "deploy", mode, "--break-lock", *options)
        assert code == RolloutError.exit_code and refused(err).startswith("the interrupted transition is adopt adopt-")
        assert node_state(world) == before and world.snapshot()["journal"] is not None


# -- bad inputs -----------------------------------------------------------------------------------------------------

def test_adopt_resume_with_no_interrupted_adopt_is_refused_and_changes_nothing(world, options, capsys):
    start_serves(world)
    before = world.snapshot()
    code, _, err = run(capsys, "adopt", "--resume", *options)
    assert code == RolloutError.exit_code == 12
    assert refused(err).startswith("there is no interrupted adopt to resume or revert")
    assert world.snapshot() == before


def test_deploy_image_by_tag_is_refused_before_anything_is_read_or_pulled(world, options, capsys):
    deploy(world, CONTROL)
    before = world.snapshot()
    images = {name: dict(engine.images) for name, engine in world.engines.items()}
    code, _, err = run(capsys, "deploy", "--preset", "control", "--image", f"{REPO}:current", *options)
    assert code == UsageError.exit_code == 2
    assert refused(err).startswith(f"--image '{REPO}:current' is not a digest reference")
    assert world.snapshot() == before and {name: dict(engine.images) for name, engine in world.engines.items()} == images


@pytest.mark.parametrize("mode", ["--resume", "--revert"])
def test_break_lock_on_a_lock_renewed_within_its_threshold_is_refused_and_changes_nothing(world, options, capsys, mode):
    """The deploy that holds the locks still renews them (here: no time has passed): --break-lock does not break them."""
    deploy(world, CONTROL)
    interrupted_deploy(world, PACKING)
    before = world.snapshot()
    tokens = {name: engine.containers[LOCK_NAME]["Config"]["Labels"]["kvbake.lock.token"] for name, engine in world.engines.items()}
    code, _, err = run(capsys, "deploy", mode, "--break-lock", *options)
    assert code == RolloutError.exit_code == 12 and refused(err).startswith("node a is locked by")
    assert world.snapshot() == before
    assert {name: engine.containers[LOCK_NAME]["Config"]["Labels"]["kvbake.lock.token"] for name, engine in world.engines.items()} == tokens


def test_resume_on_a_diverged_fleet_is_refused_from_every_host_and_revert_repairs_it(world, monkeypatch, tmp_path, capsys, options):
    """This host marks the deployment diverged, and so does node a: a resume from here or from another host is refused
    (exit 13) and changes nothing; a revert, from here, repairs it."""
    deploy(world, CONTROL)
    diverged_deploy(world, PACKING)
    world.advance(world.fleet.deployment.lock_stale_after_s)  # b still holds this host's lock from the failed revert
    other = world.command_line(monkeypatch, tmp_path / "host2")
    before = node_state(world)
    code, _, err = run(capsys, "deploy", "--resume", "--break-lock", *options)
    assert code == DivergedError.exit_code == 13 and refused(err).startswith("the deployment is marked diverged")
    code, _, err = run(capsys, "deploy", "--resume", "--break-lock", *other)
    assert code == DivergedError.exit_code and refused(err).startswith("node a is marked diverged by")
    assert node_state(world) == before and world.snapshot()["diverged"] is not None
    world.command_line(monkeypatch)
    code, answer, err = run(capsys, "deploy", "--revert", "--break-lock", "--json", *options)
    assert code == 0 and answer["action"] == "reverted", err
    state = world.snapshot()
    assert state["diverged"] is None and settled(world)
    assert {name: (node["records"], node["diverged"]) for name, node in state["nodes"].items()} == {
        name: ((CONTROL.id, None), None) for name in world.engines}
