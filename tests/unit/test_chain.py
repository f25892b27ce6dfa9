"""Tests of the chain: strict application with the real git on tiny trees, and the pure paths with a fake applier."""

from __future__ import annotations

import difflib
import os
import subprocess
from pathlib import Path

import pytest

from kvbake.bake.core.chain import apply_chain, first_touches, read_patch, read_patched_tree
from kvbake.errors import PatchError
from kvbake.bake.adapters.gitapply import GitApplier, check_strict_output, patch_id
from kvbake.lock import LockedPatch, PatchFileHashes
from kvbake.manifest import Manifest
from tests.unit.bake_project import creation, modification as unified
from tests.unit.helpers_manifest import make_lock, minimal_document, sha, tiny_manifest

BASE = "".join(f"line {i}\n" for i in range(1, 13))
PATCHED = BASE.replace("line 6\n", "line 6 patched\n")
HELPER = "def helper():\n    return 1\n"


MODIFY = unified("pkg/mod.py", BASE, PATCHED)
CREATE = creation("pkg/helper.py", HELPER)


def project(tmp_path: Path, patches: dict[str, bytes], chain: list[tuple[str, str]] | None = None) -> Manifest:
    """A manifest whose chain is `chain` (id, file) or one entry per patch, in order."""
    document = minimal_document()
    entries = chain or [(Path(name).name.split("-")[0], name) for name in patches]
    document["chain"] = [{"id": pid, "file": f"patches/{name}", "role": "feature"} for pid, name in entries]
    return tiny_manifest(tmp_path / "project", document, {f"patches/{name}": data for name, data in patches.items()})


def base_tree(parent: Path, name: str = "tree", text: str = BASE) -> Path:
    tree = parent / name
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "mod.py").write_text(text)
    return tree


def locked(manifest: Manifest, files_by_patch: list[tuple[PatchFileHashes, ...]], sha256s: list[str] | None = None):
    patches = tuple(
        LockedPatch(p.id, p.file, (sha256s or [sha(p.path.read_bytes()) for p in manifest.chain])[i], "0" * 40, files)
        for i, (p, files) in enumerate(zip(manifest.chain, files_by_patch))
    )
    return make_lock(manifest_sha256=manifest.sha256, patches=patches)


def test_a_clean_chain_applies_and_records_before_and_after(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY, "0002-create.patch": CREATE})
    tree = base_tree(tmp_path)
    steps = apply_chain(manifest, tree, GitApplier())
    assert [s.patch.id for s in steps] == ["0001", "0002"]
    assert steps[0].sha256 == sha(MODIFY)
    assert steps[0].files == (PatchFileHashes("pkg/mod.py", "modify", sha(BASE.encode()), sha(PATCHED.encode())),)
    assert steps[1].files == (PatchFileHashes("pkg/helper.py", "create", None, sha(HELPER.encode())),)
    assert (tree / "pkg" / "mod.py").read_text() == PATCHED
    assert (tree / "pkg" / "helper.py").read_text() == HELPER


def test_a_chain_matching_its_lock_applies(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY})
    lock = locked(manifest, [(PatchFileHashes("pkg/mod.py", "modify", sha(BASE.encode()), sha(PATCHED.encode())),)])
    steps = apply_chain(manifest, base_tree(tmp_path), GitApplier(), lock)
    assert steps[0].files == lock.patches[0].files


def test_an_offset_patch_is_refused_and_leaves_the_tree_alone(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY})
    shifted = "extra a\nextra b\n" + BASE
    tree = base_tree(tmp_path, text=shifted)
    with pytest.raises(PatchError) as caught:
        apply_chain(manifest, tree, GitApplier())
    text = caught.value.one_line()
    assert text.startswith("patch 0001 (1/1): applies only with an offset (Hunk #1 succeeded at")
    assert "offset 2 lines" in text
    assert caught.value.exit_code == 5
    assert (tree / "pkg" / "mod.py").read_text() == shifted


def test_a_patch_that_would_need_fuzz_does_not_apply(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY})
    tree = base_tree(tmp_path, text=BASE.replace("line 4\n", "line 4 changed\n"))
    with pytest.raises(PatchError) as caught:
        apply_chain(manifest, tree, GitApplier())
    assert caught.value.exit_code == 5
    assert "patch 0001 (1/1)" in caught.value.message and "patch failed: pkg/mod.py:3" in caught.value.message


