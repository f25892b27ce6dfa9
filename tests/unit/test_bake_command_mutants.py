"""The lock and plan commands: --rebase-base re-pins a moved base, a donor import keeps the summary and lists every patch, the texts cut digests at their prefix."""

from __future__ import annotations

import json

from kvbake.bake import commands
from kvbake.lock import read_lock
from kvbake.manifest import load_manifest
from tests.unit.bake_project import BASE_IMAGE, MODULE, base_entries, engine_with_base, two_patch_project
from tests.unit.message_words import says
from tests.unit.test_bake_commands import args, setup  # noqa: F401  (setup is the fixture)
from tests.unit.test_donor_entries import git


def test_lock_with_rebase_base_repins_a_base_tag_that_moved(setup, monkeypatch):
    manifest, _, _ = setup
    commands.cmd_lock(args(manifest))
    moved = engine_with_base(base_entries(MODULE + "# moved\n"))
    monkeypatch.setattr(commands, "Engine", lambda host=None: moved)
    data, _ = commands.cmd_lock(args(manifest, rebase_base=True))
    assert read_lock(manifest).base.config_digest == moved.image_id_of(BASE_IMAGE)
    assert data["image_id"] == read_lock(manifest).derived.image_id


def test_lock_from_a_donor_keeps_the_summary_and_lists_every_imported_patch(setup, tmp_path):
    manifest, _ = two_patch_project(tmp_path)
    donor = tmp_path / "donor"
    (donor / "patches").mkdir(parents=True)
    git(donor, "init", "-q")
    for patch in manifest.chain:
        (donor / "patches" / patch.path.name).write_bytes(patch.path.read_bytes())
    git(donor, "add", "-A")
    git(donor, "commit", "-q", "-m", "patches")
    head = git(donor, "rev-parse", "HEAD").strip()
    manifest.path.write_text(manifest.path.read_text().replace(manifest.donor.revision, head))
    manifest = load_manifest(manifest.path)
    data, text = commands.cmd_lock(args(manifest, donor=donor))
    lines = text.splitlines()
    assert data["imported"] == ["0001", "0002"] and says(lines[-1], "0001, 0002")
    assert len(lines) == 2 and lines[0].startswith("locked ") and says(lines[0], "2 patches")


def test_lock_migrate_names_the_new_config_digest_by_its_prefix(setup):
    manifest, _, _ = setup
    commands.cmd_lock(args(manifest))
    document = json.loads(manifest.lock_path.read_text())
    document["format"], document["manifest_sha256"] = 1, manifest.sha256
    document["base"]["layer_sizes"] = [512] * len(document["base"]["diff_ids"])
    manifest.lock_path.write_text(json.dumps(document))
    _, text = commands.cmd_lock(args(manifest, migrate=True))
    assert says(text, f"new expected config digest {read_lock(manifest).derived.image_id[:19]}")


def test_plan_cuts_each_files_hashes_at_twelve_characters(setup):
    manifest, _, _ = setup
    commands.cmd_lock(args(manifest))
    _, text = commands.cmd_plan(args(manifest))
    lock = read_lock(manifest)
    for locked in lock.files:
        before = (locked.base_sha256 or "new")[:12]
        assert says(text, f"{locked.path}  {before} → {locked.overlay_sha256[:12]}")
