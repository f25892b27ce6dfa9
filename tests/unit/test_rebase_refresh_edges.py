"""One patch moved onto a new base at the edges: empty files, several sections, conflict headers, created files' hashes."""

from __future__ import annotations

from types import SimpleNamespace

from kvbake.lock import CREATE
from kvbake.rebase.adapters.rebaser import OldStep, base_hashes, refresh

from test_rebase_refresh import OLD, PATCH, PATCHED, STEP, diff, text

EMPTYING = b"diff --git a/e.py b/e.py\n--- a/e.py\n+++ b/e.py\n@@ -1,3 +0,0 @@\n-a\n-b\n-c\n"
EMPTIED = OldStep(SimpleNamespace(id="0003", file="patches/0003.patch"), {"e.py": b"a\nb\nc\n"}, {"e.py": b""})
EDIT = b"diff --git a/e.py b/e.py\n--- a/e.py\n+++ b/e.py\n@@ -1,3 +1,3 @@\n a\n-b\n+X\n c\n"
EDITED = OldStep(SimpleNamespace(id="0004", file="patches/0004.patch"), {"e.py": b"a\nb\nc\n"}, {"e.py": b"a\nX\nc\n"})


def test_a_patch_that_empties_a_file_changed_upstream_conflicts_against_the_empty_file():
    moved = refresh(EMPTIED, {"e.py": b"a\nB\nc\n"}, EMPTYING)
    assert moved.after == {"e.py": b"<<<<<<< new base\na\nB\nc\n=======\n>>>>>>> old patched\n"}
    assert [(h.status, h.header) for h in moved.report.hunks] == [("conflict", "@@ -1,3 +0,0 @@")]


def test_a_patch_that_empties_a_file_the_new_base_lacks_leaves_it_empty():
    assert refresh(EMPTIED, {"e.py": None}, EMPTYING).after == {"e.py": b""}


def test_a_file_the_new_base_holds_empty_conflicts_against_nothing_and_names_every_old_line():
    moved = refresh(EDITED, {"e.py": b""}, EDIT)
    assert moved.after == {"e.py": b"<<<<<<< new base\n=======\na\nX\nc\n>>>>>>> old patched\n"}
    (hunk,) = moved.report.hunks
    assert hunk.header == "@@ -1,3 +1,3 @@" and hunk.status == "conflict"
    assert [(r.old_lines, r.new_lines) for r in hunk.upstream.regions] == [(("a", "b", "c"), ())]


def test_the_hunks_of_a_missing_file_keep_their_headers_and_the_sections_before_them():
    g_after = text([*OLD[:9], "line ten", *OLD[10:]])
    two = diff("g.py", text(OLD), g_after) + PATCH
    step = OldStep(STEP.patch, {"g.py": text(OLD), "f.py": text(OLD)}, {"g.py": g_after, "f.py": text(PATCHED)})
    moved = refresh(step, {"g.py": text(OLD), "f.py": None}, two)
    assert [(h.path, h.number, h.status, h.header) for h in moved.report.hunks] == [
        ("g.py", 1, "clean", "@@ -7,7 +7,7 @@"), ("f.py", 1, "conflict", "@@ -1,6 +1,6 @@"), ("f.py", 2, "conflict", "@@ -12,7 +12,7 @@")]
    assert moved.after["g.py"] == g_after


def test_two_sections_that_both_apply_change_both_files():
    g_after = text([*OLD[:9], "line ten", *OLD[10:]])
    two = PATCH + diff("g.py", text(OLD), g_after)
    step = OldStep(STEP.patch, {"f.py": text(OLD), "g.py": text(OLD)}, {"f.py": text(PATCHED), "g.py": g_after})
    moved = refresh(step, {"f.py": text(OLD), "g.py": text(OLD)}, two)
    assert moved.after == {"f.py": text(PATCHED), "g.py": g_after}


def test_a_file_the_chain_creates_has_no_base_hash_whatever_its_entry_says():
    created = SimpleNamespace(path="n.py", change=CREATE, before="sha256:" + "1" * 64)
    lock = SimpleNamespace(patches=[SimpleNamespace(files=[created])])
    assert base_hashes(lock) == {"n.py": None}


def test_a_patch_that_empties_a_file_the_new_base_already_holds_empty_merges():
    moved = refresh(EMPTIED, {"e.py": b""}, EMPTYING)
    assert moved.after == {"e.py": b""} and [(h.status, h.reason) for h in moved.report.hunks] == [("merged", "")]


def lines(letters: str) -> bytes:
    return "".join(f"{letter}\n" for letter in letters).encode()


def test_hunks_that_merge_one_by_one_but_not_together_are_a_conflict_named_so():
    patch = (b"diff --git a/f.py b/f.py\n--- a/f.py\n+++ b/f.py\n"
             b"@@ -4 +4 @@\n-a\n+P\n@@ -7,0 +8 @@\n+Q\n@@ -11 +11,0 @@\n-a\n")
    step = OldStep(SimpleNamespace(id="0005", file="patches/0005.patch"), {"f.py": lines("bababaaaaaa")}, {"f.py": lines("babPbaaQaaa")})
    moved = refresh(step, {"f.py": lines("babUbbaaaaaa")}, patch)
    assert [(h.number, h.status, h.reason) for h in moved.report.hunks] == [
        (1, "offset", ""), (2, "offset", ""), (3, "conflict", "the file's hunks conflict when merged together")]
    assert moved.report.files[0].after is None


CREATING = b"diff --git a/n.py b/n.py\nnew file mode 100644\n--- /dev/null\n+++ b/n.py\n@@ -0,0 +1,2 @@\n+x = 1\n+y = 2\n"
CREATED = OldStep(SimpleNamespace(id="0005", file="patches/0005.patch"), {"n.py": None}, {"n.py": b"x = 1\ny = 2\n"})


def test_a_file_the_patch_creates_that_the_new_base_holds_empty_merges_to_the_patchs_content():
    moved = refresh(CREATED, {"n.py": b""}, CREATING)
    assert moved.after == {"n.py": b"x = 1\ny = 2\n"}, "nothing on either side to conflict with: the created lines, no markers"
    assert [(h.status, h.reason) for h in moved.report.hunks] == [("conflict", "the new base already has this file")]