def test_the_same_patch_twice_under_two_ids_is_already_applied(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY}, chain=[("0001", "0001-modify.patch"), ("0002", "0001-modify.patch")])
    with pytest.raises(PatchError) as caught:
        apply_chain(manifest, base_tree(tmp_path), GitApplier())
    assert caught.value.exit_code == 5 and caught.value.message.startswith("patch 0002 (2/2): ")
    assert "already applied" in caught.value.message and "after patch 0001" in caught.value.message


def test_a_reversed_patch_is_named(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-reversed.patch": unified("pkg/mod.py", PATCHED, BASE)})
    with pytest.raises(PatchError, match=r"patch 0001 \(1/1\): is reversed, or its change is already in the base image"):
        apply_chain(manifest, base_tree(tmp_path), GitApplier())


def test_another_after_hash_in_the_lock_names_the_patch_and_the_file(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY})
    lock = locked(manifest, [(PatchFileHashes("pkg/mod.py", "modify", sha(BASE.encode()), "f" * 64),)])
    with pytest.raises(PatchError) as caught:
        apply_chain(manifest, base_tree(tmp_path), GitApplier(), lock)
    assert caught.value.one_line().startswith(
        f"patch 0001 (1/1): pkg/mod.py has sha256 {sha(PATCHED.encode())[:12]}… after the patch, the lock says {'f' * 12}…")


def test_another_patch_sha256_differs_from_the_lock(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY})
    lock = locked(manifest, [()], sha256s=["e" * 64])
    tree = base_tree(tmp_path)
    with pytest.raises(PatchError, match=rf"patch 0001 \(1/1\): sha256 {sha(MODIFY)[:12]}… differs from the lock's {'e' * 12}…"):
        apply_chain(manifest, tree, GitApplier(), lock)
    assert (tree / "pkg" / "mod.py").read_text() == BASE


def test_a_missing_patch_file_is_named(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY})
    manifest.chain[0].path.unlink()
    with pytest.raises(PatchError, match="patch 0001: file patches/0001-modify.patch is missing"):
        apply_chain(manifest, base_tree(tmp_path), GitApplier())


def test_creating_a_file_that_exists_is_refused(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-create.patch": CREATE})
    tree = base_tree(tmp_path)
    (tree / "pkg" / "helper.py").write_text("already here\n")
    with pytest.raises(PatchError, match=r"patch 0001 \(1/1\): creates pkg/helper.py, which already exists"):
        apply_chain(manifest, tree, GitApplier())


def test_the_chain_ignores_an_enclosing_git_repository(tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    outer.mkdir()
    subprocess.run(["git", "init", "-q", str(outer)], check=True, env=clean_git_env(tmp_path))
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY})
    control = base_tree(outer, "control")
    plain = subprocess.run(["git", "apply", "-v", str(manifest.chain[0].path)], cwd=control, env=clean_git_env(tmp_path), capture_output=True, text=True)
    assert "Skipped patch" in plain.stdout + plain.stderr
    assert (control / "pkg" / "mod.py").read_text() == BASE
    tree = base_tree(outer)
    apply_chain(manifest, tree, GitApplier())
    assert (tree / "pkg" / "mod.py").read_text() == PATCHED


def clean_git_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "HOME": str(home)})
    return env


def test_patch_id_ignores_line_numbers(tmp_path: Path) -> None:
    (tmp_path / "a.patch").write_bytes(MODIFY)
    (tmp_path / "b.patch").write_bytes(unified("pkg/mod.py", "x\ny\n" + BASE, "x\ny\n" + PATCHED))
    (tmp_path / "c.patch").write_bytes(unified("pkg/mod.py", BASE, BASE.replace("line 7\n", "line 7 patched\n")))
    tree = base_tree(tmp_path)
    first = patch_id(tmp_path / "a.patch", tree)
    assert len(first) == 40
    assert patch_id(tmp_path / "b.patch", tree) == first
    assert patch_id(tmp_path / "c.patch", tree) != first


