"""deploy, rollback, status, verify-running and adopt read the release from its records (the push record, the lock, the
nodes' release records); none of them builds the plan, so none reads overlay/ or assembles the thin layer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from kvbake import cli
from kvbake.bake.core import plan as plan_module
from kvbake.bake.core.plan import make_plan, read_overlay, tag_for
from kvbake.lock import read_lock
from kvbake.manifest import load_manifest
from kvbake.operate.core.presets import choose_preset
from kvbake.ship import commands as ship_commands
from kvbake.ship.adapters import adoption, fleet, rollout, status
from kvbake.ship.core.journal import Journal, NodePlan
from kvbake.ship.core.push_record import PUSHES_DIR, pushed_image
from kvbake.ship.core.release import runtime_config, make_release

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PINNED = "127.0.0.1:5000/kvbake/standin-kvpack@sha256:" + "ab" * 32
OTHER = "127.0.0.1:5000/kvbake/standin-kvpack@sha256:" + "cd" * 32
JOURNAL = Journal("deploy-20260101T000000Z-abcdef", "deploy", "0123456789abcdef", (NodePlan("spark-a", None, None, "sha256:x", None, {}, {}),))
DEPLOY = {"format": 1, "nodes": [{"name": "spark-a", "host": "ssh://ops@spark-a", "role": "head"}],
          "launcher": {"command": ["/opt/serve/launch.sh"], "container": "vllm-serve"}}


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
    """The stand-in without overlay/ (so no plan can be built), pushed as PINNED, with a one-node deployment file; the
    fleet and every rollout step are faked and record what they were given."""
    root = tmp_path / "standin"
    shutil.copytree(EXAMPLES / "standin", root, ignore=shutil.ignore_patterns("overlay", ".kvbake"))
    manifest = load_manifest(root / "manifest.yaml")
    tag = tag_for(manifest, read_lock(manifest))
    (root / PUSHES_DIR).mkdir(parents=True)
    (root / PUSHES_DIR / f"{tag}.json").write_text(json.dumps({"pinned": PINNED, "reference": f"{manifest.output.repository}:{tag}"}))
    (root / "deploy.yaml").write_text(json.dumps(DEPLOY))
    seen: list[tuple] = []
    for module in (plan_module, ship_commands):
        monkeypatch.setattr(module, "make_plan", lambda *a, **k: pytest.fail("the plan was built"))
        monkeypatch.setattr(module, "read_overlay", lambda *a, **k: pytest.fail("overlay/ was read"))
    monkeypatch.setattr(fleet, "make_fleet", lambda deployment, manifest, lock: SimpleNamespace(deployment=deployment, engines={"spark-a": None}))
    monkeypatch.setattr(rollout, "deploy", lambda fleet_, release, *a: seen.append(("deploy", release)) or JOURNAL)
    monkeypatch.setattr(rollout, "rollback", lambda fleet_, break_lock: seen.append(("rollback",)) or JOURNAL)
    monkeypatch.setattr(adoption, "rollback_to_adopted", lambda fleet_, break_lock: seen.append(("rollback --to adopted",)) or JOURNAL)
    monkeypatch.setattr(status, "status", lambda fleet_: seen.append(("status",)) or {"nodes": [], "diverged": False,
                                                                                        "marked_diverged": None, "pending_journal": None})
    monkeypatch.setattr(status, "verify_running", lambda fleet_, expect: seen.append(("verify-running", expect)) or [])
    adopted = SimpleNamespace(id="0123456789abcdef", image="serve:old", switches={}, max_model_len=4096,
                              adopted={"container_id": "c" * 64, "name": "serve", "shape": "main", "exec": None, "changes": [],
                                       "spec": {"host": {}}})
    monkeypatch.setattr(adoption, "adopt", lambda fleet_, reason, break_lock, container: seen.append(("adopt",)) or {"spark-a": adopted})
    return SimpleNamespace(root=root, manifest=manifest, seen=seen,
                           argv=["--manifest", str(root / "manifest.yaml"), "--deploy", str(root / "deploy.yaml")])


def test_deploy_takes_the_digest_from_the_push_record_and_the_rest_from_the_lock(project, capsys) -> None:
    assert cli.main(["deploy", "--preset", "control", *project.argv]) == 0, capsys.readouterr().err
    (kind, release), = project.seen
    lock = read_lock(project.manifest)
    assert kind == "deploy" and release.image == PINNED
    assert release.config_digest == lock.derived.image_id and release.layers == (*lock.base.diff_ids, lock.derived.layer_diff_id)
    assert release.labels == pushed_image(project.manifest, lock, PINNED).labels
    assert f"deployed release {release.id} (control, max-model-len" in capsys.readouterr().out


def test_deploy_image_names_the_pull_reference_itself(project, capsys) -> None:
    (project.root / PUSHES_DIR).rename(project.root / "no-pushes")
    assert cli.main(["deploy", "--preset", "control", "--image", OTHER, *project.argv]) == 0, capsys.readouterr().err
    assert project.seen[0][1].image == OTHER


def test_deploy_without_a_push_record_is_the_registry_error_it_was(project, capsys) -> None:
    shutil.rmtree(project.root / PUSHES_DIR)
    assert cli.main(["deploy", "--preset", "control", *project.argv]) == 11
    tag = tag_for(project.manifest, read_lock(project.manifest))
    assert capsys.readouterr().err == (f"error (registry): {project.manifest.output.repository}:{tag} has not been pushed (no push "
                                       "record); fix: run python build.py push first\n")


@pytest.mark.parametrize(("command", "expected"), [
    (["rollback"], ("rollback",)), (["status"], ("status",)), (["verify-running"], ("verify-running", None)), (["adopt"], ("adopt",)),
    (["rollback", "--to", "adopted"], ("rollback --to adopted",)),
])
def test_the_other_ship_commands_read_only_records(project, capsys, command: list[str], expected: tuple) -> None:
    assert cli.main([*command, *project.argv]) == 0, capsys.readouterr().err
    assert project.seen == [expected]
