"""One patch moved onto a new base with real git: clean, offset, merged, conflicted hunks and the scratch-tree helpers."""

from __future__ import annotations

import difflib
from types import SimpleNamespace

import pytest
import unidiff

from kvbake.digests import sha256_hex
from kvbake.errors import PatchError
from kvbake.rebase.adapters import patch_tree
from kvbake.rebase.adapters.rebaser import OldStep, applies_to, digest, hunk_header, one_hunk, refresh
from kvbake.rebase.core.apply_report import HunkApplied
from kvbake.rebase.core.report import PatchedFile

OLD = [f"line {n}" for n in range(1, 21)]
PATCHED = [{3: "line three", 15: "line fifteen"}.get(n, f"line {n}") for n in range(1, 21)]


def text(lines: list[str]) -> bytes:
    return "".join(f"{line}\n" for line in lines).encode()


def diff(path: str, before: bytes | None, after: bytes) -> bytes:
    """A git-style patch of one file (a creation when `before` is None)."""
    old = before.decode().splitlines(keepends=True) if before is not None else []
    body = "".join(difflib.unified_diff(old, after.decode().splitlines(keepends=True), "/dev/null" if before is None else f"a/{path}", f"b/{path}"))
    created = "new file mode 100644\n" if before is None else ""
    return f"diff --git a/{path} b/{path}\n{created}{body}".encode()


PATCH = diff("f.py", text(OLD), text(PATCHED))
STEP = OldStep(SimpleNamespace(id="0001", file="patches/0001-f.patch"), {"f.py": text(OLD)}, {"f.py": text(PATCHED)})


def outcomes(moved) -> list[tuple]:
    return [(h.path, h.number, h.status, h.offset, h.line, h.reason) for h in moved.report.hunks]


def test_a_patch_on_an_unchanged_file_is_clean_and_its_body_is_the_same_change():
    moved = refresh(STEP, {"f.py": text(OLD)}, PATCH)
    assert outcomes(moved) == [("f.py", 1, "clean", 0, None, ""), ("f.py", 2, "clean", 0, None, "")]
    assert moved.after == {"f.py": text(PATCHED)} and moved.before == {"f.py": text(OLD)} and moved.order == ["f.py"]
    assert moved.report.files[0] == PatchedFile("f.py", sha256_hex(text(OLD)), sha256_hex(text(PATCHED)))
    assert (moved.report.id, moved.report.file, moved.report.status) == ("0001", "patches/0001-f.patch", "clean")
    assert "-line 3\n+line three\n" in moved.body and "-line 15\n+line fifteen\n" in moved.body
    assert [h.header for h in moved.report.hunks] == ["@@ -1,6 +1,6 @@", "@@ -12,7 +12,7 @@"]


def test_lines_added_above_a_hunk_move_it_by_an_offset():
    current = text([*OLD[:8], "upstream a", "upstream b", *OLD[8:]])
    moved = refresh(STEP, {"f.py": current}, PATCH)
    assert outcomes(moved) == [("f.py", 1, "clean", 0, None, ""), ("f.py", 2, "offset", 2, 14, "")]
    assert moved.after["f.py"] == text([*PATCHED[:8], "upstream a", "upstream b", *PATCHED[8:]])
    assert moved.report.status == "offset"


def test_a_hunk_whose_context_changed_upstream_is_merged_three_ways_and_names_the_upstream_line():
    current = text([*OLD[:5], "line six", *OLD[6:]])
    moved = refresh(STEP, {"f.py": current}, PATCH)
    assert outcomes(moved) == [("f.py", 1, "merged", 0, None, ""), ("f.py", 2, "clean", 0, None, "")]
    merged = moved.report.hunks[0]
    assert merged.upstream.conflicting_lines == (6,) and merged.upstream.as_diff() == "@@ -6,1 +6,1 @@\n-line 6\n+line six\n"
    assert moved.after["f.py"] == text([*PATCHED[:5], "line six", *PATCHED[6:]])
    assert moved.report.files[0].after == sha256_hex(moved.after["f.py"]) and moved.report.status == "merged"