@pytest.mark.parametrize(("output", "fragment"), [
    ("Checking patch x.py...\nSkipped patch 'x.py'.\n", "git skipped a section (Skipped patch 'x.py'.)"),
    ("Hunk #2 succeeded at 40 (offset 1 line).\n", "applies only with an offset (Hunk #2 succeeded at 40 (offset 1 line))"),
    ("Hunk #1 succeeded at 7 (offset -3 lines).\n", "applies only with an offset (Hunk #1 succeeded at 7 (offset -3 lines))"),
    ("Hunk #1 succeeded at 7 with fuzz 1.\n", "applies only with fuzz (with fuzz)"),
])
def test_check_strict_output_refuses_skips_offsets_and_fuzz(output: str, fragment: str) -> None:
    with pytest.raises(PatchError) as caught:
        check_strict_output("patch 0001 (1/1)", output)
    assert caught.value.one_line().startswith(f"patch 0001 (1/1): {fragment}")


def test_check_strict_output_accepts_a_clean_apply() -> None:
    check_strict_output("patch 0001 (1/1)", "Checking patch pkg/mod.py...\nApplied patch pkg/mod.py cleanly.\n")


class FakeApplier:
    """Writes the given after-bytes for each patch file name, or fails; records every label."""

    def __init__(self, writes: dict[str, dict[str, str]] | None = None, fail: bool = False, reverses: bool = False) -> None:
        self.writes, self.fail, self.reverses = writes or {}, fail, reverses
        self.labels: list[str] = []

    def apply_strictly(self, label: str, patch: Path, tree: Path) -> None:
        self.labels.append(label)
        if self.fail:
            raise PatchError(f"{label}: does not apply (fake)")
        for path, text in self.writes.get(patch.name, {}).items():
            (tree / path).write_text(text)

    def applies_reversed(self, patch: Path, tree: Path) -> bool:
        return self.reverses


def test_every_patch_gets_a_numbered_label(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY, "0002-create.patch": CREATE})
    fake = FakeApplier({"0001-modify.patch": {"pkg/mod.py": PATCHED}, "0002-create.patch": {"pkg/helper.py": HELPER}})
    steps = apply_chain(manifest, base_tree(tmp_path), fake)
    assert fake.labels == ["patch 0001 (1/2)", "patch 0002 (2/2)"]
    assert [f.after for s in steps for f in s.files] == [sha(PATCHED.encode()), sha(HELPER.encode())]


def test_a_failure_that_does_not_reverse_keeps_the_appliers_error(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY})
    with pytest.raises(PatchError) as caught:
        apply_chain(manifest, base_tree(tmp_path), FakeApplier(fail=True))
    assert caught.value.exit_code == 5
    assert "patch 0001 (1/1)" in caught.value.message and "(fake)" in caught.value.message
    assert "reversed" not in caught.value.message


def test_a_failure_that_reverses_without_an_earlier_patch_is_reversed(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY})
    with pytest.raises(PatchError) as caught:
        apply_chain(manifest, base_tree(tmp_path), FakeApplier(fail=True, reverses=True))
    assert caught.value.exit_code == 5
    assert "patch 0001 (1/1)" in caught.value.message and "is reversed" in caught.value.message
    assert "git diff a/ b/" in caught.value.fix


def test_modifying_a_file_absent_from_the_base_is_refused_before_applying(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY})
    tree = tmp_path / "empty-tree"
    tree.mkdir()
    fake = FakeApplier()
    with pytest.raises(PatchError, match=r"patch 0001 \(1/1\): modifies pkg/mod.py, which is not in the base image's source root"):
        apply_chain(manifest, tree, fake)
    assert fake.labels == []


def test_a_lock_for_another_patch_id_is_refused(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY})
    lock = make_lock(patches=(LockedPatch("0009", "patches/0001-modify.patch", sha(MODIFY), "0" * 40, ()),))
    with pytest.raises(PatchError, match="the lock pins patches 0009 but the chain is 0001"):
        apply_chain(manifest, base_tree(tmp_path), FakeApplier(), lock)


def test_a_file_the_lock_does_not_list_is_refused(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY})
    lock = locked(manifest, [(PatchFileHashes("pkg/other.py", "modify", None, "1" * 64),)])
    with pytest.raises(PatchError, match=r"touches pkg/mod.py, which the lock does not list for it"):
        apply_chain(manifest, base_tree(tmp_path), FakeApplier({"0001-modify.patch": {"pkg/mod.py": PATCHED}}), lock)


