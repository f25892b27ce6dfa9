"""The bake commands over a fake engine: the --json data, the facts each text names, the engine asked and the record written."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from kvbake.bake import commands
from kvbake.bake.adapters.builder import DOCKER_BUILDER_SUFFIX
from kvbake.bake.core.build_record import RECORDS_DIR
from kvbake.bake.core.dockerfile import render
from kvbake.bake.core.plan import make_plan, read_overlay
from kvbake.errors import UsageError
from kvbake.lock import read_lock
from kvbake.manifest import load_manifest
from tests.unit.bake_project import engine_with_base, project, two_patch_project
from tests.unit.message_words import says


@pytest.fixture()
def setup(tmp_path, monkeypatch):
    """The tiny project, the fake engine every command gets, and the hosts they asked for."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    manifest = project(tmp_path)
    engine = engine_with_base()
    hosts = []

    def connect(host=None):
        hosts.append(host)
        return engine

    monkeypatch.setattr(commands, "Engine", connect)
    return manifest, engine, hosts


def args(manifest, **given) -> argparse.Namespace:
    defaults = {"manifest": manifest.path, "host": "ssh://builder", "builder": "kvbake", "rebase_base": False, "donor": None,
                "migrate": False, "code_change": None, "image": None, "deep": False}
    return argparse.Namespace(**{**defaults, **given})


def the_plan(manifest):
    lock = read_lock(manifest)
    return make_plan(manifest, lock, read_overlay(manifest, lock))


def test_lock_returns_what_it_pinned_and_asks_the_named_engine(setup):
    manifest, engine, hosts = setup
    data, text = commands.cmd_lock(args(manifest))
    lock = read_lock(manifest)
    assert hosts == ["ssh://builder"]
    assert data == {"lock": "manifest.lock.json", "imported": [], "files": 2, "patches": 1, "image_id": lock.derived.image_id,
                    "layer_diff_id": lock.derived.layer_diff_id, "tag": the_plan(manifest).tag}
    assert text.startswith("locked manifest.yaml → manifest.lock.json: 1 patches, 2 files")
    assert f"base {lock.base.config_digest[:19]}," in text and text.endswith(f"expected config digest {lock.derived.image_id[:19]}")
    assert "imported" not in text


def test_lock_migrate_takes_no_donor_and_says_when_there_is_nothing_to_migrate(setup, tmp_path):
    manifest, _, hosts = setup
    with pytest.raises(UsageError) as caught:
        commands.cmd_lock(args(manifest, migrate=True, donor=tmp_path))
    assert caught.value.exit_code == 2 and says(caught.value.message, "lock --migrate takes no --donor")
    assert says(caught.value.fix, "migrate first") and says(caught.value.fix, "lock --donor DIR")
    commands.cmd_lock(args(manifest))
    data, text = commands.cmd_lock(args(manifest, migrate=True))
    lock = read_lock(manifest)
    assert data == {"lock": "manifest.lock.json", "migrated": False, "format": 3, "image_id": lock.derived.image_id,
                    "tag": the_plan(manifest).tag}
    assert "already format 3" in text and hosts == ["ssh://builder"], "migrating asks no engine"


def test_lock_migrate_of_a_format_1_lock_names_the_new_config_digest(setup):
    manifest, _, _ = setup
    commands.cmd_lock(args(manifest))
    document = json.loads(manifest.lock_path.read_text())
    document["format"], document["manifest_sha256"] = 1, manifest.sha256
    document["base"]["layer_sizes"] = [512] * len(document["base"]["diff_ids"])  # formats 1 and 2 pinned them
    manifest.lock_path.write_text(json.dumps(document))
    data, text = commands.cmd_lock(args(manifest, migrate=True))
    lock = read_lock(manifest)
    assert data["migrated"] is True and data["format"] == 3 and data["image_id"] == lock.derived.image_id
    assert text.startswith("migrated manifest.lock.json to format 3") and lock.derived.image_id[:19] in text


