"""`lock` over a fake engine holding a real base layer: what it pins, the calls it makes, and every refusal."""

from __future__ import annotations

import json
import logging

import pytest

from kvbake.bake.adapters import pinning
from kvbake.bake.adapters.basecapture import capture_base
from kvbake.bake.adapters.base_source import read_base
from kvbake.bake.adapters.pinning import create_lock, migrate_lock, refuse_silent_repin
from kvbake.bake.core.plan import make_plan, read_overlay
from kvbake.digests import sha256_hex
from kvbake.errors import BaseImageError, IntegrityError, LockError, ManifestError, PatchError
from kvbake.lock import LockedDir, read_lock
from tests.unit.bake_engine import layer_tar
from tests.unit.bake_project import (BASE_CONFIG, BASE_IMAGE, HELPER, MODULE, PATCHED, PYC, SOURCE, base_entries, creation,
                                     engine_with_base, modification, project, two_patch_project)
from tests.unit.message_words import says

EPOCH = "1700000000"


@pytest.fixture(autouse=True)
def fixed_epoch(monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)


def test_the_lock_pins_the_base_the_files_their_bytecode_the_directories_and_the_patch(tmp_path):
    manifest = project(tmp_path)
    engine = engine_with_base()
    lock = create_lock(engine, manifest)
    base_id = engine.image_id_of(BASE_IMAGE)
    assert lock.base.reference == BASE_IMAGE and lock.base.platform == "linux/amd64"
    assert lock.base.config_digest == base_id and lock.base.diff_ids == tuple(engine.images[base_id]["RootFS"]["Layers"])
    assert lock.base.layer_sizes is None and lock.base.repo_digest is None, "format 3 pins no saved layer sizes"
    assert lock.base.config["config"]["Labels"] == {"maintainer": "base team"}
    assert lock.source_root == "/usr/lib/py" and lock.source_date_epoch == int(EPOCH)
    assert (lock.donor_url, lock.donor_revision) == (manifest.donor.url, manifest.donor.revision)
    helper, module = lock.files
    assert (module.path, module.base_sha256, module.overlay_sha256, module.mode) == (
        "pkg/mod.py", sha256_hex(MODULE.encode()), sha256_hex(PATCHED.encode()), 0o640)
    assert module.stale_bytecode == ("pkg/__pycache__/mod.cpython-311.opt-1.pyc", "pkg/__pycache__/mod.cpython-311.pyc")
    assert (helper.path, helper.base_sha256, helper.overlay_sha256, helper.mode, helper.uid, helper.gid, helper.stale_bytecode) == (
        "pkg/helper.py", None, sha256_hex(HELPER.encode()), 0o644, 0, 0, ())
    assert [d.path for d in lock.dirs] == ["usr", "usr/lib", SOURCE, f"{SOURCE}/pkg", f"{SOURCE}/pkg/__pycache__"]
    assert lock.dirs[3] == LockedDir(f"{SOURCE}/pkg", 0o750, module.uid, module.gid, 1_600_000_000) and lock.new_dirs == ()
    (patch,) = lock.patches
    assert (patch.id, patch.file, patch.sha256) == ("0001", "patches/0001-tiny.patch", sha256_hex(manifest.chain[0].path.read_bytes()))
    assert len(patch.patch_id) == 40 and [(f.path, f.change) for f in patch.files] == [("pkg/mod.py", "modify"), ("pkg/helper.py", "create")]
    assert (manifest.root / "overlay" / "pkg" / "mod.py").read_text() == PATCHED
    assert (manifest.root / "overlay" / "pkg" / "helper.py").read_text() == HELPER
    assert read_lock(manifest) == lock
    assert lock.derived == make_plan(manifest, lock, read_overlay(manifest, lock)).derived() and lock.derived.image_id.startswith("sha256:")


def test_lock_saves_the_base_once_and_removes_every_container_it_created(tmp_path):
    engine = engine_with_base()
    create_lock(engine, project(tmp_path))
    assert engine.calls[0] == ("ping",) and [c for c in engine.calls if c[0] == "save"] == [("save", BASE_IMAGE)]
    created = [c[2] for c in engine.calls if c[0] == "create"]
    assert created and [c[1] for c in engine.calls if c[0] == "remove"] == created and engine.containers == {}
    copied = [c[2] for c in engine.calls if c[0] == "copy_out"]
    assert f"/{SOURCE}/pkg/helper.py" in copied, "a created file is looked for in the base first"
    assert f"/{SOURCE}/pkg/mod.py" in copied and f"/{SOURCE}/pkg/__pycache__" in copied