def test_a_hunk_whose_own_lines_changed_upstream_is_a_conflict_with_markers_and_no_after_hash():
    current = text([*OLD[:2], "line 3 upstream", *OLD[3:]])
    moved = refresh(STEP, {"f.py": current}, PATCH)
    assert outcomes(moved) == [("f.py", 1, "conflict", 0, None, "both sides change these lines"), ("f.py", 2, "clean", 0, None, "")]
    assert b"<<<<<<< new base\nline 3 upstream\n=======\nline three\n>>>>>>> old patched\n" in moved.after["f.py"]
    assert b"line fifteen\n" in moved.after["f.py"]
    assert moved.report.files[0].before == sha256_hex(current) and moved.report.files[0].after is None
    assert moved.report.status == "conflict" and moved.report.hunks[0].upstream.conflicting_lines == (3,)


def test_a_file_the_new_base_lacks_conflicts_whole_and_one_it_already_has_conflicts_as_a_creation():
    moved = refresh(STEP, {"f.py": None}, PATCH)
    reason = "the new base has no such file"
    assert outcomes(moved) == [("f.py", 1, "conflict", 0, None, reason), ("f.py", 2, "conflict", 0, None, reason)]
    assert moved.after["f.py"].startswith(b"<<<<<<< new base\n=======\nline 1\n") and moved.report.files[0] == PatchedFile("f.py", None, None)
    created = text(["print('new')"])
    creation = OldStep(SimpleNamespace(id="0002", file="patches/0002.patch"), {"n.py": None}, {"n.py": created})
    moved = refresh(creation, {"n.py": text(["upstream = 1"])}, diff("n.py", None, created))
    assert outcomes(moved) == [("n.py", 1, "conflict", 0, None, "the new base already has this file")]
    assert moved.after["n.py"] == b"<<<<<<< new base\nupstream = 1\n=======\nprint('new')\n>>>>>>> old patched\n"
    assert moved.report.files[0].after is None


def test_a_creation_on_a_base_without_the_file_applies_and_the_body_creates_it():
    created = text(["print('new')"])
    creation = OldStep(SimpleNamespace(id="0002", file="patches/0002.patch"), {"n.py": None}, {"n.py": created})
    moved = refresh(creation, {"n.py": None}, diff("n.py", None, created))
    assert outcomes(moved) == [("n.py", 1, "clean", 0, None, "")]
    assert moved.after == {"n.py": created} and moved.report.files[0] == PatchedFile("n.py", None, sha256_hex(created))
    assert "new file mode 100644" in moved.body and "+print('new')" in moved.body


def test_hunks_are_reported_in_the_patchs_file_order_then_by_number():
    two = PATCH + diff("g.py", text(OLD), text([*OLD[:9], "line ten", *OLD[10:]]))
    step = OldStep(STEP.patch, {"f.py": text(OLD), "g.py": text(OLD)}, {"f.py": text(PATCHED), "g.py": text([*OLD[:9], "line ten", *OLD[10:]])})
    moved = refresh(step, {"f.py": text([*OLD[:2], "line 3 upstream", *OLD[3:]]), "g.py": text(OLD)}, two)
    assert [(h.path, h.number) for h in moved.report.hunks] == [("f.py", 1), ("f.py", 2), ("g.py", 1)]
    assert moved.order == ["f.py", "g.py"] and moved.body.index("a/f.py") < moved.body.index("a/g.py")


def test_one_hunk_alone_starts_where_its_old_side_does_and_the_header_is_the_patchs():
    hunks = list(list(unidiff.PatchSet(PATCH.decode()))[0])
    assert hunk_header(hunks[1]) == "@@ -12,7 +12,7 @@"
    alone = one_hunk("f.py", hunks[1]).decode()
    assert alone.startswith("diff --git a/f.py b/f.py\n--- a/f.py\n+++ b/f.py\n@@ -12,7 +12,7 @@\n line 12\n")
    assert patch_tree.apply_exactly(one_hunk("f.py", hunks[1]), {"f.py": text(OLD)})["f.py"] == text(
        [*OLD[:14], "line fifteen", *OLD[15:]])


