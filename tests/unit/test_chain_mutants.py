"""What each chain refusal tells the operator to do, and how a refusal lists several patches or files."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbake.bake.core.chain import apply_chain, read_patch
from kvbake.errors import PatchError
from kvbake.lock import LockedPatch, PatchFileHashes
from tests.unit.helpers_manifest import make_lock, sha
from tests.unit.message_words import says
from tests.unit.test_chain import BASE, CREATE, MODIFY, PATCHED, FakeApplier, base_tree, locked, project

WRITES_PATCHED = {"0001-modify.patch": {"pkg/mod.py": PATCHED}}


def refused(call) -> PatchError:
    with pytest.raises(PatchError) as caught:
        call()
    assert caught.value.exit_code == 5
    return caught.value


def test_a_file_gone_after_its_patch_asks_for_a_report(tmp_path: Path) -> None:
    class Deleting(FakeApplier):
        def apply_strictly(self, label: str, patch: Path, tree: Path) -> None:
            (tree / "pkg" / "mod.py").unlink()

    manifest = project(tmp_path, {"0001-modify.patch": MODIFY})
    error = refused(lambda: apply_chain(manifest, base_tree(tmp_path), Deleting()))
    assert says(error.message, "pkg/mod.py") and says(error.fix, "report this")


def test_creating_a_file_that_exists_says_to_drop_the_duplicate(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-create.patch": CREATE})
    tree = base_tree(tmp_path)
    (tree / "pkg" / "helper.py").write_text("already here\n")
    error = refused(lambda: apply_chain(manifest, tree, FakeApplier()))
    assert says(error.message, "pkg/helper.py") and says(error.fix, "drop the duplicate patch")


def test_modifying_a_file_absent_from_the_base_says_to_check_the_source_root(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY})
    tree = tmp_path / "empty-tree"
    tree.mkdir()
    error = refused(lambda: apply_chain(manifest, tree, FakeApplier()))
    assert says(error.message, "pkg/mod.py") and says(error.fix, "check base.source_root")


def test_a_touched_path_that_is_a_directory_says_the_chain_edits_only_regular_files(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY})
    tree = base_tree(tmp_path)
    (tree / "pkg" / "mod.py").unlink()
    (tree / "pkg" / "mod.py").mkdir()
    error = refused(lambda: apply_chain(manifest, tree, FakeApplier()))
    assert says(error.message, "a directory") and says(error.fix, "may only edit and create regular files")


def test_a_patch_whose_sha256_differs_from_the_lock_says_to_restore_it(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY})
    lock = locked(manifest, [()], sha256s=["e" * 64])
    error = refused(lambda: apply_chain(manifest, base_tree(tmp_path), FakeApplier(WRITES_PATCHED), lock))
    assert says(error.message, "e" * 12) and says(error.fix, "restore the pinned patch file")


def test_a_file_the_lock_does_not_list_says_to_re_lock(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY})
    lock = locked(manifest, [(PatchFileHashes("pkg/other.py", "modify", None, "1" * 64),)])
    error = refused(lambda: apply_chain(manifest, base_tree(tmp_path), FakeApplier(WRITES_PATCHED), lock))
    assert says(error.message, "pkg/mod.py") and says(error.fix, "run python build.py lock")


def test_another_after_hash_says_to_restore_or_re_lock(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY})
    lock = locked(manifest, [(PatchFileHashes("pkg/mod.py", "modify", sha(BASE.encode()), "f" * 64),)])
    error = refused(lambda: apply_chain(manifest, base_tree(tmp_path), FakeApplier(WRITES_PATCHED), lock))
    assert says(error.message, "f" * 12) and says(error.fix, "re-lock")


def test_files_the_patch_no_longer_touches_are_listed_and_the_fix_is_to_re_lock(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY})
    lock = locked(manifest, [(PatchFileHashes("pkg/mod.py", "modify", sha(BASE.encode()), sha(PATCHED.encode())),
                              PatchFileHashes("pkg/other.py", "modify", None, "1" * 64),
                              PatchFileHashes("pkg/third.py", "modify", None, "2" * 64))])
    error = refused(lambda: apply_chain(manifest, base_tree(tmp_path), FakeApplier(WRITES_PATCHED), lock))
    assert says(error.message, "no longer touches pkg/other.py, pkg/third.py") and says(error.fix, "run python build.py lock")


def test_a_lock_pinning_other_patches_lists_both_sequences(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY, "0002-create.patch": CREATE})
    lock = make_lock(patches=tuple(LockedPatch(pid, f"patches/{pid}.patch", "0" * 64, "0" * 40, ()) for pid in ("0009", "0008")))
    fake = FakeApplier()
    error = refused(lambda: apply_chain(manifest, base_tree(tmp_path), fake, lock))
    assert says(error.message, "0009, 0008") and says(error.message, "0001, 0002") and fake.labels == []


def test_a_missing_patch_file_says_to_restore_or_import_it(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY})
    manifest.chain[0].path.unlink()
    error = refused(lambda: read_patch(manifest.chain[0]))
    assert says(error.message, "patches/0001-modify.patch") and says(error.fix, "python build.py lock --donor DIR")


def test_a_patch_path_that_is_a_directory_says_to_point_at_the_file(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY})
    manifest.chain[0].path.unlink()
    manifest.chain[0].path.mkdir()
    error = refused(lambda: read_patch(manifest.chain[0]))
    assert says(error.message, "a directory") and says(error.fix, "point chain[].file at the patch file")


def test_a_patch_that_is_not_utf8_says_to_save_it_as_utf8(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY.replace(b"line 6 patched", b"line 6 \xff")})
    error = refused(lambda: read_patch(manifest.chain[0]))
    assert says(error.message, "not UTF-8 text") and says(error.fix, "save the patch as UTF-8")