def test_a_chain_creating_a_new_folder_locks_it_as_created(tmp_path):
    patch = modification("pkg/mod.py", MODULE, PATCHED) + creation("pkg/sub/new.py", HELPER)
    lock = create_lock(engine_with_base(), project(tmp_path, patch))
    assert lock.new_dirs == ("pkg/sub",) and [f.path for f in lock.files] == ["pkg/mod.py", "pkg/sub/new.py"]


def test_the_epoch_of_the_previous_lock_is_kept_when_none_is_set(tmp_path, monkeypatch):
    manifest = project(tmp_path)
    engine = engine_with_base()
    create_lock(engine, manifest)
    monkeypatch.delenv("SOURCE_DATE_EPOCH")
    assert create_lock(engine, manifest).source_date_epoch == int(EPOCH)


def test_the_registry_digest_of_the_bases_own_repository_is_pinned(tmp_path):
    engine = engine_with_base()
    engine.images[engine.image_id_of(BASE_IMAGE)]["RepoDigests"] = ["kvbake-test/tiny@sha256:" + "e" * 64]
    assert create_lock(engine, project(tmp_path)).base.repo_digest == "sha256:" + "e" * 64


def refused(error_type, call):
    with pytest.raises(error_type) as caught:
        call()
    return caught.value


def test_a_modified_file_missing_from_the_base_is_refused_and_nothing_is_written(tmp_path):
    manifest = project(tmp_path)
    entries = [e for e in base_entries() if not e[0].endswith("pkg/mod.py")]
    error = refused(BaseImageError, lambda: create_lock(engine_with_base(entries), manifest))
    assert error.exit_code == 6 and "pkg/mod.py" in error.message and "/usr/lib/py" in error.message
    assert "check base.source_root and the patch paths" in error.fix
    assert not manifest.lock_path.exists() and not (manifest.root / "overlay").exists()


def test_a_new_file_the_base_already_has_is_refused(tmp_path):
    entries = base_entries() + [(f"{SOURCE}/pkg/helper.py", b"there\n", 0o644)]
    error = refused(PatchError, lambda: create_lock(engine_with_base(entries), project(tmp_path)))
    assert error.exit_code == 5 and "0001" in error.message and "pkg/helper.py" in error.message
    assert BASE_IMAGE in error.message and "under /usr/lib/py" in error.message and "as a change of the base file" in error.fix


def test_a_folder_the_base_has_where_the_chain_creates_a_file_is_refused(tmp_path):
    entries = base_entries() + [(f"{SOURCE}/pkg/helper.py", None, 0o755), (f"{SOURCE}/pkg/helper.py/x", b"", 0o644)]
    error = refused(PatchError, lambda: create_lock(engine_with_base(entries), project(tmp_path)))
    assert "pkg/helper.py" in error.message


@pytest.mark.parametrize("shadow", ["pkg/mod/__init__.py", "pkg/mod.cpython-311-x86_64-linux-gnu.so"])
def test_a_patched_module_shadowed_in_the_base_is_refused(tmp_path, shadow):
    entries = base_entries() + [(f"{SOURCE}/{shadow}", b"", 0o644)]
    error = refused(BaseImageError, lambda: create_lock(engine_with_base(entries), project(tmp_path)))
    assert error.exit_code == 6 and shadow in error.message and "pkg/mod.py" in error.message and BASE_IMAGE in error.message
    assert "cannot sit beside a package or extension" in error.fix


def test_a_base_of_another_platform_is_refused(tmp_path):
    manifest = project(tmp_path)
    engine = engine_with_base()
    engine.images[engine.image_id_of(BASE_IMAGE)]["Architecture"] = "arm64"
    error = refused(BaseImageError, lambda: create_lock(engine, manifest))
    assert "linux/arm64" in error.message and "linux/amd64" in error.message and BASE_IMAGE in error.message
    assert "the right platform" in error.fix


