"""`build` over a fake engine: the loaded image is the planned one, tagged after it verifies; every refusal names its cause."""

from __future__ import annotations

import errno
import os
import pytest

from kvbake.bake.adapters import builder
from kvbake.bake.adapters.builder import (DOCKER_BUILDER_SUFFIX, BaseOnEngine, Timings, build_image, build_with_docker, check_base,
                                          docker_build_context, load_and_verify, load_unit, plan_tree, write_thin_archive)
from kvbake.bake.adapters.pinning import create_lock
from kvbake.bake.core.derived_image import archive_members
from kvbake.bake.core.plan import make_plan, read_overlay
from kvbake.engines.core.identity import expected_id
from kvbake.digests import sha256_hex
from kvbake.errors import BaseImageError, IntegrityError, ResourceError
from kvbake.lock import read_lock
from kvbake.manifest import load_manifest
from tests.unit.bake_engine import BakeEngine
from tests.unit.bake_project import BASE_IMAGE, HELPER, MODULE, PATCHED, PYC, SOURCE, base_entries, engine_with_base, project
from tests.unit.message_words import says


@pytest.fixture()
def locked(tmp_path, monkeypatch):
    """A locked tiny project and the engine holding its base."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    manifest = project(tmp_path)
    engine = engine_with_base()
    create_lock(engine, manifest)
    engine.calls.clear()
    return manifest, engine


def the_plan(manifest):
    lock = read_lock(manifest)
    return make_plan(manifest, lock, read_overlay(manifest, lock))


def refused(error_type, call):
    with pytest.raises(error_type) as caught:
        call()
    return caught.value


def test_the_built_image_is_the_planned_one_tagged_with_its_files_patched_and_its_stale_bytecode_gone(locked):
    manifest, engine = locked
    plan = the_plan(manifest)
    built = build_image(engine, manifest)
    assert (built.reference, built.image_id, built.config_digest) == (plan.reference, plan.image_id, plan.image_id)
    assert built.expected is not None and built.expected.store_id == plan.image_id and built.plan == plan
    assert engine.tags[plan.reference] == plan.image_id
    inspect = engine.identify(plan.reference)
    assert inspect["RootFS"]["Layers"] == [*read_lock(manifest).base.diff_ids, plan.layer.diff_id]
    assert inspect["Config"]["Labels"]["org.kvbake.chain"] == plan.labels["org.kvbake.chain"]
    files = engine.filesystem(plan.reference)
    assert files[f"{SOURCE}/pkg/mod.py"][0] == PATCHED.encode() and files[f"{SOURCE}/pkg/helper.py"][0] == HELPER.encode()
    assert f"{SOURCE}/pkg/__pycache__/mod.cpython-311.pyc" not in files and f"{SOURCE}/pkg/__pycache__/other.cpython-311.pyc" in files
    assert built.archive_bytes > len(plan.layer.data)
    assert list(built.timings) == ["check-lock", "check-base", "extract", "patch", "compare", "switch-coverage", "assemble",
                                   "write-archive", "load-verify", "tag"]
    assert all(isinstance(v, float) and v >= 0 for v in built.timings.values())


def test_the_image_is_tagged_only_after_the_load_and_the_extract_container_is_removed(locked):
    manifest, engine = locked
    build_image(engine, manifest)
    kinds = [c[0] for c in engine.calls]
    assert kinds[0] == "ping", "the engine is asked first, so an unreachable one is named before anything else"
    assert kinds.index("load") < kinds.index("tag") and kinds.count("tag") == 1
    (load,) = [c for c in engine.calls if c[0] == "load"]
    assert load[1].startswith("kvbake-archive-") and load[1].endswith("/thin-image.tar"), "written in kvbake's own temporary folder"
    created = [c[2] for c in engine.calls if c[0] == "create"]
    assert len(created) == 1 and ("remove", created[0]) in engine.calls and engine.containers == {}
    assert [c[2] for c in engine.calls if c[0] == "copy_out"] == [f"/{SOURCE}/pkg/mod.py"], "only the base files the chain modifies"


def test_a_missing_base_is_refused_before_anything_is_loaded(locked):
    manifest, _ = locked
    engine = BakeEngine()
    error = refused(Exception, lambda: build_image(engine, manifest))
    assert BASE_IMAGE in str(error) and not [c for c in engine.calls if c[0] == "load"]


def test_a_base_tag_that_now_names_another_image_is_a_moved_tag(locked):
    manifest, _ = locked
    moved = engine_with_base(base_entries(MODULE + "# moved\n"))
    error = refused(BaseImageError, lambda: build_image(moved, manifest))
    assert error.exit_code == 6 and read_lock(manifest).base.config_digest in error.message and "rebase --to" in error.fix
    assert says(error.fix, "to keep the locked base") and says(error.fix, "pin base.image by digest)")
    assert not [c for c in moved.calls if c[0] in ("load", "tag")]


def test_a_base_under_another_reference_that_differs_from_the_lock_names_each_difference(locked):
    manifest, _ = locked
    lock = read_lock(manifest)
    other = engine_with_base(base_entries(MODULE + "# other\n"))
    other.tags["kvbake-test/elsewhere:1"] = other.tags.pop(BASE_IMAGE)
    other.images[other.image_id_of("kvbake-test/elsewhere:1")]["Architecture"] = "arm64"
    manifest.path.write_text(manifest.path.read_text().replace(BASE_IMAGE, "kvbake-test/elsewhere:1"))
    error = refused(BaseImageError, lambda: check_base(other, load_manifest(manifest.path), lock))
    assert error.exit_code == 6 and "kvbake-test/elsewhere:1" in error.message and other.label in error.message
    assert "config digest" in error.message and "platform linux/arm64" in error.message and "diff_ids" in error.message


def test_the_base_on_a_classic_store_has_no_store_manifest(locked):
    manifest, engine = locked
    base = check_base(engine, manifest, read_lock(manifest))
    assert base == BaseOnEngine(engine.profile(), None, engine.image_id_of(BASE_IMAGE))


def test_a_changed_base_file_is_refused_with_its_hash(locked):
    manifest, engine = locked
    lock = read_lock(manifest)
    engine.extra_files[engine.image_id_of(BASE_IMAGE)] = {f"{SOURCE}/pkg/mod.py": (b"changed\n", 0o640)}
    error = refused(IntegrityError, lambda: build_image(engine, manifest))
    changed = sha256_hex(b"changed\n")
    assert "pkg/mod.py" in error.message and f"sha256 {changed[:12]}…" in error.message
    assert f"{lock.files[1].base_sha256[:12]}…" in error.message
    assert says(error.fix, "the base image is not the one that was locked") and says(error.fix, "load the right one")
    assert engine.tags.get(the_plan(manifest).reference) is None


def test_a_base_file_gone_is_missing(locked):
    manifest, engine = locked
    engine.images[engine.image_id_of(BASE_IMAGE)]["RootFS"]["Layers"] = list(engine.images[engine.image_id_of(BASE_IMAGE)]["RootFS"]["Layers"])
    engine.extra_files[engine.image_id_of(BASE_IMAGE)] = {}
    original = engine.filesystem

    def without_module(reference):
        files = original(reference)
        files.pop(f"{SOURCE}/pkg/mod.py", None)
        return files

    engine.filesystem = without_module
    error = refused(IntegrityError, lambda: build_image(engine, manifest))
    assert "pkg/mod.py is missing" in error.message


def test_a_base_file_with_another_mode_is_refused_with_both_modes(locked):
    manifest, engine = locked
    engine.extra_files[engine.image_id_of(BASE_IMAGE)] = {f"{SOURCE}/pkg/mod.py": (MODULE.encode(), 0o600)}
    error = refused(IntegrityError, lambda: build_image(engine, manifest))
    owner = f"{os.getuid()}:{os.getgid()}"
    assert "pkg/mod.py" in error.message and f"0o600 {owner}" in error.message and f"0o640 {owner}" in error.message
    assert says(error.fix, "re-lock against this base after review")


def test_a_loaded_image_that_fails_verification_is_removed_unless_it_was_there_before(locked, tmp_path):
    manifest, engine = locked
    plan = the_plan(manifest)
    base = check_base(engine, manifest, read_lock(manifest))
    unit = load_unit(plan, base)
    archive = write_thin_archive(plan, unit.members, tmp_path)
    wrong = builder.ExpectedId(unit.expected.profile, unit.expected.config_digest, unit.expected.store_id)
    engine.identify = lambda reference: {**BakeEngine.identify(engine, reference), "Config": {"Labels": {}, "Env": []}}
    error = refused(IntegrityError, lambda: load_and_verify(engine, plan, archive, wrong))
    assert says(error.message, "the loaded image") and "label" in error.message and ("remove_image", plan.image_id) in engine.calls
    engine.calls.clear()
    engine.load(archive)
    refused(IntegrityError, lambda: load_and_verify(engine, plan, archive, wrong))
    assert not [c for c in engine.calls if c[0] == "remove_image"], "an image that was there before the load stays"


def test_a_load_that_leaves_no_image_is_an_integrity_error_naming_the_id(locked, tmp_path):
    manifest, engine = locked
    plan = the_plan(manifest)
    unit = load_unit(plan, check_base(engine, manifest, read_lock(manifest)))
    archive = write_thin_archive(plan, unit.members, tmp_path)
    engine.load = lambda archive: None
    error = refused(IntegrityError, lambda: load_and_verify(engine, plan, archive, unit.expected))
    assert f"image {plan.image_id[:19]} (" in error.message and "containerd" in error.fix


def test_the_classic_load_unit_carries_the_config_and_the_thin_layer_and_predicts_the_config_digest(locked):
    manifest, engine = locked
    plan = the_plan(manifest)
    unit = load_unit(plan, check_base(engine, manifest, read_lock(manifest)))
    lock = plan.lock
    assert unit.members == archive_members(plan.config_bytes, list(lock.base.diff_ids), plan.layer.data)
    assert unit.expected == expected_id(engine.profile(), plan.config_bytes, None) and unit.expected.store_id == plan.image_id


def test_a_full_disk_while_writing_the_archive_is_a_resource_error_and_leaves_no_file(locked, tmp_path, monkeypatch):
    manifest, _ = locked
    folder = tmp_path / "archive"
    folder.mkdir()
    plan = the_plan(manifest)

    def full(handle, members, mtime):
        handle.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(builder, "write_archive", full)
    error = refused(ResourceError, lambda: write_thin_archive(plan, [], folder))
    assert folder.name in error.message and list(folder.iterdir()) == [] and "point TMPDIR at a larger disk" in error.fix
    assert says(error.fix, "free disk space") and says(error.fix, "then rebuild")
    monkeypatch.setattr(builder, "write_archive", lambda h, m, t: (_ for _ in ()).throw(OSError(errno.EDQUOT, "quota")))
    assert isinstance(refused(ResourceError, lambda: write_thin_archive(plan, [], folder)), ResourceError)
    monkeypatch.setattr(builder, "write_archive", lambda h, m, t: (_ for _ in ()).throw(OSError(errno.EACCES, "denied")))
    assert refused(OSError, lambda: write_thin_archive(plan, [], folder)).errno == errno.EACCES
    assert list(folder.iterdir()) == []


def test_the_archive_holds_the_members_with_the_locked_epoch(locked, tmp_path):
    import tarfile

    manifest, _ = locked
    plan = the_plan(manifest)
    archive = write_thin_archive(plan, [("a", b"1"), ("b", b"22")], tmp_path)
    assert archive == tmp_path / "thin-image.tar"
    with tarfile.open(archive) as tar:
        assert [(m.name, m.size, m.mtime) for m in tar] == [("a", 1, 1700000000), ("b", 2, 1700000000)]


def test_a_phase_is_timed_even_when_it_fails():
    timings = Timings()
    with pytest.raises(RuntimeError):
        with timings.phase("broken"):
            raise RuntimeError("x")
    with timings.phase("fine"):
        pass
    assert list(timings.phases) == ["broken", "fine"] and all(v >= 0 for v in timings.phases.values())


def test_the_plan_tree_is_the_patched_files(locked):
    plan = the_plan(locked[0])
    assert plan_tree(plan) == {"pkg/helper.py": HELPER.encode(), "pkg/mod.py": PATCHED.encode()}


def test_the_docker_build_context_holds_the_dockerfile_from_the_local_base_and_the_locked_files_with_their_modes(locked, tmp_path):
    manifest, engine = locked
    plan = the_plan(manifest)
    tmp_path = tmp_path / "context"
    tmp_path.mkdir()
    dockerfile = docker_build_context(plan, tmp_path, "sha256:" + "b" * 64)
    assert dockerfile == tmp_path / "Dockerfile.overlay" and "FROM sha256:" + "b" * 64 in dockerfile.read_text()
    module = tmp_path / "overlay" / "pkg" / "mod.py"
    assert module.read_text() == PATCHED and module.stat().st_mode & 0o777 == 0o640
    assert (tmp_path / "overlay" / "pkg" / "helper.py").stat().st_mode & 0o777 == 0o644
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == [
        "Dockerfile.overlay", "overlay/pkg/helper.py", "overlay/pkg/mod.py"]


def test_the_docker_builder_builds_from_the_checked_base_and_verifies_deep(locked):
    manifest, engine = locked
    plan = the_plan(manifest)
    built = build_with_docker(engine, manifest)
    reference = plan.reference + DOCKER_BUILDER_SUFFIX
    assert DOCKER_BUILDER_SUFFIX == "-dockerbuild" and built.reference == reference
    assert built.image_id == engine.tags[reference] and built.archive_bytes == 0 and built.expected is None
    (build,) = [c for c in engine.calls if c[0] == "build"]
    assert f"FROM {engine.image_id_of(BASE_IMAGE)}\n" in build[2] and build[3] == reference
    assert build[1].startswith("kvbake-context-"), "the build context is kvbake's own temporary folder"
    assert list(built.timings)[-2:] == ["docker-build", "verify-deep"]
    assert not [c for c in engine.calls if c[0] == "untag"]


def test_a_docker_built_image_that_fails_deep_verify_is_untagged(locked, monkeypatch):
    manifest, engine = locked
    build = engine.legacy_build

    def without_whiteouts(context, dockerfile, tag):
        text = dockerfile.read_text()
        dockerfile.write_text("\n".join(line for line in text.splitlines() if not line.startswith("RUN ")) + "\n")
        return build(context, dockerfile, tag)

    engine.legacy_build = without_whiteouts
    error = refused(IntegrityError, lambda: build_with_docker(engine, manifest))
    reference = the_plan(manifest).reference + DOCKER_BUILDER_SUFFIX
    assert "stale bytecode" in error.message and ("untag", reference) in engine.calls and reference not in engine.tags


def test_a_docker_build_failure_other_than_verification_leaves_the_tag_alone(locked):
    manifest, engine = locked

    def broken(context, dockerfile, tag):
        raise builder.BaseImageError("the build broke", "fix")

    engine.legacy_build = broken
    refused(BaseImageError, lambda: build_with_docker(engine, manifest))
    assert not [c for c in engine.calls if c[0] == "untag"]


def test_the_base_bytecode_other_modules_own_stays_in_the_docker_built_image(locked):
    manifest, engine = locked
    built = build_with_docker(engine, manifest)
    files = engine.filesystem(built.reference)
    assert files[f"{SOURCE}/pkg/__pycache__/other.cpython-311.pyc"][0] == PYC
    assert f"{SOURCE}/pkg/__pycache__/mod.cpython-311.opt-1.pyc" not in files


def test_the_docker_build_starts_from_the_local_base_even_when_the_lock_knows_its_registry_digest(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    manifest = project(tmp_path)
    engine = engine_with_base()
    engine.images[engine.image_id_of(BASE_IMAGE)]["RepoDigests"] = ["kvbake-test/tiny@sha256:" + "e" * 64]
    assert create_lock(engine, manifest).base.repo_digest == "sha256:" + "e" * 64
    build_with_docker(engine, manifest)
    (build,) = [c for c in engine.calls if c[0] == "build"]
    assert f"FROM {engine.image_id_of(BASE_IMAGE)}\n" in build[2] and "@sha256:" not in build[2]


def test_the_loaded_image_must_have_the_thin_layer_the_config_digest_and_the_predicted_id(locked):
    from kvbake.bake.adapters.builder import expectation
    from kvbake.bake.core.image_checks import Expectation
    from kvbake.engines.core.detection import EngineProfile
    from kvbake.engines.core.identity import ExpectedId
    from kvbake.bake.core.provenance import switch_names

    manifest, _ = locked
    plan = the_plan(manifest)
    for profile, meaning in ((EngineProfile("26.1.5", "classic", "overlay2"), "config digest"),
                             (EngineProfile("26.1.5", "containerd", "overlayfs"), "manifest digest")):
        expected = ExpectedId(profile, plan.image_id, "sha256:" + "5" * 64)
        assert expectation(plan, expected) == Expectation(plan.lock.base.diff_ids, plan.image_labels(), switch_names(plan.manifest),
                                                          plan.layer.diff_id, plan.image_id, store_id="sha256:" + "5" * 64,
                                                          id_meaning=meaning)


def test_a_disk_too_full_to_create_the_archive_is_a_resource_error(locked, tmp_path, monkeypatch):
    plan = the_plan(locked[0])

    def no_room(path, mode):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(builder, "open", no_room, raising=False)
    error = refused(ResourceError, lambda: write_thin_archive(plan, [], tmp_path))
    assert error.exit_code == ResourceError.exit_code and not (tmp_path / "thin-image.tar").exists()


def test_base_files_in_the_same_and_in_deeper_folders_are_all_extracted_and_patched(tmp_path, monkeypatch):
    from tests.unit.bake_project import PATCH, modification

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    deep, other = "X = 1\n", "Y = 1\n"
    patch = PATCH + modification("lib/sub/deep.py", deep, "X = 2\n") + modification("pkg/other.py", other, "Y = 2\n")
    manifest = project(tmp_path, patch)
    entries = base_entries() + [(f"{SOURCE}/pkg/other.py", other.encode(), 0o644), (f"{SOURCE}/lib", None, 0o755),
                                (f"{SOURCE}/lib/sub", None, 0o755), (f"{SOURCE}/lib/sub/deep.py", deep.encode(), 0o644)]
    engine = engine_with_base(entries)
    create_lock(engine, manifest)
    built = build_image(engine, manifest)
    files = engine.filesystem(built.reference)
    assert files[f"{SOURCE}/lib/sub/deep.py"][0] == b"X = 2\n" and files[f"{SOURCE}/pkg/other.py"][0] == b"Y = 2\n"
    assert files[f"{SOURCE}/pkg/mod.py"][0] == PATCHED.encode()


def test_a_patch_edited_after_the_lock_is_refused_by_its_pinned_hash(locked):
    from kvbake.bake.adapters.builder import Timings, rebuild_tree
    from kvbake.errors import PatchError
    from tests.unit.bake_project import creation, modification

    manifest, engine = locked
    edited = modification("pkg/mod.py", MODULE, PATCHED.replace("return 1", "return 5")) + creation("pkg/helper.py", HELPER)
    manifest.chain[0].path.write_bytes(edited)
    error = refused(PatchError, lambda: rebuild_tree(engine, manifest, read_lock(manifest), Timings()))
    assert "patch 0001" in error.message and "differs from the lock" in error.message