def test_a_file_the_lock_lists_but_the_patch_no_longer_touches_is_refused(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY})
    lock = locked(manifest, [(PatchFileHashes("pkg/mod.py", "modify", sha(BASE.encode()), sha(PATCHED.encode())),
                              PatchFileHashes("pkg/other.py", "modify", None, "1" * 64))])
    with pytest.raises(PatchError, match=r"patch 0001 \(1/1\): no longer touches pkg/other.py"):
        apply_chain(manifest, base_tree(tmp_path), FakeApplier({"0001-modify.patch": {"pkg/mod.py": PATCHED}}), lock)


def test_first_touches_records_how_the_chain_first_meets_each_path(tmp_path: Path) -> None:
    again = unified("pkg/helper.py", HELPER, HELPER + "VALUE = 2\n")
    manifest = project(tmp_path, {"0001-create.patch": CREATE, "0002-modify.patch": MODIFY, "0003-again.patch": again})
    assert first_touches(manifest) == {"pkg/helper.py": "create", "pkg/mod.py": "modify"}
    data, changes = read_patch(manifest.chain[0])
    assert data == CREATE
    assert [c.path for c in changes] == ["pkg/helper.py"]


def test_a_lock_with_fewer_patches_than_the_chain_is_a_typed_error(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY})
    with pytest.raises(PatchError) as caught:
        apply_chain(manifest, base_tree(tmp_path), FakeApplier({"0001-modify.patch": {"pkg/mod.py": PATCHED}}), make_lock(patches=()))
    assert caught.value.exit_code == 5
    assert "the chain is 0001" in caught.value.message and "build.py lock" in caught.value.fix


PLAIN_MODIFY = "".join(difflib.unified_diff(BASE.splitlines(keepends=True), PATCHED.splitlines(keepends=True),
                                            "vllm.orig/pkg/mod.py\t2024-05-01 10:00:00.000000000 +0000",
                                            "vllm/pkg/mod.py\t2024-05-02 10:00:00.000000000 +0000", n=3, lineterm="\n")).encode()
SYMLINK = (b"diff --git a/pkg/link.py b/pkg/link.py\nnew file mode 120000\nindex 0000000..48980ad\n--- /dev/null\n+++ b/pkg/link.py\n"
           b"@@ -0,0 +1 @@\n+../../secret\n\\ No newline at end of file\n")


def test_a_plain_diff_u_patch_applies_like_its_git_form(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-plain.patch": PLAIN_MODIFY})
    tree = base_tree(tmp_path)
    steps = apply_chain(manifest, tree, GitApplier())
    assert steps[0].files == (PatchFileHashes("pkg/mod.py", "modify", sha(BASE.encode()), sha(PATCHED.encode())),)
    assert (tree / "pkg" / "mod.py").read_text() == PATCHED


def test_a_plain_diff_has_the_patch_id_of_its_git_form(tmp_path: Path) -> None:
    (tmp_path / "plain.patch").write_bytes(PLAIN_MODIFY)
    (tmp_path / "git.patch").write_bytes(MODIFY)
    tree = base_tree(tmp_path)
    assert patch_id(tmp_path / "plain.patch", tree) == patch_id(tmp_path / "git.patch", tree)


def test_a_symlink_patch_is_refused_before_anything_is_applied(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("registry password\n")
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY, "0002-link.patch": SYMLINK})
    tree = base_tree(tmp_path)
    fake = FakeApplier({"0001-modify.patch": {"pkg/mod.py": PATCHED}})
    with pytest.raises(PatchError) as caught:
        apply_chain(manifest, tree, fake)
    assert caught.value.exit_code == 5
    assert all(field in caught.value.message for field in ("patch 0002", "pkg/link.py", "symlink", "120000"))
    assert fake.labels == []
    assert not (tree / "pkg" / "link.py").exists() and (tree / "pkg" / "mod.py").read_text() == BASE


class LinkingApplier(FakeApplier):
    """Replaces each touched file by a symlink to `target` (what git apply does for a mode 120000 section)."""

    def __init__(self, target: Path) -> None:
        super().__init__()
        self.target = target

    def apply_strictly(self, label: str, patch: Path, tree: Path) -> None:
        self.labels.append(label)
        (tree / "pkg" / "mod.py").unlink()
        (tree / "pkg" / "mod.py").symlink_to(self.target)