def test_a_native_platform_takes_whatever_the_base_is(tmp_path):
    manifest = project(tmp_path)
    text = manifest.path.read_text().replace("platform: linux/amd64", "platform: native")
    manifest.path.write_text(text)
    manifest = pinning.load_manifest(manifest.path)
    engine = engine_with_base()
    engine.images[engine.image_id_of(BASE_IMAGE)]["Architecture"] = "arm64"
    assert create_lock(engine, manifest).base.platform == "linux/arm64"


def test_a_save_naming_other_layers_than_the_inspect_is_refused():
    engine = engine_with_base()
    error = refused(BaseImageError, lambda: capture_base(engine, BASE_IMAGE, ("sha256:" + "0" * 64,), frozenset()))
    assert BASE_IMAGE in error.message and engine.profile().name in error.message and says(error.fix, "the image changed during the save")


def test_the_saved_base_yields_the_wanted_folders_and_keeps_no_store_manifest_on_the_classic_store():
    engine = engine_with_base()
    layers = tuple(engine.require_image(BASE_IMAGE)["RootFS"]["Layers"])
    saved = capture_base(engine, BASE_IMAGE, layers, frozenset({f"{SOURCE}/pkg"}))
    assert saved.config_digest == engine.image_id_of(BASE_IMAGE) and set(saved.dirs) == {f"{SOURCE}/pkg"}
    assert saved.dirs[f"{SOURCE}/pkg"].mode == 0o750 and not [c for c in engine.calls if c[0] == "remember_manifest"]


def test_a_saved_config_that_is_not_the_inspected_image_is_refused():
    engine = engine_with_base()
    inspect = engine.require_image(BASE_IMAGE)
    read = read_base(engine, BASE_IMAGE, inspect, "linux/amd64", frozenset())
    assert (read.source, read.config_digest) == ("docker save", inspect["Id"])
    error = refused(BaseImageError, lambda: read_base(engine, BASE_IMAGE, {**inspect, "Id": "sha256:" + "9" * 64}, "linux/amd64", frozenset()))
    assert "sha256:999999999999" in error.message and read.config_digest[:19] in error.message and BASE_IMAGE in error.message
    assert engine.profile().name in error.message and "run lock again" in error.fix


def test_a_missing_folder_above_the_source_root_is_refused(tmp_path):
    entries = [e for e in base_entries() if e[0] != "usr/lib"]
    error = refused(BaseImageError, lambda: create_lock(engine_with_base(entries), project(tmp_path)))
    assert "usr/lib" in error.message and "check base.source_root" in error.fix


def test_a_base_tag_that_moved_since_the_lock_is_refused_unless_rebasing(tmp_path):
    manifest = project(tmp_path)
    engine = engine_with_base()
    first = create_lock(engine, manifest)
    moved = engine_with_base(base_entries(MODULE + "# moved\n"))
    error = refused(BaseImageError, lambda: create_lock(moved, manifest))
    assert error.exit_code == 6 and first.base.config_digest in error.message and "lock --rebase-base" in error.fix
    assert read_lock(manifest) == first
    refuse_silent_repin(moved, manifest, rebase=True)
    assert create_lock(moved, manifest, rebase=True).base.config_digest == moved.image_id_of(BASE_IMAGE)


def test_a_repin_is_not_checked_without_a_lock_with_a_broken_lock_or_for_another_reference(tmp_path):
    manifest = project(tmp_path)
    engine = engine_with_base()
    refuse_silent_repin(engine, manifest, rebase=False)
    assert engine.calls == [], "no lock: nothing to compare"
    manifest.lock_path.write_text("{not json")
    refuse_silent_repin(engine, manifest, rebase=False)
    assert engine.calls == []
    create_lock(engine_with_base(), manifest)
    document = json.loads(manifest.lock_path.read_text())
    document["base"]["reference"] = "kvbake-test/other:1"
    manifest.lock_path.write_text(json.dumps(document))
    moved = engine_with_base(base_entries(MODULE + "# moved\n"))
    refuse_silent_repin(moved, manifest, rebase=False)
    assert moved.calls == []


def test_a_switch_the_chain_never_reads_is_refused(tmp_path):
    quiet = PATCHED.replace('OTHER = os.environ.get("TINY_OTHER")\n', "")
    manifest = project(tmp_path, modification("pkg/mod.py", MODULE, quiet) + creation("pkg/helper.py", HELPER))
    error = refused(ManifestError, lambda: create_lock(engine_with_base(), manifest))
    assert "TINY_OTHER" in error.message and not manifest.lock_path.exists()