def test_build_returns_the_record_it_writes_and_names_the_image_and_each_fact(setup):
    manifest, engine, hosts = setup
    commands.cmd_lock(args(manifest))
    record, text = commands.cmd_build(args(manifest))
    plan = the_plan(manifest)
    written = manifest.root / RECORDS_DIR / f"{plan.tag}.json"
    assert json.loads(written.read_text()) == record and hosts == ["ssh://builder", "ssh://builder"]
    assert record["image"] == plan.reference and record["builder"] == "kvbake" and record["config_digest"] == plan.image_id
    lines = text.splitlines()
    assert lines[0] == f"image:     {plan.reference}   (STAND-IN example)"
    assert lines[1] == f"identity:  config digest {plan.image_id}"
    assert lines[2].startswith("engine:    docker-26.1-classic") and plan.image_id in lines[2]
    assert lines[3].startswith(f"layer:     {plan.layer.diff_id} (2 files, 2 bytecode whiteouts, {len(plan.layer.data)} bytes)")
    assert lines[4].startswith("chain:     0001 ")
    assert lines[5].startswith("switches:  2 declared") and "1 forbidden" in lines[5]
    assert lines[6].startswith("verified:") and "exactly one thin layer" in lines[6] and "engine ID" in lines[6]
    assert "no switch in Env" in lines[6]
    assert re.fullmatch(r"phases:    check-lock \d+\.\d\ds, check-base \d+\.\d\ds, .*, tag \d+\.\d\ds", lines[7])
    assert lines[8] == f"record:    {RECORDS_DIR}/{plan.tag}.json"


def test_build_with_docker_names_the_docker_layers_and_the_deep_verification(setup):
    manifest, engine, _ = setup
    commands.cmd_lock(args(manifest))
    record, text = commands.cmd_build(args(manifest, builder="docker"))
    plan = the_plan(manifest)
    lines = text.splitlines()
    assert record["builder"] == "docker" and record["image"] == plan.reference + DOCKER_BUILDER_SUFFIX
    assert lines[2] == f"engine:    docker-26.1-classic: image ID {record['image_id']}"
    assert lines[3].startswith("layers:    docker build") and "2 stale bytecode files" in lines[3]
    assert lines[6].startswith("verified:") and "files read back" in lines[6] and "no switch in Env" in lines[6]


def test_plan_lists_the_base_each_patch_file_whiteout_layer_image_tag_and_label(setup):
    manifest, engine, hosts = setup
    commands.cmd_lock(args(manifest))
    summary, text = commands.cmd_plan(args(manifest))
    plan = the_plan(manifest)
    lock = plan.lock
    assert summary["image_id"] == plan.image_id and summary["reference"] == plan.reference and hosts == ["ssh://builder"]
    lines = text.splitlines()
    assert lines[0] == "plan for manifest.yaml (STAND-IN example); nothing is changed"
    assert lines[1] == f"base:    {lock.base.reference}  config {lock.base.config_digest}  (1 layers, linux/amd64)"
    assert lines[2].startswith(f"patch:   0001  sha256 {lock.patches[0].sha256[:16]}…  files: pkg/mod.py, pkg/helper.py")
    assert lines[3].startswith("file:    pkg/helper.py  new → ") and lines[3].endswith("0o644 0:0")
    assert lines[4].startswith(f"file:    pkg/mod.py  {lock.files[1].base_sha256[:12]} → {lock.files[1].overlay_sha256[:12]}")
    assert lines[5] == "remove:  /usr/lib/py/pkg/__pycache__/mod.cpython-311.opt-1.pyc (whiteout)"
    assert f"layer:   {plan.layer.diff_id}" in lines and f"tag:     {plan.reference}" in lines
    assert f"image:   config digest {plan.image_id} (the identity on every engine)" in lines
    labels = [line for line in lines if line.startswith("label:   ")]
    assert labels == [f"label:   {k}={v}" for k, v in sorted(plan.labels.items())]


def test_plan_of_a_production_manifest_names_it(setup):
    manifest, _, _ = setup
    commands.cmd_lock(args(manifest))
    manifest.path.write_text(manifest.path.read_text().replace("standin: true\n", ""))
    from kvbake.bake.adapters.pinning import create_lock

    create_lock(commands.Engine(), load_manifest(manifest.path))
    _, text = commands.cmd_plan(args(manifest))
    assert text.splitlines()[0] == "plan for manifest.yaml (tiny); nothing is changed"