def test_a_touched_file_that_became_a_symlink_is_never_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("registry password\n")
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY})
    with pytest.raises(PatchError) as caught:
        apply_chain(manifest, base_tree(tmp_path), LinkingApplier(secret))
    assert caught.value.exit_code == 5
    assert caught.value.one_line().startswith("patch 0001 (1/1): pkg/mod.py in the patched tree is a symlink, not a regular file")


@pytest.mark.parametrize(("make", "kind"), [
    (lambda tree, out: (tree / "pkg" / "mod.py").unlink() or (tree / "pkg" / "mod.py").symlink_to(out / "secret"), "is a symlink"),
    (lambda tree, out: (tree / "pkg" / "mod.py").unlink() or (tree / "pkg" / "mod.py").mkdir(), "is a directory"),
    (lambda tree, out: (tree / "pkg" / "mod.py").unlink() or os.mkfifo(tree / "pkg" / "mod.py"), "is a named pipe"),
    (lambda tree, out: (tree / "pkg").rename(out / "moved") and (tree / "pkg").symlink_to(out / "moved"), "is below a symlink (pkg)"),
], ids=["symlink", "directory", "fifo", "parent-symlink"])
def test_a_touched_path_that_is_not_a_regular_file_is_refused_before_applying(tmp_path: Path, make, kind: str) -> None:
    (tmp_path / "secret").write_text("registry password\n")
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY})
    tree = base_tree(tmp_path)
    make(tree, tmp_path)
    fake = FakeApplier()
    with pytest.raises(PatchError) as caught:
        apply_chain(manifest, tree, fake)
    assert caught.value.exit_code == 5
    assert caught.value.one_line().startswith(f"patch 0001 (1/1): pkg/mod.py in the patched tree {kind}, not a regular file")
    assert fake.labels == []


def test_read_patched_tree_reads_regular_files_and_refuses_links(tmp_path: Path) -> None:
    tree = base_tree(tmp_path)
    assert read_patched_tree(tree, ["pkg/mod.py"]) == {"pkg/mod.py": BASE.encode()}
    (tree / "pkg" / "link.py").symlink_to(tree / "pkg" / "mod.py")
    with pytest.raises(PatchError, match="the patched tree: pkg/link.py in the patched tree is a symlink"):
        read_patched_tree(tree, ["pkg/link.py"])
    with pytest.raises(PatchError, match="the patched tree: pkg/gone.py is missing after the chain"):
        read_patched_tree(tree, ["pkg/gone.py"])


def test_a_patch_that_leaves_its_file_missing_is_refused(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY})
    tree = base_tree(tmp_path)

    class Deleting(FakeApplier):
        def apply_strictly(self, label: str, patch: Path, tree: Path) -> None:
            (tree / "pkg" / "mod.py").unlink()

    with pytest.raises(PatchError) as caught:
        apply_chain(manifest, tree, Deleting())
    assert caught.value.exit_code == 5
    assert "patch 0001 (1/1)" in caught.value.message and "pkg/mod.py is missing" in caught.value.message


def test_a_patch_file_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY.replace(b"line 6 patched", b"line 6 \xff")})
    with pytest.raises(PatchError, match=r"not UTF-8 text \(byte \d+\)") as caught:
        read_patch(manifest.chain[0])
    assert caught.value.exit_code == 5
    assert "patch 0001" in caught.value.message and "patches/0001-modify.patch" in caught.value.message


def test_a_patch_path_that_is_a_directory_is_refused(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY})
    manifest.chain[0].path.unlink()
    manifest.chain[0].path.mkdir()
    with pytest.raises(PatchError, match="patch 0001: patches/0001-modify.patch is a directory, not a patch file"):
        read_patch(manifest.chain[0])


def test_git_applies_the_normalized_patch_not_the_raw_file(tmp_path: Path) -> None:
    """A trailing section git would read but the parse drops (text after the last hunk) never reaches git."""
    manifest = project(tmp_path, {"0001-modify.patch": MODIFY + b"-- \n2.39.5\n"})
    tree = base_tree(tmp_path)
    apply_chain(manifest, tree, GitApplier())
    assert (tree / "pkg" / "mod.py").read_text() == PATCHED