def test_a_vllm_switch_the_registry_cannot_confirm_warns_and_still_locks(tmp_path, caplog):
    text = PATCHED.replace("TINY_SWITCH", "VLLM_TINY_PAIR").replace('OTHER = os.environ.get("TINY_OTHER")\n', "")
    manifest = project(tmp_path, modification("pkg/mod.py", MODULE, text) + creation("pkg/helper.py", HELPER),
                       switches={"VLLM_TINY_PAIR": {"values": ["3"]}})
    with caplog.at_level(logging.WARNING, logger="kvbake.bake.adapters.pinning"):
        create_lock(engine_with_base(), manifest)
    assert manifest.lock_path.exists()
    assert any(r.levelno == logging.WARNING and r.getMessage().startswith("switch coverage: ") and "VLLM_TINY_PAIR" in r.getMessage()
               for r in caplog.records)


def test_migrate_refuses_an_unlocked_manifest_and_a_drifted_overlay(tmp_path):
    manifest = project(tmp_path)
    error = refused(LockError, lambda: migrate_lock(manifest))
    assert "manifest.lock.json" in error.message and "lock --manifest manifest.yaml" in error.fix
    lock = create_lock(engine_with_base(), manifest)
    assert migrate_lock(manifest) == (lock, False)
    document = json.loads(manifest.lock_path.read_text())
    document["format"] = 1
    document["manifest_sha256"] = manifest.sha256
    document["base"]["layer_sizes"] = [512] * len(document["base"]["diff_ids"])  # formats 1 and 2 pinned them
    manifest.lock_path.write_text(json.dumps(document))
    (manifest.root / "overlay" / "pkg" / "mod.py").write_text("drifted\n")
    error = refused(IntegrityError, lambda: migrate_lock(manifest))
    assert "(pkg/mod.py)" in error.message
    (manifest.root / "overlay" / "pkg" / "helper.py").write_text("drifted\n")
    assert "(pkg/helper.py, pkg/mod.py)" in refused(IntegrityError, lambda: migrate_lock(manifest)).message


def test_the_base_layer_with_a_bytecode_whiteout_target_elsewhere_is_not_stale(tmp_path):
    entries = base_entries() + [(f"{SOURCE}/pkg/__pycache__/modx.cpython-311.pyc", PYC, 0o644)]
    lock = create_lock(engine_with_base(entries), project(tmp_path))
    assert lock.files[1].stale_bytecode == ("pkg/__pycache__/mod.cpython-311.opt-1.pyc", "pkg/__pycache__/mod.cpython-311.pyc")


def test_the_base_config_and_layers_are_what_the_engine_holds():
    engine = engine_with_base()
    assert json.loads(engine.configs_by_id[engine.image_id_of(BASE_IMAGE)])["config"] == BASE_CONFIG["config"]
    assert engine.blobs[engine.require_image(BASE_IMAGE)["RootFS"]["Layers"][0]] == layer_tar(base_entries())


def test_a_file_created_by_one_patch_and_changed_by_the_next_is_created_by_the_first(tmp_path):
    manifest, changed = two_patch_project(tmp_path)
    assert pinning.first_creators(manifest) == {"pkg/helper.py": "0001"}
    lock = create_lock(engine_with_base(), manifest)
    assert [p.id for p in lock.patches] == ["0001", "0002"] and lock.patches[0].patch_id != lock.patches[1].patch_id
    assert lock.files[0].overlay_sha256 == sha256_hex(changed.encode()) and lock.files[0].base_sha256 is None
    entries = base_entries() + [(f"{SOURCE}/pkg/helper.py", HELPER.encode(), 0o644)]
    error = refused(PatchError, lambda: create_lock(engine_with_base(entries), manifest, rebase=True))
    assert "patch 0001 creates pkg/helper.py" in error.message


def test_a_truncated_save_of_the_base_is_refused_naming_the_base():
    engine = engine_with_base()
    engine.save_stream = lambda reference: iter([b"not a tar stream at all" * 40])
    layers = tuple(engine.require_image(BASE_IMAGE)["RootFS"]["Layers"])
    error = refused(BaseImageError, lambda: capture_base(engine, BASE_IMAGE, layers, frozenset()))
    assert error.exit_code == 6 and BASE_IMAGE in error.message