def test_a_section_applies_to_a_file_to_edit_that_is_there_or_a_file_to_create_that_is_not():
    edit, = unidiff.PatchSet(PATCH.decode())
    create, = unidiff.PatchSet(diff("n.py", None, b"x\n").decode())
    assert applies_to(edit, {"f.py": b"x"}) and not applies_to(edit, {"f.py": None})
    assert applies_to(create, {"n.py": None}) and not applies_to(create, {"n.py": b"x"})
    assert digest(None) is None and digest(b"x") == sha256_hex(b"x")


def test_the_scratch_tree_writes_and_removes_files_and_reads_absent_ones_as_none(tmp_path):
    patch_tree.write_tree(tmp_path, {"a/b/c.py": b"c", "gone.py": None})
    (tmp_path / "old.py").write_bytes(b"old")
    patch_tree.write_tree(tmp_path, {"old.py": None})
    assert patch_tree.read_tree(tmp_path, ["a/b/c.py", "old.py", "a/b"]) == {"a/b/c.py": b"c", "old.py": None, "a/b": None}


def test_apply_with_rejects_keeps_the_hunks_that_apply_and_names_the_rejected_ones():
    current = text([*OLD[:2], "line 3 upstream", *OLD[3:9], "upstream", *OLD[9:]])
    files, found = patch_tree.apply_with_rejects(PATCH, {"f.py": current})
    assert found == {("f.py", 1): HunkApplied("rejected"), ("f.py", 2): HunkApplied("offset", 1, 13)}
    assert files["f.py"] == text([*OLD[:2], "line 3 upstream", *OLD[3:9], "upstream", *OLD[9:14], "line fifteen", *OLD[15:]])


def test_a_patch_git_cannot_read_is_a_patch_error():
    with pytest.raises(PatchError) as caught:
        patch_tree.apply_with_rejects(b"diff --git a/f.py b/f.py\n--- a/f.py\n+++ b/f.py\n@@ -1,2 +1,2 @@\n garbage\n", {"f.py": b"x\n"})
    assert caught.value.exit_code == 5 and "git apply could not read the patch" in caught.value.message
    assert caught.value.fix.startswith("report this with the patch")


def test_applying_or_reversing_exactly_refuses_an_offset_and_a_mismatch():
    assert patch_tree.apply_exactly(PATCH, {"f.py": text(OLD)}) == {"f.py": text(PATCHED)}
    assert patch_tree.reverse_exactly(PATCH, {"f.py": text(PATCHED)}) == {"f.py": text(OLD)}
    for files in ({"f.py": text(["moved", *OLD])}, {"f.py": text(PATCHED)}):
        with pytest.raises(PatchError, match="no longer applies to the file it was locked against") as caught:
            patch_tree.apply_exactly(PATCH, files)
        assert caught.value.fix.startswith("run python build.py lock, then rebase")
    for files in ({"f.py": text(["moved", *PATCHED])}, {"f.py": text(OLD)}):
        with pytest.raises(PatchError, match="does not come back out of overlay/") as caught:
            patch_tree.reverse_exactly(PATCH, files)
        assert caught.value.fix.startswith("run python build.py lock to rewrite overlay/")


def test_a_three_way_merge_counts_its_conflicts():
    assert patch_tree.merge_three(text([*OLD[:5], "line six", *OLD[6:]]), text(OLD), text(PATCHED)) == (
        text([*PATCHED[:5], "line six", *PATCHED[6:]]), 0)
    merged, conflicts = patch_tree.merge_three(text(["a", "upstream", "c"]), text(["a", "b", "c"]), text(["a", "mine", "c"]))
    assert conflicts == 1 and merged == b"a\n<<<<<<< new base\nupstream\n=======\nmine\n>>>>>>> old patched\nc\n"


def test_the_diff_body_has_one_section_per_path_in_order_creations_included():
    before = {"b.py": text(["1", "2"]), "a.py": None}
    after = {"b.py": text(["1", "two"]), "a.py": text(["new"])}
    body = patch_tree.diff_body(before, after, ["b.py", "a.py"])
    assert body.index("diff --git a/b.py b/b.py") < body.index("diff --git a/a.py b/a.py")
    assert "-2\n+two\n" in body and "new file mode 100644" in body and "+new\n" in body
    assert patch_tree.apply_exactly(body.encode(), before) == after