def test_verify_returns_the_report_and_names_the_engine_and_the_proofs(setup):
    manifest, engine, hosts = setup
    commands.cmd_lock(args(manifest))
    commands.cmd_build(args(manifest))
    plan = the_plan(manifest)
    data, text = commands.cmd_verify(args(manifest, host="unix:///other.sock"))
    assert hosts[-1] == "unix:///other.sock"
    assert data == {"image": plan.reference, "image_id": plan.image_id, "config_digest": plan.image_id, "engine": "docker-26.1-classic",
                    "deep": False, "files_checked": 0, "modules_proven": 0, "offline_proven": 0, "interpreter_proof": False, "ok": True}
    assert text.startswith(f"verified {plan.reference} (config digest {plan.image_id[:19]}; docker-26.1-classic ID {plan.image_id[:19]})")
    assert "read back" not in text
    data, text = commands.cmd_verify(args(manifest, deep=True))
    assert (data["deep"], data["files_checked"], data["offline_proven"]) == (True, 2, 2)
    assert "; 2 files read back; offline proof: 2 modules" in text


def test_verify_finds_the_docker_builders_tag_or_the_named_image(setup):
    manifest, engine, _ = setup
    commands.cmd_lock(args(manifest))
    commands.cmd_build(args(manifest, builder="docker"))
    plan = the_plan(manifest)
    data, _ = commands.cmd_verify(args(manifest, builder="docker"))
    assert data["image"] == plan.reference + DOCKER_BUILDER_SUFFIX
    engine.tags["named:1"] = engine.tags[plan.reference + DOCKER_BUILDER_SUFFIX]
    data, _ = commands.cmd_verify(args(manifest, builder="docker", image="named:1"))
    assert data["image"] == "named:1"


def test_dockerfile_writes_the_rendered_file_beside_the_manifest(setup):
    manifest, _, _ = setup
    commands.cmd_lock(args(manifest))
    data, text = commands.cmd_dockerfile(args(manifest))
    target = manifest.root / "Dockerfile.overlay"
    assert data == {"dockerfile": "Dockerfile.overlay"} and text == "wrote Dockerfile.overlay"
    assert target.read_text() == render(the_plan(manifest))


def test_lock_from_a_donor_imports_the_chain_and_names_it(setup, tmp_path):
    from tests.unit.bake_project import PATCH
    from tests.unit.test_donor_entries import git

    manifest, _, _ = setup
    donor = tmp_path / "donor"
    (donor / "patches").mkdir(parents=True)
    git(donor, "init", "-q")
    (donor / "patches" / "0001-tiny.patch").write_bytes(PATCH)
    git(donor, "add", "-A")
    git(donor, "commit", "-q", "-m", "patches")
    head = git(donor, "rev-parse", "HEAD").strip()
    manifest.path.write_text(manifest.path.read_text().replace(manifest.donor.revision, head))
    manifest.chain[0].path.write_bytes(b"")
    data, text = commands.cmd_lock(args(manifest, donor=donor))
    assert data["imported"] == ["0001"] and text.splitlines()[-1] == "imported from the donor: 0001"
    assert manifest.chain[0].path.read_bytes() == PATCH and read_lock(load_manifest(manifest.path)).patches[0].id == "0001"


def test_build_of_a_production_two_patch_chain_names_the_image_plainly_and_both_patches(setup, tmp_path):
    _, engine, _ = setup
    manifest, _ = two_patch_project(tmp_path)
    manifest.path.write_text(manifest.path.read_text().replace("standin: true\n", ""))
    manifest = load_manifest(manifest.path)
    commands.cmd_lock(args(manifest))
    record, text = commands.cmd_build(args(manifest))
    lines = text.splitlines()
    assert lines[0] == f"image:     {record['image']}"
    assert lines[2] == f"engine:    docker-26.1-classic: image ID = config digest {record['image_id']}"
    assert lines[4].startswith("chain:     0001 0002 (")
