"""deploy, rollback, status, verify-running and adopt read the release from its records (the push record, the lock, the
nodes' release records); none of them builds the plan, so none reads overlay/ or assembles the thin layer. Each runs
for real over fake nodes: verify-running and status read every rank's serve against its node's records."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import pytest

from kvbake import cli
from kvbake.bake.core import plan as plan_module
from kvbake.bake.core.plan import make_plan, read_overlay, tag_for
from kvbake.lock import read_lock
from kvbake.manifest import load_manifest
from kvbake.serve.core.presets import choose_preset
from kvbake.errors import IntegrityError
from kvbake.ship import commands as ship_commands
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.core.push_record import PUSHES_DIR, pushed_image
from kvbake.ship.core.release import Release, runtime_config, make_release

from fake_fleet import CONTAINER, CONTROL, PACKING, SWITCH, World, deploy, interrupted_deploy, make_world, start_serves

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PINNED = "127.0.0.1:5000/kvbake/standin-kvpack@sha256:" + "ab" * 32
OTHER = "127.0.0.1:5000/kvbake/standin-kvpack@sha256:" + "cd" * 32


@pytest.mark.parametrize("example", ["standin", "realserve"])
def test_the_pushed_image_is_what_the_plan_said_without_building_it(example: str) -> None:
    manifest = load_manifest(EXAMPLES / example / "manifest.yaml")
    lock = read_lock(manifest)
    plan = make_plan(manifest, lock, read_overlay(manifest, lock))
    pushed = pushed_image(manifest, lock, PINNED)
    built = json.loads(plan.config_bytes)["config"]
    assert (pushed.pinned, pushed.config_digest, pushed.layers, dict(pushed.labels), dict(pushed.image_config)) == (
        PINNED, plan.image_id, (*lock.base.diff_ids, plan.layer.diff_id), plan.image_labels(), runtime_config(built))
    assert dict(pushed.labels) == built["Labels"], "every label of the image, the base's too"
    chosen = choose_preset(manifest, "control")
    release = make_release(pushed, chosen, manifest, "why", "op@host")
    assert (release.image, release.config_digest, release.layers, dict(release.labels), release.preset, dict(release.switches),
            release.max_model_len, release.reason, release.deployed_by) == (
        PINNED, plan.image_id, pushed.layers, plan.image_labels(), "control", dict(chosen.preset.switches),
        chosen.preset.max_model_len, "why", "op@host")


@pytest.fixture()
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """The stand-in without overlay/ (so no plan can be built), pushed as PINNED, over two fake nodes that hold its base
    and whose registry serves it; building the plan or reading overlay/ fails the test."""
    root = tmp_path / "standin"
    shutil.copytree(EXAMPLES / "standin", root, ignore=shutil.ignore_patterns("overlay", ".kvbake"))
    manifest = load_manifest(root / "manifest.yaml")
    lock = read_lock(manifest)
    tag = tag_for(manifest, lock)
    (root / PUSHES_DIR).mkdir(parents=True)
    (root / PUSHES_DIR / f"{tag}.json").write_text(json.dumps({"pinned": PINNED, "reference": f"{manifest.output.repository}:{tag}"}))
    for module in (plan_module, ship_commands):
        monkeypatch.setattr(module, "make_plan", lambda *a, **k: pytest.fail("the plan was built"))
        monkeypatch.setattr(module, "read_overlay", lambda *a, **k: pytest.fail("overlay/ was read"))
    world = make_world(tmp_path, monkeypatch)
    world.hold_base(manifest.base.node_name, lock.base.diff_ids)
    return SimpleNamespace(root=root, manifest=manifest, lock=lock, world=world,
                           argv=world.command_line(monkeypatch, manifest=root / "manifest.yaml"))


def offered(project: SimpleNamespace, image: str) -> Release:
    """The stand-in's control release pushed as `image`, served by every node's registry."""
    release = make_release(pushed_image(project.manifest, project.lock, image), choose_preset(project.manifest, "control"), project.manifest,
                           "", "ops@host")
    project.world.offer(release)
    return release


def current_records(world: World) -> dict[str, Release | None]:
    return {name: NodeState(name, engine).read().current for name, engine in world.engines.items()}


def run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, dict | None, str]:
    """Exit code, the --json answer (None on failure) and stderr of one command."""
    code = cli.main([*argv, "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out) if code == 0 else None, err


def test_deploy_takes_the_digest_from_the_push_record_and_the_rest_from_the_lock(project, capsys) -> None:
    release = offered(project, PINNED)
    code, answer, err = run(capsys, "deploy", "--preset", "control", *project.argv)
    assert code == 0, err
    assert answer["release"] == release.id and answer["image"] == PINNED
    lock = project.lock
    for name, current in current_records(project.world).items():
        assert current.id == release.id and current.image == PINNED and current.config_digest == lock.derived.image_id
        assert current.layers == (*lock.base.diff_ids, lock.derived.layer_diff_id)
        assert current.labels == pushed_image(project.manifest, lock, PINNED).labels
        assert project.world.engines[name].containers[CONTAINER]["Image"] == project.world.fleet.expected_id(name, release)[0]


def test_deploy_image_names_the_pull_reference_itself(project, capsys) -> None:
    (project.root / PUSHES_DIR).rename(project.root / "no-pushes")
    offered(project, OTHER)
    code, answer, err = run(capsys, "deploy", "--preset", "control", "--image", OTHER, *project.argv)
    assert code == 0 and answer["image"] == OTHER, err
    assert {current.image for current in current_records(project.world).values()} == {OTHER}


def test_deploy_without_a_push_record_is_the_registry_error_it_was(project, capsys) -> None:
    shutil.rmtree(project.root / PUSHES_DIR)
    before = project.world.snapshot()
    code, _, err = run(capsys, "deploy", "--preset", "control", *project.argv)
    assert code == 11 and err.startswith("error (registry): ") and err.count("\n") == 1
    assert project.world.snapshot() == before


def test_verify_running_and_status_read_every_rank_against_its_records(project, capsys, tmp_path) -> None:
    """verify-running and status over the nodes, reading only the records: after a deploy every rank passes and status
    shows the release; a rank whose serve runs another switch than its record says fails verify-running and makes
    status call the deployment diverged, and so does a rank that runs another image."""
    release = offered(project, PINNED)
    assert run(capsys, "deploy", "--preset", "control", *project.argv)[0] == 0
    code, answer, err = run(capsys, "verify-running", *project.argv)
    assert code == 0 and answer == {"ok": True, "ranks": [{"node": "a", "switches": {}}, {"node": "b", "switches": {}}]}, err
    code, answer, err = run(capsys, "status", *project.argv)
    assert code == 0, err
    assert [(row["node"], row["current"]["id"], row["running_matches_current"]) for row in answer["nodes"]] == [
        ("a", release.id, True), ("b", release.id, True)]
    assert (answer["diverged"], answer["marked_diverged"], answer["pending_journal"]) == (False, None, None)
    engine = project.world.engines["b"]
    engine.run_serving(CONTAINER, project.world.fleet.tag("current"), [f"{SWITCH}=3"], ("--max-model-len", str(release.max_model_len)))
    code, _, err = run(capsys, "verify-running", *project.argv)
    assert code == IntegrityError.exit_code and "b: pid 1: switch S is 3, expected unset" in err and err.count("\n") == 1
    code, answer, _ = run(capsys, "status", *project.argv)
    assert code == 0 and answer["diverged"] is True and answer["nodes"][1]["switches"] == {SWITCH: "3"}
    engine.run_serving(CONTAINER, "base:1", [], ("--max-model-len", str(release.max_model_len)))
    code, answer, _ = run(capsys, "status", *project.argv)
    assert code == 0 and answer["diverged"] is True
    assert [(row["running"], row["running_matches_current"]) for row in answer["nodes"]] == [(True, True), (True, False)]
    page = tmp_path / "status.html"
    assert run(capsys, "status", "--html", str(page), *project.argv) == (0, answer, ""), "the page changes nothing printed"
    root = ET.fromstring(page.read_text())
    rows = list(root.iter("{http://www.w3.org/1999/xhtml}tbody"))[0]
    assert [row.get("class") for row in rows] == ["good", "bad"] and "not the current release" in "".join(rows[1].itertext())
    assert "DIVERGED" in "".join(root.itertext())


def test_verify_running_expect_holds_every_rank_to_the_switch_set_given(project, capsys) -> None:
    offered(project, PINNED)
    assert run(capsys, "deploy", "--preset", "control", *project.argv)[0] == 0
    code, _, err = run(capsys, "verify-running", "--expect", f"{SWITCH}=3", *project.argv)
    assert code == IntegrityError.exit_code and "a: pid 1: switch S is unset, expected 3" in err
    assert run(capsys, "verify-running", "--expect", "", *project.argv)[0] == 0


def test_verify_running_fails_a_node_with_no_release_recorded(project, capsys) -> None:
    offered(project, PINNED)
    assert run(capsys, "deploy", "--preset", "control", *project.argv)[0] == 0
    NodeState("b", project.world.engines["b"]).update("base:1", "forgotten", current=None)
    code, _, err = run(capsys, "verify-running", *project.argv)
    assert code == IntegrityError.exit_code and "b: no release recorded" in err


def test_status_names_a_journal_only_the_nodes_keep(project, capsys) -> None:
    offered(project, PINNED)
    assert run(capsys, "deploy", "--preset", "control", *project.argv)[0] == 0
    interrupted_deploy(project.world, PACKING)
    (project.world.fleet.deployment.state_dir / "journal.json").unlink()
    code, answer, err = run(capsys, "status", *project.argv)
    assert code == 0, err
    assert answer["pending_journal"] == NodeState("a", project.world.engines["a"]).read().transition["id"]


def test_rollback_adopt_and_rollback_to_adopted_read_only_records(project, capsys) -> None:
    world = project.world
    ids = start_serves(world)
    code, answer, err = run(capsys, "adopt", *project.argv)
    assert code == 0 and {node["container"] for node in answer["nodes"].values()} == set(ids.values()), err
    deploy(world, CONTROL)
    deploy(world, PACKING)
    code, answer, err = run(capsys, "rollback", *project.argv)
    assert code == 0 and answer["release"] == CONTROL.id, err
    assert {node["records"][0] for node in world.snapshot()["nodes"].values()} == {CONTROL.id}
    code, _, err = run(capsys, "rollback", "--to", "adopted", *project.argv)
    assert code == 0, err
    assert {name: engine.containers[CONTAINER]["Id"] for name, engine in world.engines.items()} == ids
